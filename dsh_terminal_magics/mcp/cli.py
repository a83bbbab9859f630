"""The command line: ``dsh-terminal-mcp [--http [--host H] [--port N]] [--config FILE.json] [flags]``.

Over stdio nothing but protocol messages reaches stdout.  With ``--http`` the
first line printed is the URL (``--port 0``, the default, picks a free
port); with a token, the second line is the header clients send.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from ..errors import TerminalError
from ..tools import TerminalTools

#: Flags for the common config keys (they override the same keys of --config).
FLAG_KEYS = {"sandbox": "sandbox", "sandbox_network": "sandboxNetwork", "containment": "containment",
             "record_dir": "recordDir", "max_result_bytes": "maxResultBytes",
             "max_sessions_per_agent": "maxSessionsPerAgent"}


def token_option(value: str | None) -> str | bool:
    """``--token``: ``auto`` (or nothing) makes one, ``none`` serves without, anything else is the token."""
    if value is None or value == "auto":
        return True
    return False if value == "none" else value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dsh-terminal-mcp", description="Serve the terminal tools over MCP "
                                "(stdio by default).")
    p.add_argument("--http", action="store_true", help="Serve streamable HTTP at http://HOST:PORT/mcp.")
    p.add_argument("--host", default="127.0.0.1", help="Address to bind with --http (default 127.0.0.1).")
    p.add_argument("--port", type=int, default=0, help="Port with --http (default 0: a free one).")
    p.add_argument("--token", default="auto", help="Bearer token clients must send (default 'auto': one is made "
                   "and printed; 'none' serves without one, on loopback only - any user of the machine can reach it).")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                   help="Another Host header value to accept (DNS-rebinding protection); repeatable.")
    p.add_argument("--config", metavar="FILE.json", help="TerminalTools config as a JSON object.")
    p.add_argument("--workspace", default=None, help="Workspace root (default: the current directory).")
    p.add_argument("--sandbox", choices=["off", "read-only", "workspace-write"], default=None)
    p.add_argument("--sandbox-network", action="store_true", default=None, help="Allow the network in a sandbox.")
    p.add_argument("--containment", choices=["auto", "namespace", "tracking"], default=None)
    p.add_argument("--record-dir", default=None, help="Where terminal_record may write recordings.")
    p.add_argument("--max-result-bytes", type=int, default=None)
    p.add_argument("--max-sessions-per-agent", type=int, default=None)
    return p


def config_from(args: argparse.Namespace) -> dict[str, Any]:
    """The config: the --config file's object, then the flags given."""
    config: dict[str, Any] = {}
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError) as exc:
            raise TerminalError(f"--config {args.config}: {exc}; give a readable JSON object of config keys") \
                from None
        if not isinstance(config, dict):
            raise TerminalError(f"--config {args.config}: the file must hold a JSON object of config keys")
    for attr, key in FLAG_KEYS.items():
        value = getattr(args, attr)
        if value is not None:
            config[key] = value
    return config


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        tools = TerminalTools(config_from(args), workspace_root=args.workspace)
    except TerminalError as exc:
        print(f"dsh-terminal-mcp: {exc}", file=sys.stderr)
        return 2
    try:
        if args.http:
            return _serve_http(tools, args)
        from .stdio import serve_stdio
        serve_stdio(tools)
        return 0
    finally:
        tools.shutdown()


def _serve_http(tools: TerminalTools, args: argparse.Namespace) -> int:
    from .http import HttpServer

    token = token_option(args.token)
    try:
        server = HttpServer(tools, host=args.host, port=args.port, token=token, allowed_hosts=args.allow_host)
        url = server.start()
    except TerminalError as exc:
        print(f"dsh-terminal-mcp: {exc}", file=sys.stderr)
        return 2
    print(url, flush=True)
    if server.token:
        print(f"Authorization: Bearer {server.token}", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    server.stop()
    return 0
