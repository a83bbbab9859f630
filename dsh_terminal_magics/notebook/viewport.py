"""The live terminal viewport: an ipywidgets view of one session, for teaching demos.

The viewport follows its session through the tools layer
(:meth:`TerminalTools.follow`): on the loop thread, at most ``fps`` times a
second, it receives the session's current view and replaces the screen's
content (the newest ``rows`` lines, escaped, colours kept - or the full
screen of a full-screen program) in one ``hold_sync`` batch.  The input box
and the key buttons type into the terminal from whatever thread the
frontend calls them on (with JupyterLab's comms over subshells that is not
the main thread); the follower enters the loop thread for them.
"""
from __future__ import annotations

import html
from typing import Any, Callable

import ipywidgets as widgets

from ..owners import Agent
from ..tools import TerminalTools, TerminalView
from .ansi_html import output_html, sanitize_stream, screen_html, strip_sgr, terminal_lines, terminal_pre

#: Buttons: label -> key name (encoded by the same table as ``terminal_send``'s ``keys``).
KEY_BUTTONS: dict[str, str] = {"Ctrl-C": "C-c", "Ctrl-D": "C-d", "Tab": "Tab", "Esc": "Esc", "Up": "Up",
                               "Down": "Down"}


def snapshot_text(view: TerminalView) -> str:
    """Plain text of what the view shows: the full screen, or the newest ``rows`` lines."""
    if view.screen is not None:
        lines = [line.rstrip() for line in view.screen.display]
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)
    lines = terminal_lines(sanitize_stream(view.tail, line_motion=True))[-view.rows:]
    return "\n".join(strip_sgr(line) for line in lines)


def view_html(view: TerminalView) -> str:
    """The screen widget's HTML for ``view`` (loop thread: it reads the live screen)."""
    if view.screen is not None:
        return terminal_pre(screen_html(view.screen), "dsh-screen", view.foreground, view.background, wrap=False)
    return output_html(view.tail, view.rows)


class TerminalViewport(widgets.VBox):
    """A live view of one session: screen, status line, input box and key buttons.

    Refreshes at most ``fps`` times a second, replacing content; a closed
    session leaves its final view.  ``job_id`` (optional) puts that job's
    status in the status line.
    """

    def __init__(self, tools: TerminalTools, owner: Agent, session_id: str, *, rows: int | None = None,
                 fps: float = 20.0, title: str = "", job_id: str | None = None) -> None:
        self._tools = tools
        self._owner = owner
        self.session_id = session_id
        self._title = title
        self._job_id = job_id
        self._last_html = ""
        self._rows_override = rows
        # Followed first: a foreign or unknown session is refused before any widget exists (built first, seven
        # stayed open in the kernel, each raising from its close when collected).  Views wait for the widgets.
        self._built = False
        self._follower = tools.follow(session_id, agent=owner, on_change=self._show, fps=fps)
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
        self._built = True
        self._follower.refresh()
        self.rows = rows or self._follower.rows
        self.cols = self._follower.cols

    def __repr__(self) -> str:
        return f"TerminalViewport(session={self.session_id}, {self.cols}x{self.rows})"

    # -- loop thread ----------------------------------------------------------------------
    def _show(self, view: TerminalView) -> None:
        if not self._built:
            return
        if self._rows_override:
            view = _with_rows(view, self._rows_override)
        screen = view_html(view)
        status = self._status_html(view)
        if screen == self._last_html and status == self.status.value:
            return
        self._last_html = screen
        with self.screen.hold_sync(), self.status.hold_sync():
            self.screen.value = screen
            self.status.value = status

    def _status_html(self, view: TerminalView) -> str:
        parts = [f"session {view.session_id}", f"status: {view.status}", f"pid: {view.pid}",
                 f"last wait: {view.last_wait_reason or '-'}",
                 f"exit: {view.last_exit_code if view.last_exit_code is not None else '-'}"]
        if self._job_id is not None:
            try:
                parts.insert(0, f"job {self._job_id}: {self._tools.job_status(self._job_id, agent=self._owner)}")
            except Exception:
                parts.insert(0, f"job {self._job_id}: forgotten")
        if self._title:
            parts.insert(0, self._title)
        return f'<span style="font-family:monospace;font-size:85%">{html.escape(" | ".join(parts))}</span>'

    # -- any thread --------------------------------------------------------------------------
    def _on_input(self, change: dict[str, Any]) -> None:
        text = change["new"]
        if not text:
            return
        self.type_text(text)
        self.input.value = ""

    def type_text(self, text: str, enter: bool = True) -> None:
        """Type ``text`` (and Enter) into the terminal, as a person at the keyboard would."""
        self._follower.type_text(text, enter)

    def press(self, label: str) -> None:
        """Press one of the :data:`KEY_BUTTONS` (application cursor mode respected)."""
        self._follower.press(KEY_BUTTONS[label])

    def _key_handler(self, label: str) -> Callable[[Any], None]:
        return lambda _button: self.press(label)

    def snapshot(self) -> str:
        """Plain text of what the screen shows now (the full screen while a program has one)."""
        rows = self._rows_override
        return self._follower.view(lambda v: snapshot_text(_with_rows(v, rows) if rows else v))

    def flush(self) -> None:
        """Render pending output now (waits for the loop thread)."""
        self._follower.refresh()

    def close(self) -> None:
        """Stop following the session, then close the widget."""
        self.detach()
        super().close()

    def detach(self) -> None:
        """Stop following the session (the widget keeps its last view)."""
        follower = getattr(self, "_follower", None)  # (none when the session was refused: see __init__)
        if follower is not None:
            follower.close()


def _with_rows(view: TerminalView, rows: int) -> TerminalView:
    from dataclasses import replace
    return replace(view, rows=rows)
