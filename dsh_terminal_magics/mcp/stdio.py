"""Serving over stdio: the server process is the connection, so one :class:`Agent` for the whole process."""
from __future__ import annotations

from mcp.server.stdio import stdio_server

from ..owners import Agent
from ..tools import TerminalTools
from .server import build_server


def serve_stdio(tools: TerminalTools, agent: Agent | None = None) -> None:
    """Serve ``tools`` on stdin/stdout until the client closes stdin; then close the agent's sessions and jobs.

    Stdout carries protocol messages only (the SDK diverts file descriptor 1 while serving).
    """
    owner = agent or Agent("mcp-stdio")
    server = build_server(tools, lambda ctx: owner)

    async def run() -> None:
        try:
            async with stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())
        finally:
            await tools.aclose_owner(owner)

    tools.manager.loop_thread.run(run())
