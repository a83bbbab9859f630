"""The session manager: ``ctx.terminals`` of the seed.

Owns opaque session ids, the owner fence, the backend registry and the
lifecycle of every session.  Every call takes the exact owner object; a
session presented by another owner gets the same error as an unknown id.

Each operation has a blocking form (for magics and plain scripts) and an
``a``-prefixed coroutine form (for ``await`` in cells); both run the same
coroutine on the private loop thread.
"""
from __future__ import annotations

import builtins

import asyncio
import atexit
import os
import secrets
import signal as signal_module
import weakref
from typing import Any, Coroutine, TypeVar

from ..errors import InvalidArgumentError, SessionNotRunningError, TerminalError, UnknownSessionError
from ..owners import new_id
from .backends import BackendRegistry
from .event_loop import EventLoopThread
from .keys import encode_keys
from .session import (MAX_SEND_BYTES, Page, SendOperation, SendRequest, SendResult, Session, SessionInfo,
                      SessionOptions, close_sessions)
from .watchdog import Watchdog

T = TypeVar("T")

#: Signals a caller may send, by name.
SIGNALS = {name: getattr(signal_module, name) for name in ("SIGINT", "SIGTERM", "SIGKILL", "SIGTSTP", "SIGHUP")}
#: Most lines one read returns.
MAX_READ_LINES = 5000

_PROCESS_TOKEN = secrets.token_hex(8)
_MANAGERS: "weakref.WeakSet[SessionManager]" = weakref.WeakSet()


class SessionManager:
    """Persistent PTY sessions, fenced by owner.

    ``workspace_root`` is the default ``cwd`` (default: the process's current
    directory at the time of each open).  ``options`` sets sizes, scrollback
    bounds and the close grace for new sessions.
    """

    def __init__(self, *, workspace_root: str | None = None, options: SessionOptions | None = None,
                 registry: BackendRegistry | None = None, loop_thread: EventLoopThread | None = None) -> None:
        self.workspace_root = workspace_root
        self.options = options or SessionOptions()
        self.registry = registry or BackendRegistry()
        self._loop = loop_thread or EventLoopThread.shared()
        self._sessions: dict[str, Session] = {}
        self._closed = False
        _MANAGERS.add(self)

    @property
    def loop_thread(self) -> EventLoopThread:
        return self._loop

    # -- lookups (loop thread) ---------------------------------------------------
    def _session(self, owner: object, session_id: object) -> Session:
        if owner is None:
            raise TerminalError("terminal tools require an initiating agent")
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None or session.owner is not owner:
            raise UnknownSessionError(str(session_id))
        return session

    def _running_session(self, owner: object, session_id: str) -> Session:
        session = self._session(owner, session_id)
        if session.status not in ("running", "starting"):
            session.check_can_send()
        return session

    # -- coroutines run on the loop ----------------------------------------------------
    async def _spawn(self, owner: object, type_name: str, name: str | None, cwd: str | None,
                     options: SessionOptions | None) -> SessionInfo:
        if owner is None:
            raise TerminalError("terminal tools require an initiating agent")
        if self._closed:
            raise TerminalError("this session manager has been shut down: create a new one")
        backend = self.registry.get(type_name)
        root = self.workspace_root or os.getcwd()
        where = os.path.abspath(os.path.join(root, os.path.expanduser(cwd))) if cwd is not None else root
        if not os.path.isdir(where):
            raise InvalidArgumentError(
                f"cwd {cwd!r} is not an existing directory: pass an existing directory, "
                f"or omit cwd to start in the workspace root {root}")
        if name is not None and any(s.owner is owner and s.name == name and s.status != "closed"
                                    for s in self._sessions.values()):
            raise InvalidArgumentError(
                f"you already have a terminal session named {name!r}: pick another name or close that one")
        spec = backend.launch(where)
        session_id = new_id("t")
        Watchdog.ensure(_PROCESS_TOKEN)
        session = Session(session_id=session_id, owner=owner, name=name, type_name=type_name, spec=spec,
                          cwd=where, token=f"{_PROCESS_TOKEN}.{session_id}", options=options or self.options,
                          loop=self._loop.loop)
        session.spawn()
        self._sessions[session_id] = session
        try:
            await session.wait_started()
        except BaseException:
            await self._close([session])
            raise
        return session.snapshot()

    def preflight_send(self, owner: object, session_id: str, request: SendRequest) -> None:
        """Raise unless ``request`` could start on the session now (loop thread)."""
        session = self._session(owner, session_id)
        _check_request(request)
        session.check_can_send()

    def begin_send(self, owner: object, session_id: str, request: SendRequest, holder: str) -> SendOperation:
        """Take the session's send reservation for ``holder`` and start the send (loop thread)."""
        self.preflight_send(owner, session_id, request)
        return self._sessions[session_id].start_send(request, holder)

    async def _start_send(self, owner: object, session_id: str, request: SendRequest,
                          holder: str) -> SendOperation:
        return self.begin_send(owner, session_id, request, holder)

    async def _send(self, owner: object, session_id: str, request: SendRequest) -> SendResult:
        op = await self._start_send(owner, session_id, request, "a foreground send")
        return await op.future

    async def _read(self, owner: object, session_id: str, offset: int, count: int) -> Page:
        session = self._session(owner, session_id)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidArgumentError(f"offset must be an integer >= 0 (0 = newest), got {offset!r}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise InvalidArgumentError(f"count must be an integer >= 1, got {count!r}")
        capped = count > MAX_READ_LINES
        lines, begin, end, total = session.scrollback.page(offset, min(count, MAX_READ_LINES))
        return Page(lines, begin, end, total, capped)

    async def _signal(self, owner: object, session_id: str, signal_name: str) -> int:
        session = self._session(owner, session_id)
        if signal_name not in SIGNALS:
            raise InvalidArgumentError(
                f"invalid signal {signal_name!r}: use one of {', '.join(SIGNALS)}")
        if session.status not in ("running", "starting"):
            session.check_can_send()
        pgid = session.foreground_pgid()
        if pgid <= 0:
            raise SessionNotRunningError(
                f"terminal session {session_id!r} has no foreground process group yet: try again")
        if signal_name == "SIGKILL" and pgid == session.pid:
            raise InvalidArgumentError(
                "SIGKILL would kill the session's shell itself: use terminal_close to end the session, "
                "or SIGINT/SIGTERM to stop the foreground command")
        os.killpg(pgid, SIGNALS[signal_name])
        return pgid

    async def _kill(self, owner: object, session_id: str) -> bool:
        session = self._session(owner, session_id)
        return session in await self._close([session])

    async def _close(self, sessions: list[Session]) -> list[Session]:
        """Close ``sessions`` together; returns those this call closed (the rest were already closing)."""
        fresh = [s for s in sessions if s.closing is None]
        already = [s.closing for s in sessions if s.closing is not None]
        for s in fresh:
            s.closing = s.loop.create_future()
        try:
            if fresh:
                await close_sessions(fresh)
        finally:
            for s in fresh:
                s.closing.set_result(None)  # type: ignore[union-attr]
                self._sessions.pop(s.session_id, None)
        for waiter in already:
            await asyncio.shield(waiter)  # type: ignore[arg-type]
        return fresh

    async def _resize(self, owner: object, session_id: str, rows: int, cols: int) -> tuple[int, int]:
        session = self._running_session(owner, session_id)
        for name, value, low, high in (("rows", rows, 2, 500), ("cols", cols, 10, 1000)):
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise InvalidArgumentError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        session.resize(rows, cols)
        return rows, cols

    async def _record(self, owner: object, session_id: str, action: str, path: str | None) -> tuple[str, int]:
        session = self._session(owner, session_id)
        if action == "start":
            if not path:
                raise InvalidArgumentError("starting a recording needs a path, e.g. 'session.cast'")
            return session.start_recording(path).path, 0
        if action == "stop":
            recorder = session.stop_recording()
            return recorder.path, recorder.events
        raise InvalidArgumentError(f"action must be 'start' or 'stop', got {action!r}")

    async def _list(self, owner: object) -> list[SessionInfo]:
        if owner is None:
            raise TerminalError("terminal tools require an initiating agent")
        return [s.snapshot() for s in self._sessions.values() if s.owner is owner]

    async def _close_owner(self, owner: object) -> None:
        await self._close([s for s in self._sessions.values() if s.owner is owner])

    async def _shutdown(self) -> None:
        self._closed = True
        await self._close(list(self._sessions.values()))

    # -- blocking API ----------------------------------------------------------------
    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro)

    def spawn(self, owner: object, type: str = "shell", *, name: str | None = None, cwd: str | None = None,
              options: SessionOptions | None = None) -> SessionInfo:
        """Open a session of backend ``type``; returns once its program first waits for input."""
        return self._run(self._spawn(owner, type, name, cwd, options))

    def send(self, owner: object, session_id: str, request: SendRequest) -> SendResult:
        """Write and wait (see :class:`SendRequest`).  Ctrl-C here interrupts the program too."""
        started: list[SendOperation] = []

        def start() -> "asyncio.Future[SendResult]":
            started.append(self.begin_send(owner, session_id, request, "a foreground send"))
            return started[0].future

        return self._loop.call_and_wait(start, on_interrupt=lambda: _cancel_first(started))

    def start_send(self, owner: object, session_id: str, request: SendRequest, holder: str) -> SendOperation:
        """Take the reservation and start a send; returns at once with the operation."""
        return self._run(self._start_send(owner, session_id, request, holder))

    def read(self, owner: object, session_id: str, offset: int = 0, count: int = 500) -> Page:
        """A page of retained output, ``offset`` lines back from the newest."""
        return self._run(self._read(owner, session_id, offset, count))

    def signal(self, owner: object, session_id: str, signal_name: str) -> int:
        """Send a signal to the terminal's foreground process group; returns the group id."""
        return self._run(self._signal(owner, session_id, signal_name))

    def kill(self, owner: object, session_id: str) -> bool:
        """Close: end the session's whole process tree.  False when a close was already running."""
        return self._run(self._kill(owner, session_id))

    def resize(self, owner: object, session_id: str, rows: int, cols: int) -> tuple[int, int]:
        """Set the terminal size (the program gets SIGWINCH)."""
        return self._run(self._resize(owner, session_id, rows, cols))

    def record(self, owner: object, session_id: str, action: str, path: str | None = None) -> tuple[str, int]:
        """Start (``action="start"``, ``path``) or stop an asciinema v2 recording; returns (path, events)."""
        return self._run(self._record(owner, session_id, action, path))

    def list(self, owner: object) -> builtins.list[SessionInfo]:
        """Snapshots of ``owner``'s sessions."""
        return self._run(self._list(owner))

    def close_owner(self, owner: object) -> None:
        """Close every session of ``owner``."""
        self._run(self._close_owner(owner))

    def shutdown(self) -> None:
        """Close every session of every owner; the manager accepts no new sessions."""
        if self._loop.thread.is_alive():
            self._run(self._shutdown())

    def session(self, owner: object, session_id: str) -> Session:
        """The live :class:`Session` (for viewers on the loop thread); owner-fenced."""
        return self._loop.call(self._session, owner, session_id)

    # -- async API --------------------------------------------------------------------
    async def aspawn(self, owner: object, type: str = "shell", *, name: str | None = None,
                     cwd: str | None = None, options: SessionOptions | None = None) -> SessionInfo:
        return await self._loop.arun(self._spawn(owner, type, name, cwd, options))

    async def asend(self, owner: object, session_id: str, request: SendRequest) -> SendResult:
        return await self._loop.arun(self._send(owner, session_id, request))

    async def astart_send(self, owner: object, session_id: str, request: SendRequest,
                          holder: str) -> SendOperation:
        return await self._loop.arun(self._start_send(owner, session_id, request, holder))

    async def aread(self, owner: object, session_id: str, offset: int = 0, count: int = 500) -> Page:
        return await self._loop.arun(self._read(owner, session_id, offset, count))

    async def asignal(self, owner: object, session_id: str, signal_name: str) -> int:
        return await self._loop.arun(self._signal(owner, session_id, signal_name))

    async def akill(self, owner: object, session_id: str) -> bool:
        return await self._loop.arun(self._kill(owner, session_id))

    async def aresize(self, owner: object, session_id: str, rows: int, cols: int) -> tuple[int, int]:
        return await self._loop.arun(self._resize(owner, session_id, rows, cols))

    async def arecord(self, owner: object, session_id: str, action: str, path: str | None = None) -> tuple[str, int]:
        return await self._loop.arun(self._record(owner, session_id, action, path))

    async def alist(self, owner: object) -> builtins.list[SessionInfo]:
        return await self._loop.arun(self._list(owner))

    async def aclose_owner(self, owner: object) -> None:
        await self._loop.arun(self._close_owner(owner))

    async def ashutdown(self) -> None:
        await self._loop.arun(self._shutdown())


def _check_request(request: SendRequest) -> None:
    if not isinstance(request.text, str):
        raise InvalidArgumentError(f"text must be a string, got {type(request.text).__name__}")
    if "\x00" in request.text:
        raise InvalidArgumentError("text contains a NUL byte, which a terminal cannot carry: remove it")
    if len(request.text.encode("utf-8", "surrogateescape")) > MAX_SEND_BYTES:
        raise InvalidArgumentError(
            f"text is larger than {MAX_SEND_BYTES} bytes: write it to a file and send a command that reads it")
    if request.keys:
        encode_keys(list(request.keys))  # refuses unknown key names
    for field_name in ("timeout", "idle"):
        value = getattr(request, field_name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 24 * 3600:
            raise InvalidArgumentError(f"{field_name} must be a number of seconds in (0, 86400], got {value!r}")


def shutdown_all() -> None:
    """Close every session of every manager in this process (atexit, kernel shutdown)."""
    for manager in list(_MANAGERS):
        try:
            manager.shutdown()
        except Exception:
            pass
    Watchdog.stop()


atexit.register(shutdown_all)


def _cancel_first(started: builtins.list[SendOperation]) -> None:
    """Interrupt the send that was started, if it got that far."""
    if started:
        started[0].cancel()
