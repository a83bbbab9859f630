"""The process on a PTY: spawn, read, write, reap, watch exits, close.

:func:`spawn` starts the program from a spawner thread - through the fork server
(:mod:`.fork_server`), or with ``ptyprocess`` and our session-leader preexec where
there is none; :class:`PtyChild` (loop thread only) then holds
the descriptors a session needs: the master (non-blocking, read
as soon as it is readable), a slave descriptor for ``TIOCINQ``, a pidfd for
the leader's exit, and pidfds watching the foreground group's processes.
Nothing here blocks: reaping uses ``WNOHANG``, writes wait for room with a
deadline.
"""
from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import queue
import re
import shutil
import signal
import struct
import threading
import termios
import time
import weakref
from typing import Any, Callable

from ptyprocess import PtyProcess

from ..errors import TerminalError, out_of_tasks_error
from .fork_server import ForkServer
from .process_tree import (LeaderCap, ProcessId, enter_abstract_socket_scope, is_alive, join_cap, make_leader_preexec,
                           read_stat)
from .sandbox import Wrapped

#: Most foreground processes watched for exit at once (pidfds).
MAX_EXIT_WATCHES = 16
#: Reads a drain may make (a PTY read returns at most a few KiB: what a program that is done writing can
#: have left is read in a few).
MAX_READS = 32
#: Loop time the output of one readable event may take (seconds), its reads included: the next batch is sized
#: from what the last one cost, so a program printing what is slow to process (cursor games, a flood of empty
#: lines) cannot hold the loop - every other session's sends wait behind each batch.  (4 ms, the reads left
#: out, made another agent's ``echo hi`` 14 ms beside a flooding session, against 7.8 ms with these two
#: budgets; the flood's own throughput moved within the noise: 52.8 against 51.4 MB/s.)
TURN_BUDGET = 0.002
#: What a turn's output may take instead while another session's send waits: that send needs several turns
#: (the write, its echo, the output, the prompt, a look), each behind one batch.
WAITED_TURN_BUDGET = 0.00025
#: The least a reader reads in a turn, however many share the budget (one PTY read's worth); a batch this
#: big or bigger counts its session as busy for :data:`BUSY_WINDOW` seconds.
MIN_BATCH = 4096
BUSY_WINDOW = 0.05
#: Looks, a millisecond apart, for the exit status the fork server tells after a leader's exit.
STATUS_ASKS = 200


class _BusyReaders:
    """The sessions whose output keeps coming (a batch of :data:`MIN_BATCH` or more within the last
    :data:`BUSY_WINDOW`): they share one turn's budget, so a turn costs about :data:`TURN_BUDGET` however many
    there are.  Each had a budget of its own, and one agent's 32 sessions running ``yes`` held every other
    session's send for a second.  Counted at most every millisecond (a turn reads many)."""

    def __init__(self) -> None:
        self._last: "weakref.WeakKeyDictionary[PtyChild, float]" = weakref.WeakKeyDictionary()
        self._count, self._counted_at = 1, 0.0
        #: The sessions whose send waits for their program (see :meth:`PtyChild.send_began`; a plain set: a
        #: weak one costs every send a Python call at each look; a closed session's child is forgotten).
        self.waiting: set[PtyChild] = set()

    def noted(self, child: "PtyChild", size: int, now: float) -> None:
        if size >= MIN_BATCH:
            self._last[child] = now

    def forget(self, child: "PtyChild") -> None:
        self._last.pop(child, None)
        self.waiting.discard(child)

    def share(self, child: "PtyChild", batch: int, now: float) -> int:
        """``child``'s part of this turn: its ``batch`` (what :data:`TURN_BUDGET` buys it) shared with the
        other busy readers - and cut to :data:`WAITED_TURN_BUDGET` while another session's send waits."""
        batch //= self.sharing(now)
        if self.waiting and (len(self.waiting) > 1 or child not in self.waiting):
            batch = int(batch * (WAITED_TURN_BUDGET / TURN_BUDGET))
        return max(MIN_BATCH, batch)

    def sharing(self, now: float) -> int:
        """How many share the budget now (at least 1)."""
        if not self._last:  # (the common case; walking a weak dictionary costs a send ~8 % of its loop time)
            self._count = 1
        elif now - self._counted_at >= 0.001:
            for child, at in list(self._last.items()):
                if now - at > BUSY_WINDOW:
                    del self._last[child]
            self._count, self._counted_at = max(1, len(self._last)), now
        return self._count


_BUSY = _BusyReaders()

#: Control characters other than Enter, line feed and TAB: one of them may be the key that stops the
#: terminal's output while XON/XOFF flow control is on (C-s unless a program redefined it: ``stty stop ^B``).
_CONTROL_KEYS = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def spawn(command: Callable[[], Wrapped], cwd: str, env: dict[str, str], rows: int, cols: int) -> PtyProcess:
    """Start what ``command()`` says - e.g. a sandbox's wrapping, which may read the file system at length - on
    a new PTY as a session leader (our preexec, then the wrapping's own step); closes the fds passed here once
    the child has its copies.  Blocks for the fork and until the exec: the loop runs it in a spawner thread
    (:func:`spawn_off_loop`)."""
    _check_descriptors_left()
    wrapped = command()
    argv, fds, scoped, cap = wrapped.argv, wrapped.fds, wrapped.abstract_socket_scope, wrapped.cap
    pass_fds = tuple(fds)
    try:
        if _FORK_SERVED:
            proc = _spawn_by_server(argv, cwd, env, rows, cols, pass_fds, scoped, cap)
        else:
            proc = PtyProcess.spawn(argv, cwd=cwd, env=env, dimensions=(rows, cols),
                                    preexec_fn=_leader_preexec(scoped, cap), pass_fds=pass_fds)
    except OSError as exc:
        raise TerminalError(f"could not start {' '.join(argv)}: {exc.strerror or exc}; "
                            + _start_advice(exc)) from exc
    finally:
        for fd in pass_fds:  # the child has its copies
            os.close(fd)
    proc.delayafterclose = proc.delayafterterminate = 0
    return proc


#: Whether sessions are started by the fork server (:mod:`.fork_server`): where exits can be watched with a
#: pidfd (a leader is then not our child), and unless ``DSH_TERMINAL_FORK_SERVER=0``.
_FORK_SERVED = hasattr(os, "pidfd_open") and os.environ.get("DSH_TERMINAL_FORK_SERVER", "1") != "0"


def _leader_preexec(scoped: bool, cap: LeaderCap | None) -> Callable[[], None]:
    """Our session-leader steps for a child this process forks (``scoped``: then the sandbox's Landlock scope;
    ``cap``: the cap on its tasks; see :class:`.sandbox.Wrapped`)."""
    leader = make_leader_preexec(os.getpid())
    if not scoped and cap is None:
        return leader  # type: ignore[no-any-return]

    def preexec() -> None:
        leader()
        if cap is not None:
            join_cap(*cap)
        if scoped:
            enter_abstract_socket_scope()

    return preexec


def _spawn_by_server(argv: list[str], cwd: str, env: dict[str, str], rows: int, cols: int,
                     pass_fds: tuple[int, ...], scoped: bool, cap: LeaderCap | None) -> PtyProcess:
    """:func:`spawn` through the fork server: this process opens the PTY and the server forks the leader, which
    has ``pass_fds`` under the same numbers (bubblewrap's ``--seccomp N``).  Raises :class:`OSError`."""
    path = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0])
    if path is None:
        raise FileNotFoundError(errno.ENOENT, f"{argv[0]} is not on PATH")
    master, slave = os.openpty()
    try:
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        pid = ForkServer.spawn([path, *argv[1:]], env, cwd, slave, pass_fds, scoped, cap)
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return PtyProcess(pid, master)


#: Spawner threads: a fork and the wait for the child's exec take milliseconds, which would stall every
#: session's I/O on the loop, and several opens overlap there.  They never end before the process does:
#: ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends.  A pool of
#: :data:`SPAWNER_THREADS`, grown while every one is busy up to :data:`MAX_SPAWNER_THREADS`: a spawn can be
#: held for long (the sandbox's set-up reads the workspace: a hung mount there holds it until the mount comes
#: back), and four held ones left no opens at all.
SPAWNER_THREADS = 4
MAX_SPAWNER_THREADS = 16
_Work = tuple[Callable[[], Any], "asyncio.AbstractEventLoop | None", "asyncio.Future[PtyProcess] | None"]
_spawn_queue: "queue.SimpleQueue[_Work]" = queue.SimpleQueue()
_spawners: list[threading.Thread] = []
_spawners_lock = threading.Lock()
#: Spawner threads waiting for work, and started but not waiting yet; spawns queued and not taken yet.
_idle_spawners = 0
_starting_spawners = 0
_queued_spawns = 0


def _forget_the_parents_spawners() -> None:
    """In a forked child: the spawner threads stayed in the parent, with the spawns queued for them (an open
    here waited for threads that were not there); this process starts its own."""
    global _spawn_queue, _spawners, _spawners_lock, _idle_spawners, _starting_spawners, _queued_spawns
    _spawn_queue, _spawners, _spawners_lock = queue.SimpleQueue(), [], threading.Lock()
    _idle_spawners = _starting_spawners = _queued_spawns = 0


os.register_at_fork(after_in_child=_forget_the_parents_spawners)


def spawn_off_loop(loop: asyncio.AbstractEventLoop, *args: Any) -> "asyncio.Future[PtyProcess]":
    """:func:`spawn` in a spawner thread; the future resolves on ``loop`` with the process (or the error).
    Cancelling the future does not stop the spawn: a process it started then is killed and reaped."""
    done: asyncio.Future[PtyProcess] = loop.create_future()
    _queue_spawn((lambda: spawn(*args), loop, done))
    return done


def _queue_spawn(work: _Work) -> None:
    """Queue ``work`` for a spawner thread, starting the pool first (raises :class:`TerminalError` when not one
    spawner thread can start; a pool that cannot grow serves with the threads it has)."""
    global _queued_spawns
    with _spawners_lock:
        while len(_spawners) < SPAWNER_THREADS or (_queued_spawns >= _idle_spawners + _starting_spawners
                                                   and len(_spawners) < MAX_SPAWNER_THREADS):
            if not _start_spawner():  # (the whole pool at the first spawn; one more while every one is busy)
                if not _spawners:
                    raise out_of_tasks_error("start the session (no thread to spawn it from)")
                break
        _queued_spawns += 1
        _spawn_queue.put(work)


def _start_spawner() -> bool:
    """Start one more spawner thread; False when no thread can start (the user's process limit)."""
    global _starting_spawners
    thread = threading.Thread(target=_spawner, name=f"dsh-terminal-spawn-{len(_spawners)}", daemon=True)
    _starting_spawners += 1
    try:
        thread.start()
    except RuntimeError:
        _starting_spawners -= 1
        return False
    _spawners.append(thread)
    return True


def _spawner() -> None:
    """A spawner thread's life: never ends (see :data:`SPAWNER_THREADS`), whatever a job raises."""
    global _idle_spawners, _queued_spawns, _starting_spawners
    with _spawners_lock:
        _starting_spawners -= 1
    while True:
        with _spawners_lock:
            _idle_spawners += 1
        work, loop, done = _spawn_queue.get()
        with _spawners_lock:
            _idle_spawners -= 1
            _queued_spawns -= 1
        try:
            proc, exc = work(), None
        except BaseException as error:  # noqa: BLE001 - handed to the waiting coroutine
            proc, exc = None, error
        if loop is None or done is None:
            continue
        try:
            loop.call_soon_threadsafe(_settle, done, proc, exc)
        except RuntimeError:  # the loop is closed (interpreter exit): nobody will take the process
            if proc is not None:
                _discard(proc)


def _settle(done: "asyncio.Future[PtyProcess]", proc: PtyProcess | None, exc: BaseException | None) -> None:
    if done.cancelled():  # nobody takes the process: end it off the loop (kill and reap)
        if proc is not None:
            _queue_spawn((lambda: _discard(proc), None, None))
        return
    if exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(proc)  # type: ignore[arg-type]


def _exit_code(status: int) -> int:
    """A wait status as a shell reports it: the exit status, or 128 + the signal that ended the process (a
    bare shell killed by SIGKILL showed -9, and one hung up by its terminal -1, which reads as "unknown";
    under a wrapper - bubblewrap's, the python session's ``sh`` - the same deaths already showed 137, 129)."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _discard(proc: PtyProcess) -> None:
    """Kill a just-spawned process nobody took, with its process group, and reap it.  Its group: bubblewrap
    killed this early leaves the child it forked for the namespace waiting for it for ever (blocked on an
    eventfd only the killed one would have written, before ``--die-with-parent`` took hold)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # (a session leader: its group is its pid)
    except OSError:
        pass
    try:
        os.kill(proc.pid, signal.SIGKILL)
        os.waitpid(proc.pid, 0)
    except OSError:
        pass
    proc.fileobj.close()


class PtyChild:
    """One backend process on a new PTY (spawned by :func:`spawn`).

    ``on_output(data)`` receives every chunk read from the master;
    ``on_change()`` is called when the leader exits or a watched process exits;
    ``after_read()`` is called after output the loop's reader callback read (not
    after :meth:`drain`): the moment a send waiting on output may look at once.
    """

    def __init__(self, proc: PtyProcess, loop: asyncio.AbstractEventLoop, on_output: Callable[[bytes], None],
                 on_change: Callable[[], None], after_read: Callable[[], None] = lambda: None) -> None:
        self.loop = loop
        self._on_output = on_output
        self._on_change = on_change
        self._after_read = after_read
        self._proc = proc
        self.pid: int = proc.pid
        self.master_fd: int = proc.fd
        self.exit_status: int | None = None
        self.exited = False
        self.exits_seen = 0
        self._status_asks = 0
        self._exit_watch: dict[int, int] = {}
        #: Bytes the next readable event reads at most (see :data:`TURN_BUDGET`).
        self._batch_bytes = 1 << 20
        #: Whether the last read stopped at its turn's budget with output left to read (a flood).
        self.output_waiting = False
        os.set_blocking(proc.fd, False)
        try:
            self.tty_path = os.readlink(f"/proc/{proc.pid}/fd/0")  # the child's end: /dev/pts/N
            self.slave_fd = os.open(self.tty_path, os.O_RDWR | os.O_NOCTTY)
        except OSError:
            self.tty_path, self.slave_fd = "", -1
        stat = read_stat(proc.pid)
        self.leader = ProcessId(proc.pid, stat.start_time if stat else 0)
        loop.add_reader(proc.fd, self._on_readable)
        try:
            self._pidfd = os.pidfd_open(proc.pid)
            loop.add_reader(self._pidfd, self._leader_exited)
        except (AttributeError, OSError):
            self._pidfd = -1
            loop.call_later(0.05, self._poll_leader)

    @property
    def closed(self) -> bool:
        return bool(self._proc.closed)

    # -- output ---------------------------------------------------------------------
    def _on_readable(self) -> None:
        """Read this turn's share of the output waiting (see :class:`_BusyReaders`)."""
        if self._read_available(_BUSY.share(self, self._batch_bytes, time.monotonic())):
            self._after_read()

    def _read_available(self, limit: int = 1 << 30) -> bool:
        """Read what is waiting (up to :data:`MAX_READS` reads, ``limit`` bytes) and pass it on; whether there
        was any.  The time passing it on took sizes the next batch of :meth:`_on_readable`."""
        chunks: list[bytes] = []
        size = 0
        self.output_waiting = False
        started = time.perf_counter()  # (the reads count: one may wait for the kernel's worker to fill the buffer)
        while True:
            if len(chunks) >= MAX_READS or size >= limit:
                self.output_waiting = True  # (this turn's budget is spent: the rest is read next turn)
                break
            try:
                data = os.read(self.master_fd, min(65536, limit - size))
            except BlockingIOError:
                break
            except OSError:
                _remove_reader(self.loop, self.master_fd)
                break
            if not data:
                _remove_reader(self.loop, self.master_fd)
                break
            chunks.append(data)
            size += len(data)
        if not chunks:
            return False
        _BUSY.noted(self, size, time.monotonic())
        self._on_output(b"".join(chunks))
        spent = time.perf_counter() - started
        if size >= 4096:  # (a small read's cost is mostly fixed: it says little about the next batch)
            self._batch_bytes = max(4096, int(size * TURN_BUDGET / max(spent, 1e-6)))
        return True

    def send_began(self) -> None:
        """A send to this session waits for its program: other sessions' output takes less of each turn."""
        _BUSY.waiting.add(self)

    def send_ended(self) -> None:
        _BUSY.waiting.discard(self)

    def drain(self) -> bool:
        """Read whatever output is waiting now; whether there was any."""
        return not self.closed and self._read_available()

    # -- input ----------------------------------------------------------------------
    def interrupt_key(self) -> bytes | None:
        """The terminal's interrupt character while it makes signals of keys (ISIG), else None."""
        try:
            attrs = termios.tcgetattr(self.master_fd)
        except (OSError, termios.error):
            return None
        key = attrs[6][termios.VINTR]
        if not attrs[3] & termios.ISIG or not isinstance(key, bytes) or key == b"\x00":
            return None
        return key

    def clear_input_for_signal_keys(self, data: bytes) -> bool:
        """Throw away the input the program has not read when ``data`` holds a key the terminal makes a signal
        of (interrupt, quit, suspend: C-c, C-\\, C-z unless a program changed them) - what the line
        discipline does once it reaches that key, done before the key is written so that it gets there.
        Input a program does not read queues up in the kernel, and a key written behind a full queue waits
        there with it: C-c after a large text sent to a busy program never interrupted it.  Nothing changes
        while the terminal keeps input at a signal (``NOFLSH``) or makes no signals of keys (raw mode).
        Returns whether the input was thrown away."""
        if self.slave_fd < 0 or _CONTROL_KEYS.search(data) is None:
            return False
        try:
            attrs = termios.tcgetattr(self.master_fd)
        except (OSError, termios.error):
            return False
        if not attrs[3] & termios.ISIG or attrs[3] & termios.NOFLSH:
            return False
        keys = (attrs[6][termios.VINTR], attrs[6][termios.VQUIT], attrs[6][termios.VSUSP])
        if any(isinstance(key, bytes) and key != b"\x00" and key in data for key in keys):
            self.discard_input()
            return True
        return False

    def discard_input(self) -> None:
        """Throw away the input no program has read (the line discipline's queue and what waits to enter it)."""
        if self.slave_fd >= 0:
            try:
                termios.tcflush(self.slave_fd, termios.TCIFLUSH)
            except termios.error:
                pass

    def without_output_stop(self, data: bytes) -> bytes:
        """``data`` less the key that would stop the terminal's output (C-s, or what a program made the stop key,
        while a program has turned XON/XOFF flow control back on: ``stty sane``, ``reset``).  The terminal takes
        that key itself, so the program never sees it either way; written, it would only stop the output for
        good.  (A printable character made the stop key, ``stty stop a``, is left in.)"""
        if _CONTROL_KEYS.search(data) is None:
            return data
        try:
            attrs = termios.tcgetattr(self.master_fd)
        except (OSError, termios.error):
            return data
        stop = attrs[6][termios.VSTOP]
        if not attrs[0] & termios.IXON or not isinstance(stop, bytes) or _CONTROL_KEYS.fullmatch(stop) is None:
            return data
        return data.replace(stop, b"")

    def restart_output(self) -> None:
        """Let output flow again if a program stopped it (``tcflow(TCOOFF)``): no output may wait for a key
        nobody knows to press.  (Output a stop key stopped waits for the start key: see
        :meth:`without_output_stop`.)"""
        if self.slave_fd >= 0:
            try:
                termios.tcflow(self.slave_fd, termios.TCOON)
            except termios.error:
                pass

    def write_now(self, data: bytes) -> int:
        """Write what the PTY takes now; returns the bytes written."""
        if self.closed:
            return 0
        try:
            return os.write(self.master_fd, data)
        except OSError:
            return 0

    async def write_all(self, data: bytes, deadline: float, stopped: Callable[[], bool] | None = None) -> int:
        """Write ``data``, waiting for room; returns the bytes written (fewer when the child exited,
        ``deadline`` passed or ``stopped()``, asked before each write, said so)."""
        view = memoryview(data)
        while view and not (stopped is not None and stopped()):
            view = view[self.write_now(bytes(view[:4096])):]
            if view:
                if self.exited or self.closed or time.monotonic() >= deadline:
                    break
                await self._writable(min(0.05, max(deadline - time.monotonic(), 0.0)))
        return len(data) - len(view)

    async def _writable(self, timeout: float) -> None:
        ready = self.loop.create_future()
        fd = self.master_fd

        def writable() -> None:
            if not ready.done():
                ready.set_result(None)

        self.loop.add_writer(fd, writable)
        try:
            await asyncio.wait_for(ready, timeout=timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            self.loop.remove_writer(fd)

    def setwinsize(self, rows: int, cols: int) -> None:
        self._proc.setwinsize(rows, cols)

    # -- exits ------------------------------------------------------------------------
    def _leader_exited(self) -> None:
        if self._pidfd >= 0:
            self.loop.remove_reader(self._pidfd)
        self.reap()

    def _poll_leader(self) -> None:
        if not self.closed and not self.reap():
            self.loop.call_later(0.05, self._poll_leader)

    def reap(self) -> bool:
        """Collect the leader's exit status if it has exited (never blocks); True once it has."""
        if self.exited:
            return True
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # the fork server's child: it tells the status, a moment after the exit
            pid, status = self._told_status()
        if pid == 0:
            return False
        self.exit_status = _exit_code(status) if status >= 0 else None
        self.exited = self._proc.terminated = True
        self.drain()
        self._on_change()
        return True

    def _told_status(self) -> tuple[int, int]:
        """:func:`os.waitpid`'s answer for a leader the fork server started (not our child): ``(0, 0)`` while it
        runs, or while it has ended and the server has not told its status yet (asked again in a millisecond);
        ``(pid, -1)`` when it never does (the server died with it)."""
        status = ForkServer.exit_status(self.pid)
        if status is not None:
            return self.pid, status
        if is_alive(self.leader):
            return 0, 0
        self._status_asks += 1
        if self._status_asks > STATUS_ASKS:
            return self.pid, -1
        self.loop.call_later(0.001, self._ask_status_again)
        return 0, 0

    def _ask_status_again(self) -> None:
        if not self.closed:
            self.reap()

    def watch_exits(self, pids: set[int]) -> None:
        """Call ``on_change`` when any of ``pids`` exits (pidfds); stop watching the others."""
        pids = pids - {self.pid}
        for pid in list(self._exit_watch):
            if pid not in pids:
                self._unwatch(pid)
        for pid in pids - set(self._exit_watch):
            if len(self._exit_watch) >= MAX_EXIT_WATCHES:
                break
            try:
                fd = os.pidfd_open(pid)
            except (AttributeError, OSError):
                continue
            self._exit_watch[pid] = fd
            self.loop.add_reader(fd, self._watched_exit, pid)

    def _watched_exit(self, pid: int) -> None:
        self._unwatch(pid)
        self.exits_seen += 1
        self._on_change()

    def _unwatch(self, pid: int) -> None:
        fd = self._exit_watch.pop(pid)
        _remove_reader(self.loop, fd)
        os.close(fd)

    def stop_watching_exits(self) -> None:
        for pid in list(self._exit_watch):
            self._unwatch(pid)

    # -- close --------------------------------------------------------------------------
    def close_fds(self) -> None:
        """Close every descriptor (master exactly once, through its file object)."""
        self.stop_watching_exits()
        _BUSY.forget(self)
        if not self._proc.closed:
            _remove_reader(self.loop, self.master_fd)
            try:
                self._proc.fileobj.close()
            except OSError:
                pass
            self._proc.closed = True
            self._proc.fd = -1
        if self._pidfd >= 0:
            _remove_reader(self.loop, self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self.slave_fd >= 0:
            os.close(self.slave_fd)
            self.slave_fd = -1


def _remove_reader(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    try:
        loop.remove_reader(fd)
    except (ValueError, OSError):
        pass


#: Descriptors a new session needs (master, slave, pidfd, the child's setup pipe, exit watches, /proc reads).
FDS_PER_SESSION = 8


def _check_descriptors_left() -> None:
    """Refuse to start when this process is about to run out of file descriptors (clear error, nothing spawned)."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or _fd_table_size() + FDS_PER_SESSION <= soft:
        return  # fewer fds are open than the table has room for: no need to count them
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE) or "out of pty devices" in str(exc):
            used = soft
        else:
            return
    if soft != resource.RLIM_INFINITY and used + FDS_PER_SESSION > soft:
        raise TerminalError(f"too many open files: this process uses {used} of its {soft} file descriptors "
                            "(RLIMIT_NOFILE); close sessions you no longer need, or raise the limit")


def _fd_table_size() -> int:
    """The size of this process's fd table (``FDSize``: above its highest open fd), or a huge number."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"FDSize:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 30


def _start_advice(exc: OSError) -> str:
    if exc.errno in (errno.EMFILE, errno.ENFILE) or "out of pty devices" in str(exc):
        return ("out of file descriptors or pseudo-terminals: close sessions you no longer need, or raise the "
                "open-file limit")
    if exc.errno in (errno.EAGAIN, errno.ENOMEM):
        return "the system is out of processes or memory: close sessions you no longer need"
    return "check that the program is installed and runnable"
