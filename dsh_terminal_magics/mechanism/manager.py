"""The session manager: ``ctx.terminals`` of the seed.

Owns opaque session ids, the owner fence, the backend registry and the
lifecycle of every session.  Every call takes the exact owner object; a
session presented by another owner gets the same error as an unknown id.

The operations are coroutines that run on the private loop thread (the
tools layer awaits them there).  From other threads use the proxies:
``manager.sync.open(owner, "shell")`` blocks until done,
``await manager.aio.open(owner, "shell")`` awaits from another event loop.
"""
from __future__ import annotations

import asyncio
import builtins
import contextlib
import atexit
import os
import secrets
import signal as signal_module
import warnings
import weakref
from dataclasses import dataclass
from typing import Callable

from ..errors import (BackendError, InvalidArgumentError, SessionLimitError, SessionNotRunningError,
                      TerminalError, UnknownSessionError, absolute_path, out_of_tasks_error, shown)
from ..owners import new_id
from ..vocabulary import (COLS_RANGE, MAX_READ_LINES, MAX_SEND_BYTES, ROWS_RANGE, SIGNALS, session_name_problem,
                          signal_name, wait_seconds_problem)
from .backends import BASE_ENV, Backend, BackendRegistry, LaunchSpec
from .environment import AGENT_DEFAULT, EnvironmentPolicy, session_environment
from .event_loop import EventLoopThread, LoopProxy, wait_within
from .fork_server import ForkServer
from .keys import encode_keys
from .process_tree import SESSION_TOKEN_ENV, end_trees, off_the_loop, until_reaped
from .pty_child import spawn_off_loop
from ..asciicast import CastRecorder, open_recording
from .process_cap import ProcessCap
from .sandbox import INIT_FAILED, Sandbox, Wrapped
from .send import SendOperation, SendRequest, SendResult
from .session import Session, SessionInfo, SessionOptions
from .watchdog import Watchdog


@dataclass(frozen=True)
class Page:
    """A page of retained output."""

    lines: list[str]
    line_begin: int
    line_end: int
    total_lines: int
    truncated: bool

_PROCESS_TOKEN = secrets.token_hex(8)
#: Longest a close waits, once the tree has ended, for the process the session started to be reaped (seconds).
REAP_WAIT = 2.0


def _new_process_token() -> None:
    """In a forked child: a token of its own.  With the parent's, the child's watchdog, sweeping as the child
    exited, ended the parent's sessions."""
    global _PROCESS_TOKEN
    _PROCESS_TOKEN = secrets.token_hex(8)


os.register_at_fork(after_in_child=_new_process_token)

#: Longest the file system may take to answer an open's questions (is the cwd a directory?), in seconds: a
#: hung mount (a stale NFS or sshfs mount, a FUSE server that stopped) held the loop, and every session with it.
FILE_SYSTEM_SECONDS = 5.0
#: Most such questions left unanswered at once: each holds a thread, blocked in the kernel, until its mount
#: comes back or goes.
MAX_UNANSWERED_FILE_SYSTEM = 8
_unanswered_file_system = 0
#: Open sessions one owner may have (default), and all owners of all managers in this process together.
MAX_SESSIONS_PER_OWNER = 64
MAX_SESSIONS_PER_PROCESS = 256
_MANAGERS: "weakref.WeakSet[SessionManager]" = weakref.WeakSet()


class SessionManager:
    """Persistent PTY sessions, fenced by owner.

    ``workspace_root`` is the default ``cwd`` (default: the process's current
    directory at the time of each open).  ``options`` sets sizes, scrollback
    bounds and the close grace for new sessions.  ``sync`` and ``aio`` run
    the coroutine operations from other threads / other event loops.
    """

    def __init__(self, *, workspace_root: str | None = None, options: SessionOptions | None = None,
                 registry: BackendRegistry | None = None, loop_thread: EventLoopThread | None = None,
                 max_sessions_per_owner: int = MAX_SESSIONS_PER_OWNER) -> None:
        self.workspace_root = workspace_root
        self.max_sessions_per_owner = max_sessions_per_owner
        self.options = options or SessionOptions()
        self.registry = registry or BackendRegistry()
        self.loop_thread = loop_thread or EventLoopThread.shared()
        self.sync = LoopProxy(self, self.loop_thread, blocking=True)
        self.aio = LoopProxy(self, self.loop_thread, blocking=False)
        self._sessions: dict[str, Session] = {}
        self._closed = False
        _MANAGERS.add(self)

    # -- lookups (loop thread) ---------------------------------------------------
    def session(self, owner: object, session_id: object) -> Session:
        """The live session ``session_id`` of ``owner``; another owner's id is an unknown id (loop thread)."""
        if owner is None:
            raise TerminalError("terminal tools require an initiating agent")
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None or session.owner is not owner:
            raise UnknownSessionError(str(session_id))
        return session

    def _running_session(self, owner: object, session_id: str) -> Session:
        session = self.session(owner, session_id)
        if not session.running:
            session.check_can_send()
        return session

    # -- operations (coroutines on the loop) -------------------------------------------
    async def open(self, owner: object, type: str = "shell", *, name: str | None = None, cwd: str | None = None,
                   options: SessionOptions | None = None,
                   environment: EnvironmentPolicy = AGENT_DEFAULT,
                   sandbox: Sandbox | Callable[[], Sandbox] = Sandbox()) -> SessionInfo:
        """Open a session of backend ``type``; returns once its program first waits for input.  ``sandbox`` may
        be a function that says it (it looks for bubblewrap on ``PATH``: it is called off the loop)."""
        if owner is None:
            raise TerminalError("terminal tools require an initiating agent")
        if self._closed:
            raise TerminalError("this session manager has been shut down: create a new one")
        backend = self.registry.get(type)
        if name is not None and (problem := session_name_problem(name)):
            raise InvalidArgumentError(problem)
        self._check_caps(owner)
        root = absolute_path(self.workspace_root or ".")
        where = absolute_path(os.path.join(root, os.path.expanduser(cwd))) if cwd is not None else root
        spec, wrapping = await _prepare_in_time(backend, cwd, where, root, sandbox)
        self._check_caps(owner)  # (again: other opens went on while the file system answered)
        if name is not None and any(s.owner is owner and s.name == name and s.status != "closed"
                                    for s in self._sessions.values()):
            raise InvalidArgumentError(
                f"you already have a terminal session named {name!r}: pick another name or close that one")
        session_id = new_id("t")
        Watchdog.ensure(_PROCESS_TOKEN)
        token = f"{_PROCESS_TOKEN}.{secrets.token_hex(8)}"  # unrelated to the session id
        # (PWD: the directory as named, which a shell keeps when it is where it starts - through a symlink, the
        # kernel's own PWD made bash fall back to the resolved path, and 'cd ..' went to the target's parent)
        env = session_environment(environment, os.environ, {**BASE_ENV, **spec.env, "PWD": where},
                                  {SESSION_TOKEN_ENV: token})
        options = options or self.options
        # The sandbox's set-up (it reads every Unix socket the host has bound: 60 ms for 3000), the fork and
        # the exec start now, in a spawner thread; the session's own state is built meanwhile.
        cap = None if wrapping.max_processes is None else ProcessCap(wrapping.max_processes, session_id)

        def wrapped_and_capped() -> Wrapped:
            command = wrapping.wrap(spec.argv, where, root)
            return command._replace(cap=None if cap is None else cap.make(command.caps_in_namespace))

        spawning = spawn_off_loop(self.loop_thread.loop, wrapped_and_capped, where, env, options.rows, options.cols)
        try:
            session = Session(session_id=session_id, owner=owner, name=name, type_name=type, spec=spec,
                              cwd=where, env=env, token=token, options=options,
                              loop=self.loop_thread.loop, sandbox=wrapping, cap=cap)
        except BaseException:
            spawning.cancel()  # the process it starts is killed and reaped
            raise
        self._sessions[session_id] = session  # counted by the caps from now on: opens overlap
        try:
            await session.open(spawning)
            await session.wait_started()
            failure = session.wrapper_failure()
            if failure == INIT_FAILED:
                raise BackendError(failure)
            if failure is not None and "Resource temporarily unavailable" in failure:  # (EAGAIN: out of tasks)
                raise out_of_tasks_error(f"start the session ({failure})")
            if failure is not None:
                raise BackendError(f"bubblewrap could not start the session ({failure}): what it needs is not "
                                   "there inside its namespace - open it in another cwd")
            if session.closing is not None:
                raise TerminalError("the session was closed while it started (its manager was shut down, or its "
                                    "owner's sessions were closed): open a new one if it is still needed")
        except BaseException:
            await self._close([session])
            raise
        return session.snapshot()

    def _check_caps(self, owner: object) -> None:
        mine = sum(1 for s in self._sessions.values() if s.owner is owner)
        if mine >= self.max_sessions_per_owner:
            raise SessionLimitError(f"you already have {mine} open terminal sessions, the most one agent may "
                                    f"have ({self.max_sessions_per_owner}): close some with terminal_close first")
        everyone = sum(len(m._sessions) for m in _MANAGERS)
        if everyone >= MAX_SESSIONS_PER_PROCESS:
            raise SessionLimitError(f"this kernel already runs {everyone} terminal sessions, the most it allows "
                                    f"({MAX_SESSIONS_PER_PROCESS}): close sessions that no longer matter")

    def interrupt_foreground_send(self, owner: object, session_id: object) -> bool:
        """Interrupt ``owner``'s foreground send on ``session_id`` as its caller's Ctrl-C would (loop thread).

        False when there is none (unknown session, no send, or a background job's send, which
        ``job_kill`` ends).
        """
        try:
            session = self.session(owner, session_id)
        except TerminalError:
            return False
        op = session.operation
        if op is None or not (session.reservation or "").startswith("a foreground send"):
            return False
        op.cancel()
        return True

    def begin_send(self, owner: object, session_id: str, request: SendRequest, holder: str) -> SendOperation:
        """Take the session's send reservation for ``holder`` and start the send (loop thread)."""
        session = self.session(owner, session_id)
        check_request(request)
        return session.start_send(request, holder)

    def preflight_send(self, owner: object, session_id: str, request: SendRequest) -> None:
        """Raise unless ``request`` could start on the session now (loop thread)."""
        session = self.session(owner, session_id)
        check_request(request)
        session.check_can_send()

    async def send(self, owner: object, session_id: str, request: SendRequest) -> SendResult:
        """Write and wait (see :class:`SendRequest`); cancelling this interrupts the program."""
        op = self.begin_send(owner, session_id, request, "a foreground send")
        return await wait_interruptible(op)

    async def read(self, owner: object, session_id: str, offset: int = 0, count: int = 500) -> Page:
        """A page of retained output, ``offset`` lines back from the newest."""
        session = self.session(owner, session_id)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidArgumentError(f"offset must be an integer >= 0 (0 = newest), got {offset!r}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise InvalidArgumentError(f"count must be an integer >= 1, got {count!r}")
        capped = count > MAX_READ_LINES
        lines, begin, end, total = session.scrollback.page(offset, min(count, MAX_READ_LINES))
        session.saw_page(begin, end)
        return Page(lines, begin, end, total, capped)

    async def signal(self, owner: object, session_id: str, signal: str) -> int:
        """Send ``signal`` (``SIGINT`` or ``INT`` …) to the foreground process group; returns the group id."""
        session = self.session(owner, session_id)
        name = signal_name(signal)
        if not session.running:
            session.check_can_send()
        pgid = session.foreground_pgid()
        if pgid <= 0:
            raise SessionNotRunningError(
                f"terminal session {session_id!r} has no foreground process group yet: try again")
        if name == "SIGKILL" and pgid == session.pid:
            raise InvalidArgumentError(
                "SIGKILL would kill the session's shell itself: use terminal_close to end the session, "
                "or SIGINT/SIGTERM to stop the foreground command")
        if session.operation is not None:  # (nothing more of a send's text: the program it is for may end)
            session.operation.stop_text()
        key = None
        if name == "SIGINT":  # as the interrupt key would: text queued behind the command does not run after it
            key = session.clear_input_for_interrupt()
        elif pgid != session.pid:  # (a signal ending a command leaves no input of it for the shell to run)
            session.discard_input()
        try:
            os.killpg(pgid, SIGNALS[name])
            if name in ("SIGINT", "SIGTERM", "SIGHUP") and _any_stopped(session, pgid):
                # A stopped process acts on nothing until it is continued (a shell that ran kill -STOP $$
                # kept the terminal, and every signal but SIGKILL waited for ever): as kill(1) does for jobs.
                os.killpg(pgid, signal_module.SIGCONT)
            elif name == "SIGTSTP" and pgid == session.pid:
                # The session's own program has the terminal: nothing above it could continue it.  The kernel
                # voids a stop from the terminal for a session's first process; under a wrapper (bubblewrap's,
                # the python session's sh) it would not (see Session.wake_program), so it is voided here alike.
                os.killpg(pgid, signal_module.SIGCONT)
        except PermissionError:
            if key is not None and session.write_now(key) == len(key):
                return pgid  # (typed, the terminal delivers its interrupt key's signal to another user's group)
            raise TerminalError(f"may not signal process group {pgid}: it runs as another user (sudo, su); while "
                                "the terminal makes signals of keys, its keys reach it: send the key C-c (SIGINT), "
                                "C-\\ (SIGQUIT) or C-z (SIGTSTP); else end it as that user") from None
        except OSError as exc:
            raise SessionNotRunningError(f"could not signal process group {pgid}: {exc.strerror}; "
                                         "the command may have just ended - read the session and try again")
        return pgid

    async def close(self, owner: object, session_id: str) -> bool:
        """End the session's whole process tree.  False when a close was already running."""
        session = self.session(owner, session_id)
        return session in await self._close([session])

    async def resize(self, owner: object, session_id: str, rows: int, cols: int) -> tuple[int, int]:
        """Set the terminal size (the program gets SIGWINCH)."""
        session = self._running_session(owner, session_id)
        for name, value, (low, high) in (("rows", rows, ROWS_RANGE), ("cols", cols, COLS_RANGE)):
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise InvalidArgumentError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        session.resize(rows, cols)
        return rows, cols

    async def record(self, owner: object, session_id: str, action: str, path: str | None = None,
                     confine_to: str | None = None) -> tuple[str, int, bool]:
        """Start (``action="start"``, ``path``) or stop an asciinema v2 recording; returns (path, events,
        whether the file stopped growing at its size cap).

        ``confine_to``: the directory a recording must stay inside (see
        :func:`~dsh_terminal_magics.asciicast.open_recording`).  The file is
        opened in a worker thread: the loop never waits on the file system.
        """
        session = self.session(owner, session_id)
        if action == "start":
            if not path:
                raise InvalidArgumentError("starting a recording needs a path, e.g. 'session.cast'")
            _check_not_recording(session)
            rows, cols = session.size()
            recorder = await _open_recording_in_time(path, rows, cols, session.name or session.session_id,
                                                     confine_to)
            if session.recorder is not None or not session.running:  # it changed while the file opened
                recorder.close()
                _check_not_recording(session)
                session.check_can_send()
            session.recorder = recorder
            return recorder.path, 0, False
        if action == "stop":
            stopping, session.recorder = session.recorder, None
            if stopping is None:
                raise InvalidArgumentError(f"terminal session {session_id!r} is not recording: start a recording "
                                           "first")
            stopping.close()
            await asyncio.get_running_loop().run_in_executor(None, stopping.wait_written, 5.0)
            return stopping.path, stopping.events, stopping.truncated
        raise InvalidArgumentError(f"action must be 'start' or 'stop', got {action!r}")

    async def list(self, owner: object) -> builtins.list[SessionInfo]:
        """Snapshots of ``owner``'s sessions."""
        if owner is None:
            raise TerminalError("terminal tools require an initiating agent")
        return [s.snapshot() for s in self._sessions.values() if s.owner is owner and s.child is not None]

    async def close_owner(self, owner: object) -> None:
        """Close every session of ``owner`` (warning of processes left, see :func:`_warn_of_left_running`)."""
        _warn_of_left_running(await self._close([s for s in self._sessions.values() if s.owner is owner]))

    async def shutdown(self) -> None:
        """Close every session of every owner; the manager accepts no new sessions."""
        self._closed = True
        _warn_of_left_running(await self._close(builtins.list(self._sessions.values())))

    async def _close(self, sessions: builtins.list[Session]) -> builtins.list[Session]:
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


def _warn_of_left_running(sessions: builtins.list[Session]) -> None:
    """Closes that name nobody (a shutdown, an ``Agent`` leaving its ``with``) say what they could not end: another
    user's processes, which this process may not signal (see ``TreeToEnd.beyond_reach``)."""
    left = [(s.session_id, pid) for s in sessions for pid in s.left_running]
    if left:
        warnings.warn("terminal sessions closed, but these processes of theirs run on - another user's (started "
                      "with sudo?), which this process may not signal; end them as that user: "
                      + ", ".join(f"pid {pid} ({sid})" for sid, pid in left), RuntimeWarning, stacklevel=1)


async def _open_recording_in_time(path: str, *args: object) -> CastRecorder:
    """:func:`open_recording` in a thread of its own, within :data:`FILE_SYSTEM_SECONDS`: a recording path in a
    hung mount held the call for ever (and a thread of the loop's shared pool); one opened too late is closed."""
    opening = asyncio.ensure_future(off_the_loop(open_recording, path, *args, name="dsh-terminal-fs"))
    try:
        return await wait_within(asyncio.shield(opening), FILE_SYSTEM_SECONDS)
    except asyncio.TimeoutError:
        opening.add_done_callback(_close_late_recording)
        raise InvalidArgumentError(f"cannot record to {path!r}: the file system did not answer within "
                                   f"{FILE_SYSTEM_SECONDS:g} s (a hung mount?): pick a path elsewhere") from None


def _close_late_recording(opened: "asyncio.Future[CastRecorder]") -> None:
    if not opened.cancelled() and opened.exception() is None:
        opened.result().close()


def _check_not_recording(session: Session) -> None:
    if session.recorder is not None:
        raise InvalidArgumentError(f"terminal session {session.session_id!r} is already recording to "
                                   f"{session.recorder.path}: stop that recording first")


async def wait_interruptible(op: SendOperation) -> SendResult:
    """Await a send; if the awaiting task is cancelled, interrupt the program and let the send wind up."""
    try:
        return await asyncio.shield(op.future)
    except asyncio.CancelledError:
        op.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(op.future), timeout=10)
        except Exception:
            pass
        raise


def _any_stopped(session: Session, pgid: int) -> bool:
    """Whether a process of group ``pgid`` is stopped."""
    return any(stat.state == "T" for stat in session.group_stats(pgid))


async def close_sessions(sessions: builtins.list[Session]) -> None:
    """End the trees of several sessions together (one ``/proc`` scan per round for all)."""
    for session in sessions:  # a spawn in progress finishes first (milliseconds): its process ends with the rest
        await session.spawned()
    ending = [(session, tree) for session in sessions if (tree := session.begin_close()) is not None]
    trees = [tree for _, tree in ending]
    grace = max((s.options.close_grace for s in sessions), default=0.0)
    if trees:
        await end_trees(trees, grace)
        # The process each session started is a zombie now, until its parent reaps it: we at once; the fork
        # server when it next runs - on a busy host close returned with it still there.
        for session, _ in ending:
            if session.child is not None:
                session.child.reap()
        await until_reaped([tree.leader for tree in trees], REAP_WAIT)
    for session, tree in ending:
        session.left_running = tree.out_of_reach_alive()
    for session in sessions:
        op = session.operation
        if op is not None and not op.done:
            try:
                await asyncio.wait_for(asyncio.shield(op.future), timeout=5)
            except Exception:
                pass
        session.finish_close()


def check_request(request: SendRequest) -> None:
    """Refuse a request a terminal cannot carry or a wait outside the bounds."""
    if not isinstance(request.text, str):
        raise InvalidArgumentError(f"text must be a string, got {type(request.text).__name__}")
    if "\x00" in request.text:
        raise InvalidArgumentError("text contains a NUL byte: remove it, or to type one (C-Space, C-@: emacs' "
                                   "set-mark) send the key C-Space in keys instead")
    if len(request.text.encode("utf-8", "surrogateescape")) > MAX_SEND_BYTES:
        raise InvalidArgumentError(
            f"text is larger than {MAX_SEND_BYTES} bytes: write it to a file and send a command that reads it")
    if request.keys:
        encode_keys(list(request.keys))  # refuses unknown key names
    for field_name in ("timeout", "idle"):
        problem = wait_seconds_problem(field_name, getattr(request, field_name))
        if problem:
            raise InvalidArgumentError(problem)


def shutdown_all() -> None:
    """Close every session of every manager in this process (atexit, kernel shutdown)."""
    for manager in list(_MANAGERS):
        try:
            if manager.loop_thread.thread.is_alive():
                manager.sync.shutdown()
        except Exception:
            pass
    ForkServer.stop()
    Watchdog.stop()


atexit.register(shutdown_all)


def _check_directories(cwd: str | None, where: str, root: str, sandbox: Sandbox) -> None:
    """Raise the error a session opened in ``where`` (``cwd`` as given) under ``root`` and ``sandbox`` gets: the
    directory must exist (and, sandboxed, the workspace root), and be one the wrapping can start in."""
    if not os.path.isdir(where):
        raise InvalidArgumentError(
            f"cwd {shown(cwd, 200)} is not an existing directory: pass an existing directory, "
            f"or omit cwd to start in the workspace root {root}")
    if sandbox.mode != "off" and not os.path.isdir(root):
        raise TerminalError(f"the workspace root {root!r} (the one directory a sandboxed session may write) is "
                            "not an existing directory: create it, or give the tools an existing workspace root")
    problem = sandbox.cwd_problem(where)
    if problem:
        raise InvalidArgumentError(problem)


def _prepare(backend: Backend, cwd: str | None, where: str, root: str,
             sandbox: Sandbox | Callable[[], Sandbox]) -> tuple[LaunchSpec, Sandbox]:
    """What an open asks the file system (off the loop): how it is sandboxed (is bubblewrap on ``PATH``?), are
    its directories good, and what is to run there (a backend looks its program up on ``PATH``, and may run it
    once to ask its version)."""
    if not isinstance(sandbox, Sandbox):
        sandbox = sandbox()
    _check_directories(cwd, where, root, sandbox)
    return backend.launch(where), sandbox


async def _prepare_in_time(backend: Backend, cwd: str | None, where: str, root: str,
                           sandbox: Sandbox | Callable[[], Sandbox]) -> tuple[LaunchSpec, Sandbox]:
    """:func:`_prepare` in a thread of its own, within :data:`FILE_SYSTEM_SECONDS`: past it the open fails saying
    where it waited (the thread counted as unanswered until it comes back), and the loop never waited."""
    global _unanswered_file_system
    if _unanswered_file_system >= MAX_UNANSWERED_FILE_SYSTEM:
        raise TerminalError(f"the file system has not answered {_unanswered_file_system} earlier opens (a hung "
                            "mount?): bring the mount back or unmount it, then open again")
    given_up = finished = False

    def answered() -> None:
        global _unanswered_file_system
        nonlocal finished
        finished = True
        if given_up:
            _unanswered_file_system -= 1

    def ask() -> tuple[LaunchSpec, Sandbox]:
        try:
            return _prepare(backend, cwd, where, root, sandbox)
        finally:
            with contextlib.suppress(RuntimeError):  # (the loop is gone: nobody counts any more)
                loop.call_soon_threadsafe(answered)

    loop = asyncio.get_running_loop()
    try:
        return await wait_within(off_the_loop(ask, name="dsh-terminal-fs"), FILE_SYSTEM_SECONDS)
    except asyncio.TimeoutError:
        if not finished:  # (on the loop, as answered runs: the two never overlap)
            given_up = True
            _unanswered_file_system += 1
        raise InvalidArgumentError(f"cwd {shown(cwd, 200)}: the file system did not answer within "
                                   f"{FILE_SYSTEM_SECONDS:g} s whether {shown(where, 200)} is a directory, or where "
                                   f"the {backend.name!r} session's program (or bubblewrap) is on PATH (a hung "
                                   "mount?): pick another directory, or bring the mount back or unmount it") from None
