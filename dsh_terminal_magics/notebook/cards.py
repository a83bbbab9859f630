"""Call/result cards: each tool call of an agent loop as a compact, escaped HTML card in the cell.

``show_cards(tools)`` registers an observer on a
:class:`~dsh_terminal_magics.TerminalTools`: every call then displays one card
in the running cell, in order, so a notebook shows the agent's whole
trajectory and a saved notebook keeps it as static HTML.  Foreground sends get
a terminal card (command, coloured viewport, wait reason, exit code); the
others a generic card: ``execute`` (open, signal, background send, job_kill),
``read`` (read, list, job_output) or ``delete`` (close).  Program output is
escaped exactly as in the viewport.
"""
from __future__ import annotations

import html
import json
from typing import Any, Callable

from ..tools.models import ForegroundSendResult
from ..tools.policies import PolicyDenied, PolicyOutcome, ToolCall
from .ansi_html import ansi_to_html, sanitize_stream, terminal_lines, terminal_pre

CARD_KINDS = {"terminal_open": "execute", "terminal_signal": "execute", "terminal_read": "read",
              "terminal_list": "read", "terminal_close": "delete", "job_output": "read", "job_kill": "execute"}
_COLOURS = {"terminal": "#2472c8", "execute": "#0dbc79", "read": "#11a8cd", "delete": "#bc3fbc",
            "error": "#cd3131", "denied": "#e5a50a"}
_BOX = ("border:1px solid #d0d0d0;border-left:4px solid {colour};margin:4px 0;padding:4px 8px;"
        "font-family:monospace;font-size:90%")
_PRE = "margin:2px 0;white-space:pre-wrap;"


def card_kind(call: ToolCall, result: Any, error: BaseException | None) -> str:
    if isinstance(error, PolicyDenied):
        return "denied"
    if error is not None:
        return "error"
    if call.name == "terminal_send":
        return "terminal" if isinstance(result, ForegroundSendResult) else "execute"
    return CARD_KINDS.get(call.name, "execute")


def card_html(call: ToolCall, result: Any, error: BaseException | None,
              render: Callable[[Any], Any]) -> str:
    """One card.  ``render`` turns a result into the capped text the model saw."""
    kind = card_kind(call, result, error)
    agent = html.escape(str(getattr(call.agent, "name", "agent")))
    head = (f'<div><b>{html.escape(call.name)}</b> <span style="color:#777">{kind} · {agent}</span>'
            f'{_target(call)}</div>')
    if kind == "terminal":
        body = _terminal_body(call, result)
    elif error is not None:
        body = f'<pre style="{_PRE}color:{_COLOURS[kind]}">{html.escape(str(error))}</pre>'
    else:
        text = render(result)
        if isinstance(text, list):
            text = json.dumps(text, indent=1, sort_keys=True)
        if isinstance(result, PolicyOutcome):
            head += f'<div style="color:{_COLOURS["denied"]}">result from policy {html.escape(result.policy)}</div>'
        body = f'<pre style="{_PRE}">{html.escape(str(text))}</pre>'
    colour = _COLOURS[kind]
    return f'<div class="dsh-card dsh-card-{kind}" style="{_BOX.format(colour=colour)}">{head}{body}</div>'


def _target(call: ToolCall) -> str:
    target = call.args.get("sessionId") or call.args.get("jobId") or call.args.get("type")
    return f' <span style="color:#777">{html.escape(str(target))}</span>' if target else ""


def _terminal_body(call: ToolCall, result: ForegroundSendResult) -> str:
    text = str(call.args.get("text", ""))
    command = f"(a secret: {len(text)} characters, not shown)" if call.secret else html.escape(text)
    raw = result.raw_output.decode("utf-8", "replace") if result.raw_output else result.viewport
    screen = ansi_to_html("\n".join(terminal_lines(sanitize_stream(raw, line_motion=True))))
    exit_code = "-" if result.exit_code is None else result.exit_code
    footer = (f"[wait: {result.wait_reason}] [exit: {exit_code}] [session: {result.session_status}]"
              + (" [truncated]" if result.truncated else ""))
    return (f'<pre style="{_PRE}">$ {command}</pre>'
            f'{terminal_pre(screen, "dsh-card-screen")}'
            f'<div style="color:#555">{html.escape(footer)}</div>')


class CardDisplay:
    """The observer :func:`show_cards` registers; keeps the HTML it showed in ``cards``."""

    def __init__(self, tools: Any, display: bool = True) -> None:
        self.tools = tools
        self.display = display
        self.cards: list[str] = []

    def __call__(self, call: ToolCall, result: Any, error: BaseException | None) -> None:
        card = card_html(call, result, error, self.tools.render)
        self.cards.append(card)
        if self.display:
            from IPython.display import HTML, display
            display(HTML(card))

    def close(self) -> None:
        """Stop showing cards."""
        if self in self.tools.observers:
            self.tools.observers.remove(self)


def show_cards(tools: Any, display: bool = True) -> CardDisplay:
    """Show a card for every call ``tools`` makes from now on; returns the observer (``.close()`` stops)."""
    observer = CardDisplay(tools, display)
    tools.observers.append(observer)
    return observer
