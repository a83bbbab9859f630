"""Play an asciinema v2 recording back in a viewport, at a chosen speed."""
from __future__ import annotations

import threading
import time

import ipywidgets as widgets

from ..errors import InvalidArgumentError
from ..tools.recordings import CastPlayer
from .ansi_html import screen_html, terminal_pre

#: Longest pause replayed (seconds, after the speed-up): long idle stretches are shortened.
MAX_PAUSE = 2.0


class ReplayViewport(widgets.VBox):
    """Replays a ``.cast`` file into a screen widget from a player thread of its own."""

    def __init__(self, path: str, speed: float = 1.0, fps: float = 20.0) -> None:
        if not speed > 0:
            raise InvalidArgumentError(f"speed must be > 0, got {speed!r}")
        self.player = CastPlayer(path)
        self.path = path
        self.rows, self.cols = self.player.rows, self.player.cols
        self.screen = widgets.HTML()
        self.status = widgets.HTML()
        super().__init__([self.screen, self.status])
        self._speed = speed
        self._interval = 1.0 / fps
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._played = 0
        threading.Thread(target=self._play, name="dsh-terminal-replay", daemon=True).start()

    def __repr__(self) -> str:
        return f"ReplayViewport({self.path!r}, {self.cols}x{self.rows})"

    def _play(self) -> None:
        started = time.monotonic()
        delay, previous, last_refresh = 0.0, 0.0, 0.0
        for stamp, kind, data in self.player.events:
            delay += min((stamp - previous) / self._speed, MAX_PAUSE)
            previous = stamp
            wait = started + delay - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            with self._lock:
                self.player.apply(kind, data)
                self._played += 1
            if time.monotonic() - last_refresh >= self._interval:
                last_refresh = time.monotonic()
                self._refresh()
        self._refresh()
        self._done.set()

    def _refresh(self) -> None:
        with self._lock:
            body = screen_html(self.player.screen)
            played = self._played
        with self.screen.hold_sync(), self.status.hold_sync():
            self.screen.value = terminal_pre(body, "dsh-replay", wrap=False)
            self.status.value = (f'<span style="font-family:monospace;font-size:85%">replay {played}/'
                                 f'{len(self.player.events)} events at {self._speed}x</span>')

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the replay has finished; False on timeout."""
        return self._done.wait(timeout)

    def snapshot(self) -> str:
        """The replayed screen as text, now."""
        with self._lock:
            return self.player.text()


def replay_text(path: str) -> str:
    """Replay a recording instantly and return its final screen as text (for terminals)."""
    return CastPlayer(path).play_all()
