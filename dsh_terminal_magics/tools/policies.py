"""Policies around every tool call: before (deny, rewrite, short-circuit), around, after (replace).

A :class:`Policy` is a name plus up to three plain functions:

* ``before(call)`` returns ``None`` (go on), :class:`Deny`, :class:`Rewrite` or
  :class:`ShortCircuit`;
* ``around(call, proceed)`` wraps the execution and returns a result (usually
  ``proceed()``'s);
* ``after(call, result)`` returns ``None`` (keep) or :class:`Replace`.

Results a policy supplies may be a tool result model, a string, or a list of
content blocks (``{"type": "text", "text": ...}``, ``{"type": "image", ...}``);
strings and models go through the same capped renderer as any tool result,
block lists keep their shape.  A policy that raises or returns something else
is a :class:`PolicyError` naming it, and the call is not executed.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Union

from pydantic import BaseModel, ConfigDict

from ..errors import TerminalError

Content = Union[str, list, BaseModel]


class PolicyError(TerminalError):
    """A policy failed (raised, returned the wrong type, or rewrote arguments into invalid ones)."""


class PolicyDenied(TerminalError):
    """A policy refused the call; nothing was executed."""

    def __init__(self, policy: str, reason: str) -> None:
        super().__init__(f"denied by policy {policy!r}: {reason}")
        self.policy = policy
        self.reason = reason


@dataclass(frozen=True)
class ToolCall:
    """What a policy sees: the tool, its (validated, JSON-form) arguments and the initiating agent."""

    name: str
    args: dict[str, Any]
    agent: Any


@dataclass(frozen=True)
class Deny:
    reason: str


@dataclass(frozen=True)
class Rewrite:
    args: dict[str, Any]


@dataclass(frozen=True)
class ShortCircuit:
    result: Content


@dataclass(frozen=True)
class Replace:
    result: Content


@dataclass
class Policy:
    """A named set of hooks; any of them may be omitted."""

    name: str
    before: Optional[Callable[[ToolCall], Any]] = None
    around: Optional[Callable[[ToolCall, Callable[[], Any]], Any]] = None
    after: Optional[Callable[[ToolCall, Any], Any]] = None
    tools: Optional[frozenset[str]] = field(default=None)

    def applies(self, name: str) -> bool:
        return self.tools is None or name in self.tools


class PolicyOutcome(BaseModel):
    """A result that came from a policy instead of the tool (short-circuit or replacement)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    policy: str
    outcome: str
    content: Any


def check_content(policy: str, hook: str, value: Any) -> Content:
    """Accept a string, a tool result model or a list of content blocks; anything else is a PolicyError."""
    if isinstance(value, (str, BaseModel)):
        return value
    if isinstance(value, list) and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in value):
        return value
    raise PolicyError(f"policy {policy!r} {hook} returned {type(value).__name__}: return a string, a tool "
                      "result, or a list of content blocks like {'type': 'text', 'text': ...}")


# -- ready policies -----------------------------------------------------------------------------
def deny_commands(patterns: Iterable[str], name: str = "deny-list") -> Policy:
    """Deny ``terminal_send`` whose text matches any of ``patterns`` (regular expressions)."""
    compiled = [re.compile(p) for p in patterns]

    def before(call: ToolCall) -> Optional[Deny]:
        text = call.args.get("text", "")
        for pattern in compiled:
            if pattern.search(text):
                return Deny(f"the command matches the denied pattern {pattern.pattern!r}; do something else")
        return None

    return Policy(name, before=before, tools=frozenset({"terminal_send"}))


def confirm_commands(patterns: Iterable[str], ask: Optional[Callable[[ToolCall], bool]] = None,
                     name: str = "confirm", timeout: float = 300.0) -> Policy:
    """Ask before a ``terminal_send`` matching ``patterns`` goes through; a "no" (or no answer) denies it.

    ``ask(call) -> bool`` defaults to a Yes/No ipywidgets prompt in the notebook
    (:func:`widget_confirmation`).
    """
    compiled = [re.compile(p) for p in patterns]
    asker = ask or (lambda call: widget_confirmation(call, timeout))

    def before(call: ToolCall) -> Optional[Deny]:
        text = call.args.get("text", "")
        if not any(p.search(text) for p in compiled):
            return None
        if asker(call):
            return None
        return Deny("the notebook user declined this command")

    return Policy(name, before=before, tools=frozenset({"terminal_send"}))


class ConfirmationPrompt:
    """The Yes/No widget of :func:`confirm_commands`; answers may come from any thread."""

    def __init__(self, call: ToolCall) -> None:
        import html

        import ipywidgets as widgets

        self.answer: Optional[bool] = None
        self._event = threading.Event()
        command = html.escape(str(call.args.get("text", "")))
        self.label = widgets.HTML(f"<b>{html.escape(str(getattr(call.agent, 'name', 'agent')))}</b> wants to run "
                                  f"<code>{command}</code> — allow?")
        self.yes = widgets.Button(description="Yes", button_style="success")
        self.no = widgets.Button(description="No", button_style="danger")
        self.yes.on_click(lambda _b: self._answer(True))
        self.no.on_click(lambda _b: self._answer(False))
        self.widget = widgets.VBox([self.label, widgets.HBox([self.yes, self.no])])

    def _answer(self, value: bool) -> None:
        self.answer = value
        self.yes.disabled = self.no.disabled = True
        self._event.set()

    def wait(self, timeout: float) -> bool:
        self._event.wait(timeout)
        return bool(self.answer)


#: The prompt shown most recently (tests and UIs answer it).
LAST_PROMPT: list[ConfirmationPrompt] = []


def widget_confirmation(call: ToolCall, timeout: float) -> bool:
    """Show a Yes/No prompt and wait for the answer (JupyterLab >= 4.4 delivers clicks on a subshell)."""
    from IPython.display import display

    prompt = ConfirmationPrompt(call)
    LAST_PROMPT[:] = [prompt]
    display(prompt.widget)
    return prompt.wait(timeout)
