"""One PTY session: the process, its output, its sends.  Lives on the loop thread.

Everything here runs on the private event loop (see :mod:`.event_loop`);
nothing in this module is thread-safe on purpose.  Output is read as soon as
the master is readable, so a busy notebook never leaves a child blocked on a
full PTY and idle timing is never distorted.
"""
from __future__ import annotations

import asyncio
import math
import os
import re
import signal as signal_module
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Literal

from ptyprocess import PtyProcess

from ..errors import InvalidArgumentError, SessionBusyError, SessionNotRunningError, TerminalError
from .backends import BASE_ENV, LaunchSpec
from .keys import encode_keys
from .output import OutputNormalizer, RawRing, ScrollbackBuffer, TerminalEvents
from .process_tree import (SESSION_TOKEN_ENV, ProcessId, TreeToEnd, end_trees, make_leader_preexec,
                           read_stat)
from .readiness import Fence, ReadinessProbe
from .recording import CastRecorder
from .screen import ScreenModel, ScreenSnapshot

WaitReason = Literal["stdin_read", "inferred_idle", "timeout", "session_exit"]
SessionStatus = Literal["starting", "running", "exited", "closing", "closed"]

#: Readiness re-checks right after output arrives, one per loop turn (a program usually
#: blocks microseconds after printing its prompt; epoll timers cannot wait less than 1 ms).
SPIN_CHECKS = 4
#: First and largest gap between readiness checks while nothing is printed (seconds).
MIN_TICK = 0.001
MAX_TICK = 0.05
#: Clear-screen or absolute cursor positioning below the first row: a program drawing a screen.
_CURSOR_ADDRESSING = re.compile(rb"\x1b\[2J|\x1b\[(?:[2-9]|\d\d+);\d+H")
#: Longest a timed tty wait must last, without new output, before it counts as a prompt (seconds).
TIMED_WAIT_SETTLE = 1.5
#: Largest text one send may write.
MAX_SEND_BYTES = 1024 * 1024
ENTER = b"\r"


@dataclass(frozen=True)
class SessionOptions:
    """Per-session limits and defaults (documented in the README)."""

    rows: int = 40
    cols: int = 160
    scrollback_lines: int = 10_000
    scrollback_chars: int = 4 * 1024 * 1024
    raw_bytes: int = 1024 * 1024
    start_timeout: float = 10.0
    close_grace: float = 2.0


@dataclass(frozen=True)
class SendRequest:
    """What to write and how long to wait.

    ``text`` is written as is (plus Enter, a CR, when ``submit``).  The wait
    ends at the first of: the program reads the tty again (``stdin_read``),
    ``idle`` seconds without output (``inferred_idle``), ``timeout`` seconds
    (``timeout``), or the session's process exits (``session_exit``).
    ``viewport_chars`` bounds the output kept for the result (newest kept).
    """

    text: str = ""
    submit: bool = True
    timeout: float = 30.0
    idle: float = 3.0
    viewport_chars: int = 1024 * 1024
    #: Named keys sent after the text (see :mod:`.keys`).
    keys: tuple[str, ...] = ()

    def payload(self, application_cursor: bool = False) -> bytes:
        data = self.text.encode("utf-8", "surrogateescape")
        if self.keys:
            data += encode_keys(list(self.keys), application_cursor)
        return data + ENTER if self.submit else data


@dataclass
class SendResult:
    """The outcome of one send."""

    wait_reason: WaitReason
    viewport: str
    viewport_truncated: bool
    session_status: SessionStatus
    exit_code: int | None
    cancelled: bool = False
    bell: bool = False
    elapsed: float = 0.0
    #: The raw bytes the program wrote during this send (newest ``viewport_chars``), escapes included.
    raw_output: bytes = b""
    #: The rendered screen when a full-screen program had the alternate screen at the end.
    screen: ScreenSnapshot | None = None


@dataclass
class SessionInfo:
    """A snapshot of a session for listings."""

    session_id: str
    name: str | None
    type: str
    pid: int | None
    status: SessionStatus
    motd: str = ""
    exit_status: int | None = None
    last_wait_reason: str | None = None
    last_exit_code: int | None = None
    rows: int = 40
    cols: int = 160


@dataclass
class Page:
    """A page of retained output."""

    lines: list[str]
    line_begin: int
    line_end: int
    total_lines: int
    truncated: bool


class SendOperation:
    """A send in progress.  Create with :meth:`Session.start_send`; loop-thread only.

    ``future`` resolves to a :class:`SendResult`; :meth:`cancel` interrupts the
    foreground program (SIGINT to its process group) and ends the wait once it
    is back at a prompt; :meth:`read_output` returns finished lines produced
    since the previous call (never the same text twice).
    """

    def __init__(self, session: "Session", request: SendRequest, holder: str) -> None:
        self.session = session
        self.request = request
        self.holder = holder
        self.future: asyncio.Future[SendResult] = session.loop.create_future()
        self.start_line = session.scrollback.completed_lines + 1
        self._cursor = self.start_line
        self.cancel_requested = False
        self.interrupted_at = self.last_interrupt = 0.0
        self.started = time.monotonic()
        self.raw_offset = session.raw.total
        self.timed_wait: tuple[float, int] | None = None
        self.escape_sent = False
        self.exit_code: int | None = None
        self.marker_seen = False
        self.bell = False
        self.task: asyncio.Task[None] | None = None

    @property
    def done(self) -> bool:
        return self.future.done()

    def cancel(self) -> None:
        """Interrupt: SIGINT to the foreground group; the wait then ends at the next prompt."""
        if self.future.done() or self.cancel_requested:
            return
        self.cancel_requested = True
        self.interrupted_at = self.last_interrupt = time.monotonic()
        self.session.interrupt_foreground()
        self.session.wake()

    def read_output(self) -> str:
        """Finished lines since the last call; once done, also the final unfinished line."""
        sb = self.session.scrollback
        lines, self._cursor, dropped = sb.completed_since(self._cursor)
        text = "\n".join(lines) + ("\n" if lines else "")
        if dropped:
            text = f"[{dropped} lines dropped: scrollback overflowed]\n" + text
        if self.future.done() and self._cursor == sb.completed_lines + 1:
            tail = sb.partial_line
            if tail:
                text += tail
                self._cursor += 1
        return text


class Session:
    """A PTY running one backend process, with its output and at most one send at a time."""

    def __init__(self, *, session_id: str, owner: object, name: str | None, type_name: str,
                 spec: LaunchSpec, cwd: str, token: str, options: SessionOptions,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.session_id = session_id
        self.owner = owner
        self.name = name
        self.type = type_name
        self.spec = spec
        self.cwd = cwd
        self.token = token
        self.options = options
        self.loop = loop
        self.status: SessionStatus = "starting"
        self.exit_status: int | None = None
        self.motd = ""
        self.scrollback = ScrollbackBuffer(options.scrollback_lines, options.scrollback_chars)
        self.raw = RawRing(options.raw_bytes)
        self.normalizer = OutputNormalizer()
        self.reservation: str | None = None
        self.operation: SendOperation | None = None
        self.last_exit_code: int | None = None
        self.last_wait_reason: str | None = None
        self.last_output = 0.0
        self.alternate_screen = False
        self.application_cursor = False
        self.listeners: list[Callable[[], None]] = []
        self._chunk_size = 0
        self._wakeup: asyncio.Future[None] | None = None
        self._proc: PtyProcess | None = None
        self._leader: ProcessId | None = None
        self._slave_fd = -1
        self._pidfd = -1
        #: Set while (and after) the session is being closed; resolves when it is gone.
        self.closing: asyncio.Future[None] | None = None
        self.probe: ReadinessProbe | None = None
        self.screen: ScreenModel | None = None
        self.cursor_screen = False
        self.recorder: CastRecorder | None = None

    # -- lifecycle -----------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def spawn(self) -> None:
        """Start the backend process on a new PTY (runs on the loop thread)."""
        env = dict(os.environ)
        env.pop("PROMPT_COMMAND", None)
        env.update(BASE_ENV)
        for key, value in self.spec.env.items():  # an empty value unsets
            if value:
                env[key] = value
            else:
                env.pop(key, None)
        env[SESSION_TOKEN_ENV] = self.token
        try:
            proc = PtyProcess.spawn(self.spec.argv, cwd=self.cwd, env=env,
                                    dimensions=(self.options.rows, self.options.cols),
                                    preexec_fn=make_leader_preexec(os.getpid()))
        except Exception as exc:
            raise TerminalError(f"could not start {self.type!r} session ({' '.join(self.spec.argv)}): {exc}; "
                                "check that the program is installed") from exc
        proc.delayafterclose = 0
        proc.delayafterterminate = 0
        self._proc = proc
        os.set_blocking(proc.fd, False)
        tty_path = os.readlink(f"/proc/{proc.pid}/fd/0") if os.path.exists("/proc/self/fd") else ""
        try:
            self._slave_fd = os.open(tty_path or os.ttyname(proc.fd), os.O_RDWR | os.O_NOCTTY)
        except OSError:
            self._slave_fd = -1
        stat = read_stat(proc.pid)
        self._leader = ProcessId(proc.pid, stat.start_time if stat else 0)
        self.probe = ReadinessProbe(proc.fd, self._slave_fd, tty_path, proc.pid)
        self.loop.add_reader(proc.fd, self._on_readable)
        try:
            self._pidfd = os.pidfd_open(proc.pid)
            self.loop.add_reader(self._pidfd, self._on_leader_exit)
        except (AttributeError, OSError):
            self._pidfd = -1
            self.loop.call_later(0.05, self._poll_leader_exit)
        self.status = "running"

    async def wait_started(self) -> str:
        """Wait for the first prompt (bounded); return the bounded start-up output."""
        op = self.start_send(SendRequest(text="", submit=False, timeout=self.options.start_timeout,
                                         idle=self.options.start_timeout), holder="start-up")
        result = await op.future
        startup = result.viewport.strip()
        self.motd = "\n".join(filter(None, [self.spec.description, startup[-1024:]]))
        return self.motd

    def _on_leader_exit(self) -> None:
        if self._pidfd >= 0:
            self.loop.remove_reader(self._pidfd)
        self._reap_leader()

    def _poll_leader_exit(self) -> None:
        if self.status in ("running", "starting"):
            if not self._reap_leader():
                self.loop.call_later(0.05, self._poll_leader_exit)

    def _reap_leader(self) -> bool:
        assert self._proc is not None
        try:
            pid, status = os.waitpid(self._proc.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self._proc.pid, -1
        if pid == 0:
            return False
        self.exit_status = os.waitstatus_to_exitcode(status) if status >= 0 else None
        self._proc.terminated = True
        self._drain()
        if self.status in ("running", "starting"):
            self.status = "exited"
        self.wake()
        return True

    def close_fds(self) -> None:
        if self._proc is not None and not self._proc.closed:
            try:
                self.loop.remove_reader(self._proc.fd)
            except (ValueError, OSError):
                pass
            try:
                self._proc.fileobj.close()  # the file object owns the master fd: close it exactly once
            except OSError:
                pass
            self._proc.closed = True
            self._proc.fd = -1
        for attr in ("_slave_fd", "_pidfd"):
            fd = getattr(self, attr)
            if fd >= 0:
                if attr == "_pidfd":
                    try:
                        self.loop.remove_reader(fd)
                    except (ValueError, OSError):
                        pass
                os.close(fd)
                setattr(self, attr, -1)

    def begin_close(self) -> TreeToEnd | None:
        self.status = "closing"
        if self.operation is not None:
            self.operation.cancel_requested = True
        self.wake()
        if self._leader is None:
            return None
        leader_gone = self.exit_status is not None or self._proc is None or self._proc.terminated
        return TreeToEnd(self._leader, self.token.encode(), leader_gone)

    def finish_close(self) -> None:
        if self._proc is not None and not self._proc.terminated:
            try:
                pid, status = os.waitpid(self._proc.pid, 0)
                self.exit_status = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                pass
            self._proc.terminated = True
        self._drain()
        if self.recorder is not None:
            self.recorder.close()
            self.recorder = None
        self.close_fds()
        self.status = "closed"
        self.wake()
        for listener in list(self.listeners):
            listener()

    # -- output ---------------------------------------------------------------
    def _on_readable(self) -> None:
        assert self._proc is not None
        chunks = []
        for _ in range(32):
            try:
                data = os.read(self._proc.fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                self.loop.remove_reader(self._proc.fd)
                break
            if not data:
                self.loop.remove_reader(self._proc.fd)
                break
            chunks.append(data)
        if chunks:
            self._ingest(b"".join(chunks))

    def _drain(self) -> None:
        if self._proc is not None and not self._proc.closed:
            self._on_readable()

    def _ingest(self, data: bytes) -> None:
        self._chunk_size = len(data)
        self.raw.append(data)
        if self.recorder is not None:
            self.recorder.output(data)
        if not self.alternate_screen:
            self._follow_cursor_programs(data)
        text, events = self.normalizer.feed(data)
        self.scrollback.append(text)
        if events:
            self._handle_events(events)
        self.last_output = time.monotonic()
        self.wake()
        for listener in self.listeners:
            listener()

    def _handle_events(self, events: TerminalEvents) -> None:
        replies = b""
        if events.cursor_position_requests:
            col = min(len(self.scrollback.partial_line) + 1, self.options.cols)
            replies += f"\x1b[{self.options.rows};{col}R".encode() * events.cursor_position_requests
        if events.device_attribute_requests:
            replies += b"\x1b[?1;2c" * events.device_attribute_requests
        if replies:
            self._write_now(replies)
        if events.exit_codes:
            self.last_exit_code = events.exit_codes[-1]
            if self.operation is not None:
                self.operation.exit_code = events.exit_codes[-1]
                self.operation.marker_seen = True
        if events.bells and self.operation is not None:
            self.operation.bell = True
        if events.alternate_screen is not None:
            if events.alternate_screen and not self.alternate_screen:
                # Follow the full-screen program from the chunk that switched screens.
                self.screen = ScreenModel(self.options.rows, self.options.cols, self.raw.total - self._chunk_size)
            self.alternate_screen = events.alternate_screen
        if events.application_cursor is not None:
            self.application_cursor = events.application_cursor

    def wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def _sleep_until_output(self, delay: float) -> None:
        self._wakeup = self.loop.create_future()
        handle = self.loop.call_later(max(delay, 0.0), self.wake)
        try:
            await self._wakeup
        finally:
            handle.cancel()
            self._wakeup = None

    # -- input ------------------------------------------------------------------
    def _write_now(self, data: bytes) -> int:
        if self._proc is None or self._proc.closed:
            return 0
        try:
            return os.write(self._proc.fd, data)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            return 0

    async def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = self._write_now(bytes(view[:4096]))
            view = view[written:]
            if view:
                if self.status not in ("running", "starting"):
                    return
                await self._writable()

    async def _writable(self) -> None:
        assert self._proc is not None
        ready = self.loop.create_future()
        fd = self._proc.fd
        def writable() -> None:
            if not ready.done():
                ready.set_result(None)

        self.loop.add_writer(fd, writable)
        try:
            await asyncio.wait_for(ready, timeout=0.05)
        except asyncio.TimeoutError:
            pass
        finally:
            self.loop.remove_writer(fd)

    def write_input(self, data: bytes) -> None:
        """Type ``data`` into the terminal without waiting, as a person at the keyboard would."""
        if self.status in ("running", "starting"):
            self.loop.create_task(self._write_all(data))

    def check_can_send(self) -> None:
        """Raise unless a send may start now."""
        if self.status in ("closing", "closed"):
            raise SessionNotRunningError(
                f"terminal session {self.session_id!r} is closing: open a new session with terminal_open")
        if self.status == "exited":
            raise SessionNotRunningError(
                f"terminal session {self.session_id!r} has exited (status {self.exit_status}): "
                "read its output with terminal_read, then close it with terminal_close")
        if self.reservation is not None:
            raise SessionBusyError(
                f"terminal session {self.session_id!r} is busy: {self.reservation} holds its send reservation; "
                "wait for it (job_output) or stop it (job_kill), then send again")

    def start_send(self, request: SendRequest, holder: str) -> SendOperation:
        """Take the send reservation now and start writing and waiting; returns the operation."""
        self.check_can_send()
        payload = request.payload(self.application_cursor)  # may refuse bad keys: before anything changes
        op = SendOperation(self, request, holder)
        op.escape_sent = b"\x1b" in payload
        self.reservation = holder
        self.operation = op
        # Fence and first write happen now, so the program starts working before any task runs.
        fence = self.probe.fence(accept_stale=not payload) if self.probe else Fence(accept_stale=True)
        written = self._write_now(payload[:4096]) if payload else 0
        op.task = self.loop.create_task(self._run_send(op, fence, payload[written:]))
        return op

    async def _run_send(self, op: SendOperation, fence: Fence, rest: bytes) -> None:
        try:
            result = await self._send_and_wait(op, fence, rest)
        except BaseException as exc:  # the reservation must never leak
            self._release(op)
            if not op.future.done():
                op.future.set_exception(exc if isinstance(exc, Exception) else TerminalError("send cancelled"))
            if not isinstance(exc, Exception):
                raise
            return
        self._release(op)
        self.last_wait_reason = result.wait_reason
        op.future.set_result(result)

    def _release(self, op: SendOperation) -> None:
        if self.operation is op:
            self.operation = None
            self.reservation = None
        for listener in list(self.listeners):
            listener()

    async def _send_and_wait(self, op: SendOperation, fence: Fence, rest: bytes) -> SendResult:
        request = op.request
        payload = request.payload()
        started = op.started
        await self._write_all(rest)
        written_at = time.monotonic()
        written_chars = self.scrollback.chars_written
        deadline = started + request.timeout
        tick = MIN_TICK
        spins = SPIN_CHECKS
        seen_output = self.scrollback.chars_written
        while True:
            if self.status not in ("running", "starting"):
                reason: WaitReason = "session_exit"
                break
            if self._ready(op, fence, written_chars if payload and not request.submit else -1):
                self._drain()
                reason = "stdin_read"
                break
            now = time.monotonic()
            if op.cancel_requested:
                if now - op.interrupted_at > 5.0:
                    reason = "timeout"
                    break
                if self.foreground_pgid() not in (0, self.pid) and now - op.last_interrupt > 0.1:
                    # Input still queued at the first SIGINT may have started a job since: stop it too.
                    op.last_interrupt = now
                    self.interrupt_foreground()
            idle_at = max(self.last_output, written_at) + request.idle
            if now >= deadline:
                reason = "timeout"
                break
            if now >= idle_at and not op.cancel_requested:
                reason = "inferred_idle"
                break
            if spins > 0:
                spins -= 1
                await self._sleep_until_output(0)
            else:
                await self._sleep_until_output(min(tick, deadline - now, max(idle_at - now, 0.0005)))
                tick = min(tick * 2, MAX_TICK)
            if self.scrollback.chars_written != seen_output:
                seen_output = self.scrollback.chars_written
                tick, spins = MIN_TICK, SPIN_CHECKS
        snapshot = self.screen_snapshot() if self.full_screen else None
        if snapshot is not None:
            viewport, cut = snapshot.text(), False
        else:
            viewport, cut = self.scrollback.text_since(op.start_line, request.viewport_chars)
        status = self.status if self.status != "starting" else "running"
        exit_code = self.exit_status if reason == "session_exit" else op.exit_code
        raw, _lost = self.raw.since(op.raw_offset)
        return SendResult(reason, viewport, cut, status, exit_code, op.cancel_requested, op.bell,
                          time.monotonic() - started, raw[-request.viewport_chars:], snapshot)

    def _ready(self, op: SendOperation, fence: Fence, partial_from: int) -> bool:
        """Is the program waiting for input?  ``partial_from``: output count at the write of
        unsubmitted text (-1 otherwise)."""
        probe = self.probe
        if probe is not None and probe.available:
            timeout = probe.waiting_for_input(fence)
            if timeout is None and partial_from >= 0 and not fence.accept_stale \
                    and self.scrollback.chars_written > partial_from:
                # Canonical-mode readers do not wake for a partial line: once its echo is
                # back and nothing is left unread, a wait already in progress is the answer.
                fence.accept_stale = probe.unread_input() == 0
                timeout = probe.waiting_for_input(fence) if fence.accept_stale else None
            return self._settled(op, timeout)
        # No /proc: the shell marker, with the shell back in the foreground.
        return op.marker_seen and probe is not None and probe.foreground_pgid() == self.pid

    # -- screens, size, recording ------------------------------------------------------
    def _follow_cursor_programs(self, data: bytes) -> None:
        """Programs like ``top`` draw on the main screen by cursor addressing: follow them with a
        screen model (and keep their drawing out of the line history) while they hold the foreground."""
        if self.cursor_screen:
            if self.foreground_pgid() in (0, self.pid):
                self.cursor_screen = self.normalizer.suppressed = False
            return
        if b"\x1b[" not in data or not _CURSOR_ADDRESSING.search(data):
            return
        if self.foreground_pgid() in (0, self.pid):
            return
        self.cursor_screen = self.normalizer.suppressed = True
        self.screen = ScreenModel(self.options.rows, self.options.cols, self.raw.total - len(data))

    @property
    def full_screen(self) -> bool:
        """True while a full-screen program owns the terminal (alternate screen or cursor addressing)."""
        if self.cursor_screen and self.foreground_pgid() in (0, self.pid):
            self.cursor_screen = self.normalizer.suppressed = False
        return self.alternate_screen or self.cursor_screen

    def screen_snapshot(self) -> ScreenSnapshot | None:
        """The full-screen program's screen, brought up to date (None when no screen is followed)."""
        if self.screen is None:
            return None
        self.screen.catch_up(self.raw)
        return self.screen.snapshot()

    def resize(self, rows: int, cols: int) -> None:
        """Set the terminal size: the program gets SIGWINCH, the screen model follows."""
        if self._proc is None or self._proc.closed:
            raise SessionNotRunningError(f"terminal session {self.session_id!r} is closed")
        self._proc.setwinsize(rows, cols)
        self.options = replace(self.options, rows=rows, cols=cols)
        if self.screen is not None:
            self.screen.resize(rows, cols)
        if self.recorder is not None:
            self.recorder.resize(rows, cols)

    def start_recording(self, path: str) -> CastRecorder:
        if self.recorder is not None:
            raise InvalidArgumentError(f"terminal session {self.session_id!r} is already recording to "
                                       f"{self.recorder.path}: stop that recording first")
        self.recorder = CastRecorder(path, self.options.rows, self.options.cols, title=self.name or self.session_id)
        return self.recorder

    def stop_recording(self) -> CastRecorder:
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            raise InvalidArgumentError(f"terminal session {self.session_id!r} is not recording: start a recording "
                                       "first")
        recorder.close()
        return recorder

    def _settled(self, op: SendOperation, timeout: float | None) -> bool:
        """An untimed wait is a prompt, and so is a timed one (node, IPython poll their tty) -
        unless we sent an ESC: then the program may be waiting out its key timeout (vim after
        Esc, with more typed-ahead keys in its own buffer), and the wait counts only once it
        outlasts that timeout (capped at :data:`TIMED_WAIT_SETTLE`) with no new output."""
        if timeout is None:
            op.timed_wait = None
            return False
        if timeout == math.inf or not op.escape_sent:
            return True
        now = time.monotonic()
        written = self.scrollback.chars_written
        if op.timed_wait is None or op.timed_wait[1] != written:
            op.timed_wait = (now + min(timeout, TIMED_WAIT_SETTLE), written)
            return False
        return now >= op.timed_wait[0]

    # -- signals ---------------------------------------------------------------
    def foreground_pgid(self) -> int:
        return self.probe.foreground_pgid() if self.probe else 0

    def interrupt_foreground(self) -> None:
        pgid = self.foreground_pgid()
        if pgid > 0:
            try:
                os.killpg(pgid, signal_module.SIGINT)
            except OSError:
                pass

    def snapshot(self) -> SessionInfo:
        return SessionInfo(self.session_id, self.name, self.type, self.pid, self.status, self.motd,
                           self.exit_status, self.last_wait_reason, self.last_exit_code,
                           self.options.rows, self.options.cols)


async def close_sessions(sessions: list[Session]) -> None:
    """End the trees of several sessions together (one ``/proc`` scan per round for all)."""
    trees = []
    for session in sessions:
        tree = session.begin_close()
        if tree is not None:
            trees.append(tree)
    grace = max((s.options.close_grace for s in sessions), default=0.0)
    if trees:
        await end_trees(trees, grace)
    for session in sessions:
        if session.operation is not None and session.operation.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(session.operation.future), timeout=5)
            except Exception:
                pass
        session.finish_close()
