"""MCP server for the terminal tools (the official ``mcp`` SDK, 2.x).

``python3 -m dsh_terminal_magics.mcp`` (or ``dsh-terminal-mcp``) serves over
stdio; ``--http`` serves streamable HTTP at ``http://127.0.0.1:PORT/mcp``.
In a notebook, ``%term_mcp start`` serves from inside the kernel.  Install
with the ``mcp`` extra: ``pip install 'dsh_terminal_magics[mcp]'``.
"""
from __future__ import annotations

try:
    import mcp.server.lowlevel  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("the MCP server needs the MCP SDK 2.x: pip install 'dsh_terminal_magics[mcp]'") from exc

from .http import Client, HttpServer, client_configs
from .server import build_server, instructions, listed_tools
from .stdio import serve_stdio

__all__ = ["Client", "HttpServer", "client_configs", "build_server", "instructions", "listed_tools", "serve_stdio"]
