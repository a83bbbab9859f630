"""What every adapter shares: the tool specs and the call that returns text."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ..owners import Agent
from ..tools import TerminalTools


@dataclass(frozen=True)
class ToolSpec:
    """One tool as a framework declares it."""

    name: str
    description: str
    #: The JSON Schema of the arguments (exactly :meth:`TerminalTools.schemas`'s).
    parameters: dict[str, Any]


def tool_specs(tools: TerminalTools) -> list[ToolSpec]:
    """The tools under ``tools``' current config, in their fixed order."""
    return [ToolSpec(s["function"]["name"], s["function"]["description"], s["function"]["parameters"])
            for s in tools.schemas("openai")]


def as_text(rendered: str | list[dict[str, Any]]) -> str:
    """A rendered result as one string (a policy's text blocks joined)."""
    if isinstance(rendered, str):
        return rendered
    return "\n".join(str(b.get("text", "")) if b.get("type") == "text" else json.dumps(b) for b in rendered)


def text_caller(tools: TerminalTools, agent: Agent, name: str) -> Callable[[dict[str, Any]], str]:
    """``call(args) -> text`` for tool ``name`` acting as ``agent``; errors come back as text."""
    def call(args: dict[str, Any]) -> str:
        return as_text(tools.call_text(name, args, agent=agent))
    return call


def async_text_caller(tools: TerminalTools, agent: Agent,
                      name: str) -> Callable[[dict[str, Any]], Awaitable[str]]:
    """The ``await``-able :func:`text_caller`."""
    async def call(args: dict[str, Any]) -> str:
        return as_text(await tools.acall_text(name, args, agent=agent))
    return call
