"""Streamable HTTP serving: one :class:`Agent` per MCP session, closed when the client leaves.

:class:`HttpServer` runs uvicorn on the package's private loop (the same loop
the sessions live on), so it serves from inside a running kernel without
blocking a cell, and from the command line alike.  Each MCP session
(``Mcp-Session-Id``) is one client and acts as its own :class:`Agent`; when
the client ends the session (``DELETE``), or the session ends on the server,
or the client's event stream drops and it does not come back, its terminal
sessions and jobs are closed within seconds.

Only the handshake protocol revisions are served: a request at a sessionless
revision is refused with the ``-32022`` error naming the revisions served, so
the SDK's default client falls back to a session-bearing handshake and keeps
one :class:`Agent` across its calls.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

from mcp.server.context import ServerRequestContext
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ..errors import ConfigError
from ..owners import Agent
from ..tools import TerminalTools
from .server import build_server

LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: A client whose event stream dropped is gone once it has not come back within this many seconds.
RECONNECT_GRACE = 3.0
#: How often ended sessions are looked for.
REAP_INTERVAL = 0.5
UNSUPPORTED_PROTOCOL_VERSION = -32022
#: Connections the server keeps open at once (a client holds two or three: its requests and event stream).
MAX_CONNECTIONS = 64
#: Seconds a connection may stay open without having sent a whole request head.
FIRST_REQUEST_TIMEOUT = 10.0
#: The most of a refused request's body that is read (to find its id).
MAX_REFUSED_BODY = 1 << 20


@dataclass
class Client:
    """One connected MCP client (one MCP session)."""

    session_id: str
    agent: Agent
    name: str = "?"
    calls: int = 0
    #: Open requests and event streams; when the last ends, the time it ended.
    open_requests: int = 0
    streams_seen: bool = False
    quiet_since: float | None = None


class HttpServer:
    """The MCP server over streamable HTTP at ``http://HOST:PORT/mcp``.

    Clients send ``Authorization: Bearer TOKEN``: by default (``token=None`` or
    ``True``) one is made, on loopback too - every user of the machine can
    reach its loopback ports, and a client is a shell as the kernel's user;
    ``token="..."`` sets it; ``token=False`` serves without one, on loopback
    only.  DNS-rebinding protection is on.  :meth:`start` returns the URL once
    it is listening; :meth:`client` connects the SDK's client with the token;
    :meth:`stop` closes every client's sessions.
    """

    def __init__(self, tools: TerminalTools, *, host: str = "127.0.0.1", port: int = 0,
                 token: str | bool | None = None, allowed_hosts: list[str] | None = None) -> None:
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ConfigError(f"port must be an integer from 0 to 65535 (0 picks a free one), got {port!r}")
        if token is False and host not in LOOPBACK:
            raise ConfigError(f"binding MCP to {host!r} (not loopback) needs a token: leave the token on (one is "
                              "made), or pass --token TOKEN; clients then send 'Authorization: Bearer TOKEN'")
        if isinstance(token, str) and not token.strip():
            raise ConfigError("the token is empty: pass a non-empty token, or leave it out to have one made")
        self.tools = tools
        self.host, self.port = host, port
        self.token: str | None = token if isinstance(token, str) else (
            None if token is False else secrets.token_urlsafe(24))
        self.allowed_hosts = list(allowed_hosts or [])
        #: The connected clients, by MCP session id.
        self.clients: dict[str, Client] = {}
        self._loop = tools.manager.loop_thread
        self._uvicorn: Any = None
        self._serving: Any = None
        self._reaper: Any = None
        self._sdk_sessions: Any = None

    def __repr__(self) -> str:
        state = "serving" if self._serving is not None else "stopped"
        return f"<MCP server {self.url} ({state}, {len(self.clients)} client(s))>"

    @property
    def agents(self) -> list[Agent]:
        """The :class:`Agent` of each connected client, oldest first (``%term_view --agent`` works on them)."""
        return [c.agent for c in self.clients.values()]

    def client_configs(self) -> str:
        """Ready-to-paste client configuration for Claude Code, Codex and VS Code."""
        return client_configs(self.url, self.token)

    @property
    def headers(self) -> dict[str, str]:
        """What a client sends: the bearer token (nothing when serving without one)."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @contextlib.asynccontextmanager
    async def client(self, **options: Any) -> AsyncIterator[Any]:
        """``async with server.client() as c:`` - the MCP SDK's ``Client`` connected to this server with its
        token (``options`` go to ``Client``)."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        timeout = httpx2.Timeout(30.0, read=300.0)  # (the SDK's own client's: its event stream stays open)
        async with httpx2.AsyncClient(headers=self.headers, timeout=timeout) as http:
            async with Client(streamable_http_client(self.url, http_client=http), **options) as connected:
                yield connected

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/mcp"

    def start(self) -> str:
        """Listen and serve on the package loop; returns the URL (the port is known once bound)."""
        if self._serving is not None:
            return self.url
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            raise ConfigError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}; pick another "
                              "--host or --port (0 picks a free port)") from None
        self.port = sock.getsockname()[1]
        self._loop.call(self._begin, sock)
        return self.url

    def _begin(self, sock: socket.socket) -> None:  # on the loop
        import uvicorn

        app = self._app()
        config = uvicorn.Config(app, log_config=None, log_level="warning", lifespan="on",
                                timeout_graceful_shutdown=3, http=_guarded_protocol())
        self._uvicorn = uvicorn.Server(config)  # off the main thread it leaves signals alone
        self._serving = asyncio.ensure_future(self._serve(sock))
        self._reaper = asyncio.ensure_future(self._reap())

    async def _serve(self, sock: socket.socket) -> None:
        try:
            await self._uvicorn.serve(sockets=[sock])
        finally:
            sock.close()

    def stop(self) -> None:
        """Stop serving and close every connected client's sessions and jobs."""
        if self._serving is None:
            return
        self._loop.run(self._stop())

    async def _stop(self) -> None:
        self._uvicorn.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._serving), timeout=10)
        except asyncio.TimeoutError:
            self._serving.cancel()
        self._reaper.cancel()
        for session_id in list(self.clients):
            await self._client_left(session_id)
        self._serving = None

    # -- the app -----------------------------------------------------------------------------
    def _app(self) -> Any:
        server = build_server(self.tools, self._agent_of)
        hosts = [h for h in LOOPBACK if h != "::1"] + ["[::1]"] + self.allowed_hosts
        if self.host not in LOOPBACK and self.host not in ("0.0.0.0", "::"):
            hosts.append(self.host)
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=[f"{h}:*" for h in hosts],
            allowed_origins=[f"http://{h}:*" for h in hosts])
        starlette_app = server.streamable_http_app(streamable_http_path="/mcp", transport_security=security,
                                                   host=self.host)
        self._sdk_sessions = server.session_manager
        return _Gate(starlette_app, self)

    def _agent_of(self, ctx: ServerRequestContext[Any, Any]) -> Agent:
        request = ctx.request
        session_id = request.headers.get("mcp-session-id") if request is not None else None
        client = self.clients.get(session_id or "")
        if client is None:
            raise RuntimeError("no MCP session for this request")  # the gate admits only known sessions
        client.calls += 1
        if client.name == "?":
            info = ctx.session.client_params.client_info if ctx.session.client_params else None
            if info is not None:
                client.name = info.name
                client.agent.name = f"mcp-{info.name}-{session_id[:6]}"  # type: ignore[index]
        return client.agent

    # -- clients coming and going ----------------------------------------------------------------
    def _client_came(self, session_id: str) -> None:
        if session_id not in self.clients:
            self.clients[session_id] = Client(session_id, Agent(f"mcp-{session_id[:6]}"))

    async def _client_left(self, session_id: str) -> None:
        client = self.clients.pop(session_id, None)
        if client is not None:
            await self.tools.aclose_owner(client.agent)

    def _sdk_transports(self) -> dict[str, Any] | None:
        """The SDK's live MCP sessions, id -> transport (None if this SDK version does not keep that table)."""
        live = getattr(self._sdk_sessions, "_server_instances", None)
        return live if isinstance(live, dict) else None

    async def _reap(self) -> None:
        """Close the sessions of clients whose MCP session ended or whose stream dropped for good."""
        while True:
            await asyncio.sleep(REAP_INTERVAL)
            live = self._sdk_transports()
            now = time.monotonic()
            for session_id, client in list(self.clients.items()):
                ended = live is not None and session_id not in live
                vanished = (client.streams_seen and client.open_requests == 0 and client.quiet_since is not None
                            and now - client.quiet_since > RECONNECT_GRACE)
                if ended or vanished:
                    await self._client_left(session_id)
                    if vanished:
                        await self._end_sdk_session(session_id)

    async def _end_sdk_session(self, session_id: str) -> None:
        transport = (self._sdk_transports() or {}).get(session_id)
        if transport is not None:
            await transport.terminate()


class _Gate:
    """ASGI wrapper: bearer token, refusing sessionless revisions, and tracking clients by MCP session."""

    def __init__(self, app: Any, owner: HttpServer) -> None:
        self.app, self.owner = app, owner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.owner.token and not _bearer_ok(headers.get("authorization", ""), self.owner.token):
            await _reply(send, 401, {"error": "missing or wrong bearer token: send 'Authorization: Bearer TOKEN' "
                                               "with the token printed when the server started"})
            return
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await self._refuse_revision(version, receive, send)
            return
        session_id = headers.get("mcp-session-id")
        client = self.owner.clients.get(session_id or "")
        if session_id is None and scope["method"] == "POST":
            send = self._noting_new_session(send)
        if client is None:
            await self.app(scope, receive, send)
            return
        client.open_requests += 1
        client.streams_seen = client.streams_seen or scope["method"] == "GET"
        try:
            await self.app(scope, receive, send)
        finally:
            client.open_requests -= 1
            if client.open_requests == 0:
                client.quiet_since = time.monotonic()
            if scope["method"] == "DELETE":
                await self.owner._client_left(session_id)  # type: ignore[arg-type]

    def _noting_new_session(self, send: Any) -> Any:
        async def noting(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                for key, value in message.get("headers", []):
                    if key.lower() == b"mcp-session-id":
                        self.owner._client_came(value.decode("latin-1"))
            await send(message)
        return noting

    async def _refuse_revision(self, version: str, receive: Any, send: Any) -> None:
        """Answer a sessionless-revision request with -32022 naming the revisions served."""
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_REFUSED_BODY:
            message = await receive()
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            request_id = json.loads(body).get("id")
        except (ValueError, AttributeError):
            request_id = None
        await _reply(send, 400, {"jsonrpc": "2.0", "id": request_id, "error": {
            "code": UNSUPPORTED_PROTOCOL_VERSION,
            "message": f"protocol revision {version} is not served here (it has no sessions, and each client's "
                       "terminals belong to its session): use the initialize handshake",
            "data": {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version}}})


def _guarded_protocol() -> type:
    """uvicorn's h11 protocol, less what let any local process use up the kernel's file descriptors.

    uvicorn keeps a connection that never sends a request open for ever, and takes every connection: 4000
    idle ones from one process held 4000 of the kernel's fds (past its limit no session can open, nor a
    ``/proc`` file be read).  Here a connection with no whole request head after
    :data:`FIRST_REQUEST_TIMEOUT` is closed, and past :data:`MAX_CONNECTIONS` the oldest such idle one is
    closed to make room (the new one, when none is idle): a client that sends requests keeps getting in.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Guarded(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            self._opened_at = time.monotonic()
            super().connection_made(transport)
            self._first_request = self.loop.call_later(FIRST_REQUEST_TIMEOUT, self._close_if_idle)
            if len(self.connections) > MAX_CONNECTIONS:
                idle = [c for c in self.connections if isinstance(c, Guarded) and c._idle()]
                victim = min(idle, key=lambda c: c._opened_at) if idle else self
                victim.transport.close()

        def _idle(self) -> bool:
            """No request head has come whole yet."""
            return self.cycle is None and not self.transport.is_closing()

        def _close_if_idle(self) -> None:
            if self._idle():
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._first_request.cancel()
            super().connection_lost(exc)

    return Guarded


def client_configs(url: str, token: str | None = None, name: str = "dsh-terminal") -> str:
    """How to connect Claude Code, Codex and VS Code to the server at ``url``."""
    header = f' --header "Authorization: Bearer {token}"' if token else ""
    codex_token = '\nbearer_token_env_var = "DSH_TERMINAL_MCP_TOKEN"   # export DSH_TERMINAL_MCP_TOKEN=' + token \
        if token else ""
    vscode_headers = f', "headers": {{"Authorization": "Bearer {token}"}}' if token else ""
    return "\n".join([
        "Claude Code:",
        f"  claude mcp add --transport http {name} {url}{header}",
        "Codex (~/.codex/config.toml):",
        f"  [mcp_servers.{name}]",
        f'  url = "{url}"' + codex_token.replace("\n", "\n  "),
        "VS Code (.vscode/mcp.json):",
        f'  {{"servers": {{"{name}": {{"type": "http", "url": "{url}"{vscode_headers}}}}}}}',
    ])


def _bearer_ok(header: str, token: str) -> bool:
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(), token.encode())


async def _reply(send: Any, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
