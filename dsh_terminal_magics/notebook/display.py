"""Rich results of the magics: the tool result's fields, a one-line text repr, escaped HTML."""
from __future__ import annotations

import html
from typing import Any

from pydantic import BaseModel



class TermResult:
    """What a magic returns: attribute access to the tool result, a stable text repr and safe HTML.

    ``r = %term_send ls`` then ``r.exit_code``, ``r.viewport``, ``r.model``
    (the pydantic model) and ``r.json()`` (the seed's camelCase JSON).
    """

    def __init__(self, model: BaseModel, text: str, html_body: str | None = None) -> None:
        self.model = model
        self.text = text
        self._html = html_body

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def json(self) -> Any:
        return self.model.model_dump(by_alias=True, exclude_none=True)

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text)

    def _repr_html_(self) -> str:
        if self._html is not None:
            return self._html
        return f'<pre style="margin:0">{html.escape(self.text)}</pre>'


def footer_text(wait_reason: str, exit_code: int | None, session_status: str, interrupted: bool = False) -> str:
    parts = [f"wait: {wait_reason}", f"exit: {exit_code if exit_code is not None else '-'}",
             f"session: {session_status}"]
    if interrupted:
        parts.append("interrupted")
    return "[" + " | ".join(parts) + "]"


def footer_html(text: str, wait_reason: str) -> str:
    colour = {"stdin_read": "#0a7d32", "session_exit": "#7a7a7a"}.get(wait_reason, "#b36b00")
    return (f'<div style="font-family:monospace;font-size:90%;color:{colour}">'
            f"{html.escape(text)}</div>")


def visible_controls(text: str) -> str:
    """Text with every control character but newline and tab shown as an escape (``\\x1b``), so a
    session name or job label can never act on the terminal that prints a listing."""
    return "".join(ch if ch in "\n\t" or (ch.isprintable() and not 0x80 <= ord(ch) <= 0x9f)
                   else ch.encode("unicode_escape").decode("ascii") for ch in text)
