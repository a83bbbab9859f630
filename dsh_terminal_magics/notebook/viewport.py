"""The live terminal viewport: an ipywidgets view of one session, for teaching demos.

The session's loop thread notifies the viewport when output arrives; the
viewport coalesces those notifications into at most ``fps`` refreshes a
second, each replacing the screen's content (the newest ``rows`` lines,
escaped, colours kept) in one ``hold_sync`` batch.  The input box and the
key buttons write keystrokes to the terminal from whatever thread the
frontend calls them on (with JupyterLab's comms over subshells that is not
the main thread): every callback enters the loop thread through
:meth:`EventLoopThread.call`.
"""
from __future__ import annotations

import html
import time
from typing import Any, Callable

import ipywidgets as widgets

from ..mechanism import SessionManager
from ..mechanism.keys import encode_keys
from ..mechanism.session import Session
from .ansi_html import output_html, sanitize_stream, screen_html, strip_sgr, terminal_lines

#: Bytes of raw output the screen is rendered from (enough for ``rows`` long lines).
RENDER_TAIL_BYTES = 64 * 1024

#: Buttons: label -> key name (encoded by the same table as ``terminal_send``'s ``keys``).
KEY_BUTTONS: dict[str, str] = {"Ctrl-C": "C-c", "Ctrl-D": "C-d", "Tab": "Tab", "Esc": "Esc", "Up": "Up",
                               "Down": "Down"}
#: Seconds a refresh may spend feeding the screen model (pyte is slow; the rest waits for the next refresh,
#: and far behind it resynchronises from the newest output), so a flood never starves the reader.
SCREEN_SECONDS = 0.01


def render_tail(session: Session, rows: int) -> str:
    """Raw text of the session's newest output, cut at a line start when the ring was cut."""
    data = session.raw.tail(RENDER_TAIL_BYTES)
    text = data.decode("utf-8", "replace")
    if session.raw.total > len(data) and "\n" in text:
        text = text[text.index("\n") + 1:]
    return text


def snapshot_text(session: Session, rows: int) -> str:
    """Plain-text snapshot of the newest ``rows`` lines (for terminals and saved notebooks)."""
    lines = terminal_lines(sanitize_stream(render_tail(session, rows)))[-rows:]
    return "\n".join(strip_sgr(line) for line in lines)


class TerminalViewport(widgets.VBox):
    """A live view of one session: screen, status line, input box and key buttons.

    Refreshes at most ``fps`` times a second, replacing content; a closed
    session leaves its final view.  ``job_status`` (optional) is a callable
    giving a job's status for the status line.
    """

    def __init__(self, manager: SessionManager, owner: object, session_id: str, *, rows: int | None = None,
                 fps: float = 20.0, title: str = "", job_status: Callable[[], str] | None = None) -> None:
        self._manager = manager
        self._owner = owner
        self._loop = manager.loop_thread
        self._session = manager.session(owner, session_id)
        self.session_id = session_id
        self.rows = rows or self._session.options.rows
        self.cols = self._session.options.cols
        self._interval = 1.0 / fps
        self._title = title
        self._job_status = job_status
        self._pending: Any = None
        self._last_refresh = 0.0
        self._last_html = ""
        self.refresh_count = 0
        self.screen = widgets.HTML(layout=widgets.Layout(width="100%"))
        self.status = widgets.HTML()
        self.input = widgets.Text(placeholder="type a line and press Enter", continuous_update=False,
                                  layout=widgets.Layout(width="50%"))
        self.input.observe(self._on_input, names="value")
        self.buttons = []
        for label in KEY_BUTTONS:
            button = widgets.Button(description=label, layout=widgets.Layout(width="auto"))
            button.on_click(self._key_handler(label))
            self.buttons.append(button)
        super().__init__([self.screen, self.status, widgets.HBox([self.input, *self.buttons])])
        self._loop.call(self._attach)

    def __repr__(self) -> str:
        return f"TerminalViewport(session={self.session_id}, {self.cols}x{self.rows})"

    # -- loop thread ----------------------------------------------------------------------
    def _attach(self) -> None:
        self._session.listeners.append(self._on_output)
        self._refresh()

    def _on_output(self) -> None:
        if self._pending is not None:
            return
        delay = max(0.0, self._last_refresh + self._interval - time.monotonic())
        self._pending = self._session.loop.call_later(delay, self._refresh)

    def _refresh(self) -> None:
        self._pending = None
        self._last_refresh = time.monotonic()
        screen = self._screen_html()
        status = self._status_html()
        if screen == self._last_html and status == self.status.value:
            return
        self._last_html = screen
        self.refresh_count += 1
        with self.screen.hold_sync(), self.status.hold_sync():
            self.screen.value = screen
            self.status.value = status
        if self._session.status == "closed" and self._on_output in self._session.listeners:
            self._session.listeners.remove(self._on_output)

    def _screen_html(self) -> str:
        session = self._session
        if session.full_screen and session.screen is not None:
            caught_up = session.screen.catch_up(session.raw, seconds=SCREEN_SECONDS)
            if not caught_up:
                self._on_output()  # more to feed: come back at the next refresh
            return ('<pre class="dsh-terminal dsh-screen" style="margin:0;padding:4px;background:#1e1e1e;'
                    'color:#e5e5e5;font-family:monospace">' + screen_html(session.screen.screen) + "</pre>")
        return output_html(render_tail(session, self.rows), self.rows)

    def _status_html(self) -> str:
        s = self._session
        parts = [f"session {s.session_id}", f"status: {s.status}", f"pid: {s.pid}",
                 f"last wait: {s.last_wait_reason or '-'}",
                 f"exit: {s.last_exit_code if s.last_exit_code is not None else '-'}"]
        if self._job_status is not None:
            parts.insert(0, self._job_status())
        if self._title:
            parts.insert(0, self._title)
        return f'<span style="font-family:monospace;font-size:85%">{html.escape(" | ".join(parts))}</span>'

    def _write(self, data: bytes) -> None:
        self._session.write_input(data)

    # -- any thread --------------------------------------------------------------------------
    def _on_input(self, change: dict[str, Any]) -> None:
        text = change["new"]
        if not text:
            return
        self.type_text(text)
        self.input.value = ""

    def type_text(self, text: str, enter: bool = True) -> None:
        """Type ``text`` (and Enter) into the terminal, as a person at the keyboard would."""
        data = text.encode("utf-8") + (b"\r" if enter else b"")
        self._loop.call(self._write, data)

    def press(self, label: str) -> None:
        """Press one of the :data:`KEY_BUTTONS` (application cursor mode respected)."""
        key = KEY_BUTTONS[label]
        self._loop.call(lambda: self._write(encode_keys([key], self._session.application_cursor)))

    def _key_handler(self, label: str) -> Callable[[Any], None]:
        return lambda _button: self.press(label)

    def snapshot(self) -> str:
        """Plain text of what the screen shows now (the full screen while a program has one)."""
        def text() -> str:
            session = self._session
            if session.full_screen and session.screen is not None:
                snap = session.screen_snapshot()
                return snap.text() if snap else ""
            return snapshot_text(session, self.rows)
        return self._loop.call(text)

    def flush(self) -> None:
        """Render pending output now (waits for the loop thread)."""
        self._loop.call(self._refresh)

    def detach(self) -> None:
        """Stop following the session."""
        def detach_on_loop() -> None:
            if self._on_output in self._session.listeners:
                self._session.listeners.remove(self._on_output)
            if self._pending is not None:
                self._pending.cancel()
                self._pending = None
        self._loop.call(detach_on_loop)
