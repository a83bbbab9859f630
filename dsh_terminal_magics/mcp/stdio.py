"""Serving over stdio: the server process is the connection, so one :class:`Agent` for the whole process."""
from __future__ import annotations

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

from ..owners import Agent
from ..tools import TerminalTools
from .server import build_server


def serve_stdio(tools: TerminalTools, agent: Agent | None = None) -> None:
    """Serve ``tools`` on stdin/stdout until the client closes stdin; then close the agent's sessions and jobs.

    Stdout carries protocol messages only (the SDK diverts file descriptor 1 while serving).  A line that is
    no JSON-RPC message gets JSON-RPC's error for it (the SDK's server drops it without a word).
    """
    owner = agent or Agent("mcp-stdio")
    server = build_server(tools, lambda ctx: owner)

    async def run() -> None:
        try:
            async with stdio_server() as (read_stream, write_stream), anyio.create_task_group() as group:
                messages, received = anyio.create_memory_object_stream[SessionMessage | Exception](0)
                group.start_soon(_answer_bad_lines, read_stream, messages, write_stream)
                await server.run(received, write_stream, server.create_initialization_options())
        finally:
            await tools.aclose_owner(owner)

    tools.manager.loop_thread.run(run())


async def _answer_bad_lines(lines: ObjectReceiveStream[SessionMessage | Exception],
                            messages: ObjectSendStream[SessionMessage | Exception],
                            replies: ObjectSendStream[SessionMessage]) -> None:
    """Pass the messages read on to the server; answer each line that was none with the error for it."""
    async with messages:
        async for item in lines:
            if isinstance(item, Exception):
                await replies.send(protocol_error(item))
            else:
                await messages.send(item)


def protocol_error(exc: Exception) -> SessionMessage:
    """JSON-RPC's answer to a line that is no message (its id unknown, so null): -32700 when the line is not
    JSON, -32600 when it is JSON but no JSON-RPC 2.0 request, notification or response."""
    not_json = isinstance(exc, ValidationError) and any(e["type"] == "json_invalid" for e in exc.errors())
    if not_json:
        code, message = PARSE_ERROR, "Parse error: the line is not JSON; send one JSON-RPC 2.0 message per line"
    else:
        code, message = INVALID_REQUEST, ("Invalid Request: the line is JSON but no JSON-RPC 2.0 message (it "
                                          "needs \"jsonrpc\": \"2.0\" and a method, or a result or error, and an id)")
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message)))
