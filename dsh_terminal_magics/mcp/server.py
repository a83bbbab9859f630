"""The terminal tools as an MCP server: the SDK's low-level server with our schemas and our results.

Tools are listed with exactly the names, descriptions and input schemas of
:meth:`TerminalTools.schemas` (``"json-schema"``) and the output schemas of
:meth:`TerminalTools.output_schemas`; a call returns the capped text a model
sees as text content and the JSON result as ``structuredContent``.  A bad
call (unknown tool, invalid arguments, unknown session …) is an ``isError``
result carrying the same message :class:`TerminalTools` gives; nothing a
client sends ends the server.  Who the caller is — which :class:`Agent` —
is decided by the transport (:func:`build_server`'s ``agent_of``).
"""
from __future__ import annotations

import time
from importlib import metadata
from typing import Any, Callable

import anyio
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from ..owners import Agent
from ..tools import TerminalTools

SERVER_NAME = "dsh-terminal"
#: Seconds between progress notifications while a call runs (only when the client asked for progress).
PROGRESS_INTERVAL = 1.0
AgentOf = Callable[[ServerRequestContext[Any, Any]], Agent]


def listed_tools(tools: TerminalTools) -> list[types.Tool]:
    """The tools as MCP lists them (current config)."""
    outputs = tools.output_schemas()
    listed = []
    for schema in tools.schemas("json-schema"):
        name = schema["title"]
        inputs = {k: v for k, v in schema.items() if k not in ("title", "description")}
        listed.append(types.Tool(name=name, description=schema["description"], input_schema=inputs,
                                 output_schema=outputs[name]))
    return listed


def instructions(tools: TerminalTools) -> str:
    """The system-prompt section, as the server's ``instructions``."""
    return "\n\n".join(section["text"] for section in tools.system_prompt_sections())


def build_server(tools: TerminalTools, agent_of: AgentOf) -> Server[Any]:
    """An MCP server for ``tools``; ``agent_of(ctx)`` names the :class:`Agent` a request acts as."""

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed_tools(tools))

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        agent = agent_of(ctx)
        answer = await _reporting_progress(ctx, tools.aanswer(params.name, params.arguments or {}, agent=agent))
        return types.CallToolResult(content=_content(answer.text), structured_content=answer.structured,
                                    is_error=answer.is_error)

    return Server(SERVER_NAME, version=_version(), instructions=instructions(tools),
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def _reporting_progress(ctx: ServerRequestContext[Any, Any], call: Any) -> Any:
    """Await ``call``, sending a progress notification every second while it runs (no-op without a token)."""
    result: list[Any] = []
    async with anyio.create_task_group() as group:
        async def report() -> None:
            started = time.monotonic()
            while True:
                await anyio.sleep(PROGRESS_INTERVAL)
                elapsed = time.monotonic() - started
                await ctx.session.report_progress(elapsed, message=f"still running after {elapsed:.0f} s")

        group.start_soon(report)
        result.append(await call)
        group.cancel_scope.cancel()
    return result[0]


def _content(text: str | list[dict[str, Any]]) -> list[types.ContentBlock]:
    if isinstance(text, str):
        return [types.TextContent(type="text", text=text)]
    return types.CallToolResult.model_validate({"content": text}).content  # a policy's content blocks


def _version() -> str:
    try:
        return metadata.version("dsh_terminal_magics")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "0"
