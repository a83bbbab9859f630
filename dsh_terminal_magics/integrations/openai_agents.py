"""OpenAI Agents SDK: ``agents.Agent(name=..., tools=function_tools(tools, agent))``.

The tools are declared with ``strict_json_schema=False``: strict mode would make
every argument required, and most of ours are optional.
"""
from __future__ import annotations

import json
from typing import Any

from agents import FunctionTool

from ..owners import Agent
from ..tools import TerminalTools
from ._common import async_text_caller, tool_specs


def function_tools(tools: TerminalTools, agent: Agent) -> list[FunctionTool]:
    """The terminal tools as Agents SDK ``FunctionTool``s, every call acting as ``agent``."""
    return [FunctionTool(name=spec.name, description=spec.description, params_json_schema=spec.parameters,
                         on_invoke_tool=_invoker(async_text_caller(tools, agent, spec.name), spec.name),
                         strict_json_schema=False)
            for spec in tool_specs(tools)]


def _invoker(call: Any, name: str) -> Any:
    async def invoke(_context: Any, arguments: str) -> str:
        try:
            args = json.loads(arguments or "{}")
        except ValueError as exc:
            return f"[error]\n{name}: the arguments are not valid JSON ({exc}); send a JSON object"
        if not isinstance(args, dict):
            return f"[error]\n{name}: the arguments must be a JSON object, got {type(args).__name__}"
        return await call(args)
    return invoke
