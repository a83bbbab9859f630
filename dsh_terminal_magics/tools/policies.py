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

Pattern policies (:func:`deny_commands`, :func:`confirm_commands`) are guard
rails against mistakes, not a security boundary: a model can always find
another spelling.  They match the whole payload as it will be typed (``text``
then ``keys``, see :func:`typed_payload`).  An ``after`` hook runs after the
command already ran: failing there cannot undo it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Union

from pydantic import BaseModel, ConfigDict

from ..errors import TerminalError
from ..mechanism.keys import encode_keys

Content = Union[str, list, BaseModel]


class PolicyError(TerminalError):
    """A policy failed (raised, returned the wrong type, or rewrote arguments into invalid ones)."""


class PolicyDenied(TerminalError):
    """A policy refused the call; nothing was executed."""

    def __init__(self, policy: str, reason: object) -> None:
        self.policy = policy
        self.reason = str(reason) if reason is not None else "no reason given"
        super().__init__(f"denied by policy {policy!r}: {self.reason}")


@dataclass(frozen=True)
class ToolCall:
    """What a policy sees: the tool, its (validated, JSON-form) arguments and the initiating agent."""

    name: str
    args: dict[str, Any]
    agent: Any
    #: The text is a secret the notebook user typed into a password box (``%term_send --secret``): what shows
    #: calls (cards) leaves it out.
    secret: bool = False


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


def typed_payload(args: dict[str, Any]) -> str:
    """What a ``terminal_send`` will type: its text, then its named keys as the characters they send."""
    text = str(args.get("text", ""))
    keys = args.get("keys") or []
    try:
        return text + encode_keys(list(keys)).decode("utf-8", "replace") if keys else text
    except TerminalError:
        return text + "".join(str(k) for k in keys)


class PolicyEngine:
    """Runs a call through every applicable policy: befores, arounds (nested), the call, afters.

    ``validate(name, args)`` re-validates rewritten arguments; ``execute(call,
    parsed)`` runs the tool.
    """

    def __init__(self, policies: list[Policy], validate: Callable[[str, dict[str, Any]], BaseModel],
                 execute: Callable[[ToolCall, BaseModel], Any]) -> None:
        self._policies = policies
        self._validate = validate
        self._execute = execute

    def run(self, call: ToolCall, parsed: BaseModel) -> Any:
        active = [p for p in self._policies if p.applies(call.name)]
        for policy in active:
            if policy.before is None:
                continue
            verdict = _hook(policy, "before", policy.before, call)
            if verdict is None:
                continue
            if isinstance(verdict, Deny):
                raise PolicyDenied(policy.name, verdict.reason)
            if isinstance(verdict, Rewrite):
                parsed = self._rewritten(policy, call.name, verdict.args)
                call = ToolCall(call.name, parsed.model_dump(by_alias=True), call.agent)
                continue
            if isinstance(verdict, ShortCircuit):
                content = check_content(policy.name, "before", verdict.result)
                return self._after(active, call, PolicyOutcome(policy=policy.name, outcome="short-circuit",
                                                                content=content))
            raise PolicyError(f"policy {policy.name!r} before returned {type(verdict).__name__}: return None, "
                              "Deny(reason), Rewrite(args) or ShortCircuit(result)")
        final, final_call = parsed, call

        def execute() -> Any:
            return self._execute(final_call, final)

        for policy in reversed([p for p in active if p.around is not None]):
            execute = _wrap_around(policy, call, execute)
        return self._after(active, call, execute())

    def _rewritten(self, policy: Policy, name: str, args: Any) -> BaseModel:
        if not isinstance(args, dict):
            raise PolicyError(f"policy {policy.name!r} rewrote the arguments into a {type(args).__name__}: "
                              "Rewrite needs a dict of arguments")
        try:
            return self._validate(name, args)
        except TerminalError as exc:
            raise PolicyError(f"policy {policy.name!r} rewrote the arguments into invalid ones: {exc}") from None

    @staticmethod
    def _after(active: list[Policy], call: ToolCall, result: Any) -> Any:
        for policy in active:
            if policy.after is None:
                continue
            verdict = _hook(policy, "after", policy.after, call, result)
            if verdict is None:
                continue
            if not isinstance(verdict, Replace):
                raise PolicyError(f"policy {policy.name!r} after returned {type(verdict).__name__}: return None "
                                  "or Replace(result)")
            result = PolicyOutcome(policy=policy.name, outcome="replaced",
                                   content=check_content(policy.name, "after", verdict.result))
        return result


def _hook(policy: Policy, hook: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except TerminalError:
        raise
    except Exception as exc:
        raise PolicyError(f"policy {policy.name!r} {hook} raised {type(exc).__name__}: {exc}") from exc


def _wrap_around(policy: Policy, call: ToolCall, inner: Callable[[], Any]) -> Callable[[], Any]:
    def wrapped() -> Any:
        value = _hook(policy, "around", policy.around, call, inner)  # type: ignore[arg-type]
        if isinstance(value, BaseModel):
            return value
        return PolicyOutcome(policy=policy.name, outcome="around",
                             content=check_content(policy.name, "around", value))
    return wrapped


# -- ready policies -----------------------------------------------------------------------------
def deny_commands(patterns: Iterable[str], name: str = "deny-list") -> Policy:
    """Deny a ``terminal_send`` whose typed payload (text, then keys) matches any of ``patterns``."""
    compiled = [re.compile(p) for p in patterns]

    def before(call: ToolCall) -> Optional[Deny]:
        typed = typed_payload(call.args)
        for pattern in compiled:
            if pattern.search(typed):
                return Deny(f"the command matches the denied pattern {pattern.pattern!r}; do something else")
        return None

    return Policy(name, before=before, tools=frozenset({"terminal_send"}))


def confirm_commands(patterns: Iterable[str], ask: Callable[[ToolCall], bool], name: str = "confirm") -> Policy:
    """Ask ``ask(call)`` before a ``terminal_send`` whose typed payload matches ``patterns`` goes through;
    a falsy answer denies it.  (In a notebook, :func:`dsh_terminal_magics.notebook.confirmation.confirm_in_notebook`
    asks with Yes/No buttons.)"""
    compiled = [re.compile(p) for p in patterns]

    def before(call: ToolCall) -> Optional[Deny]:
        if not any(p.search(typed_payload(call.args)) for p in compiled):
            return None
        if ask(call):
            return None
        return Deny("the notebook user declined this command")

    return Policy(name, before=before, tools=frozenset({"terminal_send"}))
