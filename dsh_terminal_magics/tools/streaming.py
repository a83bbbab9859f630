"""What people watching a session need from the tools layer: output as it arrives, and live views.

* :class:`LiveOutput` follows a session's raw output from an offset and hands
  sanitised text (colours kept, everything else neutralised) to a callback,
  holding back an unfinished escape sequence until it completes.  The
  streaming foreground send of :meth:`TerminalTools.call` uses it.
* :class:`SessionFollower` is an owner-fenced handle on one live session for
  viewers: a coalesced change callback (at most ``fps`` a second, on the loop
  thread), the current :class:`TerminalView`, and typing into the terminal.
"""
from __future__ import annotations

import codecs
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import pyte

from ..ansi import UNFINISHED, sanitize_stream
from ..mechanism import EventLoopThread, Session
from ..mechanism.keys import encode_keys

log = logging.getLogger(__name__)

#: How often new output is handed to ``on_output`` while a streaming send waits (seconds).
FLUSH_INTERVAL = 0.05
#: Bytes of raw output a view carries for line rendering (enough for a screenful of long lines).
VIEW_TAIL_BYTES = 64 * 1024
#: Seconds one view may spend feeding the screen model (pyte is slow; the rest waits for the next view).
SCREEN_SECONDS = 0.01


class LiveOutput:
    """Sanitised text of a session's output from raw offset ``offset`` on, pulled from any thread."""

    def __init__(self, loop: EventLoopThread, session: Session, offset: int,
                 on_output: Callable[[str], None]) -> None:
        self._loop = loop
        self._session = session
        self.offset = offset
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._on_output = on_output

    def _grab(self) -> tuple[bytes, int, int]:
        data, lost = self._session.raw.since(self.offset)
        return data, lost, self._session.raw.total

    def flush(self, final: bool = False) -> None:
        """Hand over what arrived since the last flush."""
        data, lost, total = self._loop.call(self._grab)
        self.offset = total
        text = self._pending + self._decoder.decode(data, final=final)
        self._pending = ""
        if not final:
            tail = UNFINISHED.search(text)
            if tail is not None:
                self._pending, text = text[tail.start():], text[: tail.start()]
        out = sanitize_stream(text)
        if lost:
            out = f"\n[... {lost} bytes of output skipped ...]\n" + out
        if out:
            self._on_output(out)


@dataclass(frozen=True)
class TerminalView:
    """What a viewer shows of a session at one moment (built on the loop thread)."""

    session_id: str
    status: str
    pid: int | None
    last_wait_reason: str | None
    last_exit_code: int | None
    rows: int
    cols: int
    #: Raw text of the newest output (escape sequences included; cut at a line start).
    tail: str
    #: The pyte screen while a full-screen program has the terminal (read it on the loop thread only).
    screen: pyte.Screen | None
    #: True when the screen model has not caught up yet (another view will follow).
    behind: bool
    foreground: str
    background: str


class SessionFollower:
    """A live, owner-fenced handle on one session; create with :meth:`TerminalTools.follow`.

    ``on_change(view)`` runs on the loop thread at most ``fps`` times a second
    after output or a state change.  :meth:`close` detaches it.
    """

    def __init__(self, loop: EventLoopThread, session: Session, on_change: Callable[[TerminalView], None] | None,
                 fps: float = 20.0) -> None:
        self._loop = loop
        self._session = session
        self.session_id = session.session_id
        self._on_change = on_change
        self._interval = 1.0 / fps
        self._pending: Any = None
        self._last = 0.0
        self.rows, self.cols = loop.call(session.size)
        if on_change is not None:
            loop.call(self._attach)

    def _attach(self) -> None:
        self._session.listeners.register(self._changed)
        self._emit()

    def _changed(self) -> None:
        if self._pending is not None:
            return
        delay = max(0.0, self._last + self._interval - time.monotonic())
        self._pending = self._session.loop.call_later(delay, self._emit)

    def _emit(self) -> None:
        self._pending = None
        self._last = time.monotonic()
        view = self.view_on_loop()
        if view.behind:
            self._changed()  # more to feed: come back at the next refresh
        if self._session.status == "closed":
            self._session.listeners.register(self._changed, remove=True)
        assert self._on_change is not None
        try:
            self._on_change(view)
        except Exception:
            log.exception("a terminal viewer failed (ignored)")

    def view_on_loop(self) -> TerminalView:
        """The current view (loop thread only)."""
        s = self._session
        screen, behind = None, False
        if s.screen.full_screen:
            behind = not s.screen.catch_up(seconds=SCREEN_SECONDS)
            screen = s.screen.model.screen
        data = s.raw.tail(VIEW_TAIL_BYTES)
        text = data.decode("utf-8", "replace")
        if s.raw.total > len(data) and "\n" in text:
            text = text[text.index("\n") + 1:]
        rows, cols = s.size()
        return TerminalView(s.session_id, s.public_status, s.pid, s.last_wait_reason, s.last_exit_code, rows, cols,
                            text, screen, behind, s.replies.foreground, s.replies.background)

    def view(self, render: Callable[[TerminalView], Any] = lambda v: v) -> Any:
        """``render(view)`` run on the loop thread (render there anything that reads ``view.screen``)."""
        return self._loop.call(lambda: render(self.view_on_loop()))

    def type_text(self, text: str, enter: bool = True) -> None:
        """Type ``text`` (and Enter) into the terminal, as a person at the keyboard would."""
        data = text.encode("utf-8", "surrogateescape") + (b"\r" if enter else b"")
        self._loop.call(self._session.type_input, data)

    def press(self, key: str) -> None:
        """Press a named key (``C-c``, ``Up`` …; cursor keys follow the program's mode)."""
        self._loop.call(lambda: self._session.type_input(
            encode_keys([key], self._session.screen.application_cursor)))

    def refresh(self) -> None:
        """Emit a view now (waits for the loop thread)."""
        if self._on_change is not None:
            self._loop.call(self._emit)

    def close(self) -> None:
        """Stop following the session (never blocks: safe from ``__del__`` and from any thread)."""
        def detach() -> None:
            self._session.listeners.register(self._changed, remove=True)
            if self._pending is not None:
                self._pending.cancel()
                self._pending = None
        if self._loop.in_loop_thread():
            detach()
        elif self._loop.thread.is_alive():
            self._loop.loop.call_soon_threadsafe(detach)
