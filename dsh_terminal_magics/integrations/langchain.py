"""LangChain / LangGraph: ``ToolNode(structured_tools(tools, agent))``; ``invoke`` and ``ainvoke`` both work."""
from __future__ import annotations

from typing import Any

from langchain_core.tools import StructuredTool

from ..owners import Agent
from ..tools import TerminalTools
from ._common import async_text_caller, text_caller, tool_specs


def structured_tools(tools: TerminalTools, agent: Agent) -> list[StructuredTool]:
    """The terminal tools as LangChain ``StructuredTool``s, every call acting as ``agent``."""
    out = []
    for spec in tool_specs(tools):
        call, acall = text_caller(tools, agent, spec.name), async_text_caller(tools, agent, spec.name)
        out.append(StructuredTool(name=spec.name, description=spec.description, args_schema=spec.parameters,
                                  func=_kwargs(call), coroutine=_akwargs(acall)))
    return out


def _kwargs(call: Any) -> Any:
    def run(**args: Any) -> str:
        return call(args)
    return run


def _akwargs(call: Any) -> Any:
    async def run(**args: Any) -> str:
        return await call(args)
    return run
