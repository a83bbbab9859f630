"""Play an asciinema v2 recording back in a viewport, at a chosen speed."""
from __future__ import annotations

import threading
import time
from typing import Any

import ipywidgets as widgets

from ..mechanism.event_loop import EventLoopThread
from ..mechanism.recording import read_cast
from ..mechanism.screen import ScreenModel
from .ansi_html import screen_html

#: Longest pause replayed (seconds, after the speed-up): long idle stretches are shortened.
MAX_PAUSE = 2.0


class ReplayViewport(widgets.VBox):
    """Replays a ``.cast`` file into a screen widget; events are scheduled on the terminal loop thread."""

    def __init__(self, path: str, speed: float = 1.0, fps: float = 20.0,
                 loop_thread: EventLoopThread | None = None) -> None:
        if not speed > 0:
            from ..errors import InvalidArgumentError
            raise InvalidArgumentError(f"speed must be > 0, got {speed!r}")
        header, events = read_cast(path)
        self.path = path
        self.rows, self.cols = int(header.get("height", 24)), int(header.get("width", 80))
        self.model = ScreenModel(self.rows, self.cols, 0)
        self.screen = widgets.HTML()
        self.status = widgets.HTML()
        super().__init__([self.screen, self.status])
        self._events = events
        self._speed = speed
        self._interval = 1.0 / fps
        self._loop = loop_thread or EventLoopThread.shared()
        self._done = threading.Event()
        self._pending: Any = None
        self._played = 0
        self._loop.call(self._schedule)

    def __repr__(self) -> str:
        return f"ReplayViewport({self.path!r}, {self.cols}x{self.rows})"

    def _schedule(self) -> None:
        loop = self._loop.loop
        delay, previous = 0.0, 0.0
        for index, (stamp, kind, data) in enumerate(self._events):
            delay += min((stamp - previous) / self._speed, MAX_PAUSE)
            previous = stamp
            loop.call_later(delay, self._apply, kind, data, index == len(self._events) - 1)
        if not self._events:
            loop.call_soon(self._finish)

    def _apply(self, kind: str, data: str, last: bool) -> None:
        if kind == "o":
            self.model.feed_text(data)
        elif kind == "r" and "x" in data:
            cols, rows = (int(v) for v in data.split("x", 1))
            self.model.resize(rows, cols)
        self._played += 1
        if last:
            self._finish()
        elif self._pending is None:
            self._pending = self._loop.loop.call_later(self._interval, self._refresh)

    def _refresh(self) -> None:
        self._pending = None
        with self.screen.hold_sync(), self.status.hold_sync():
            self.screen.value = ('<pre style="margin:0;padding:4px;background:#1e1e1e;color:#e5e5e5;'
                                 'font-family:monospace">' + screen_html(self.model.screen) + "</pre>")
            self.status.value = (f'<span style="font-family:monospace;font-size:85%">replay {self._played}/'
                                 f'{len(self._events)} events at {self._speed}x</span>')

    def _finish(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
        self._refresh()
        self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the replay has finished; False on timeout."""
        return self._done.wait(timeout)

    def snapshot(self) -> str:
        """The replayed screen as text, now."""
        return self._loop.call(lambda: self.model.snapshot().text())


def replay_text(path: str) -> str:
    """Replay a recording instantly and return its final screen as text (for terminals)."""
    header, events = read_cast(path)
    model = ScreenModel(int(header.get("height", 24)), int(header.get("width", 80)), 0)
    for _stamp, kind, data in events:
        if kind == "o":
            model.feed_text(data)
        elif kind == "r" and "x" in data:
            cols, rows = (int(v) for v in data.split("x", 1))
            model.resize(rows, cols)
    return model.snapshot().text()
