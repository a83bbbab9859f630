"""pydantic-ai: ``pydantic_ai.Agent(model, toolsets=[toolset(tools, agent)])``."""
from __future__ import annotations

from typing import Any

from pydantic_ai import Tool
from pydantic_ai.toolsets import FunctionToolset

from ..owners import Agent
from ..tools import TerminalTools
from ._common import async_text_caller, tool_specs


def toolset(tools: TerminalTools, agent: Agent) -> FunctionToolset[Any]:
    """The terminal tools as a pydantic-ai toolset, every call acting as ``agent``."""
    return FunctionToolset([_tool(tools, agent, spec.name, spec.description, spec.parameters)
                            for spec in tool_specs(tools)])


def _tool(tools: TerminalTools, agent: Agent, name: str, description: str,
          parameters: dict[str, Any]) -> Tool[Any]:
    call = async_text_caller(tools, agent, name)

    async def run(**args: Any) -> str:
        return await call(args)

    return Tool.from_schema(run, name=name, description=description, json_schema=parameters)
