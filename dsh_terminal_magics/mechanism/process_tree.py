"""Finding and ending a session's whole process tree.

A session's tree is every process descended from its leader (the shell),
found by walking down the children lists in ``/proc`` (never by scanning every
process on the machine, on the loop).  The leader is made a child
subreaper before it execs (``prctl(PR_SET_CHILD_SUBREAPER)`` survives exec),
so double-forked, ``setsid`` and ``nohup`` descendants are re-parented to it
and stay in the tree.  Processes that escaped anyway (the leader died first)
are found by the session token every session process inherits in its
environment.  Processes are tracked as :class:`ProcessId` (pid + start time)
so a reused pid is never signalled.
"""
from __future__ import annotations

import asyncio
import ctypes
import os
import queue
import resource
import signal
import struct
import termios
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple, TypeVar

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

#: Environment variable that marks every process of a session tree.
SESSION_TOKEN_ENV = "DSH_TERMINAL_SESSION"
#: Longest a close lets a frozen leader run to reap what died under it before it is killed (seconds).
REAP_GRACE = 0.5
#: How long a killed (or exiting) process may stay before a close counts it as ended (seconds): it runs no
#: code of its own again, and one held in the kernel - a read from a dead sshfs - was waited for for ever.
KILLED_BUT_HELD_SECONDS = 2.0
#: ``task_struct`` flag: the process is exiting.
PF_EXITING = 0x4
#: When each killed process was first seen held (see :func:`_ended`).
_held_since: dict["ProcessId", float] = {}

HAVE_PROC = os.path.isdir("/proc/self/task")


class ProcessId(NamedTuple):
    """A process as (pid, start time in clock ticks since boot): immune to pid reuse."""

    pid: int
    start_time: int


class ProcessStat(NamedTuple):
    """The fields of ``/proc/PID/stat`` this package reads (a named tuple: one is parsed per process per scan
    and several per readiness check)."""

    pid: int
    state: str
    ppid: int
    pgrp: int
    session: int
    start_time: int
    #: Threads of the whole process (the same in every thread's ``stat``).
    threads: int = 1
    #: The controlling terminal's device number (0: none) and its foreground process group (-1: none).
    tty_nr: int = 0
    tpgid: int = -1
    #: The kernel's flags for the process (``PF_EXITING``...).
    flags: int = 0

    @property
    def ident(self) -> ProcessId:
        return ProcessId(self.pid, self.start_time)

    @property
    def gone(self) -> bool:
        """It runs no more code: a zombie or dead process whose threads have all ended too (a thread-group
        leader that called ``pthread_exit`` shows ``Z`` while its other threads run on)."""
        return self.state in "ZX" and not _live_thread(self.pid)


def _live_thread(pid: int) -> bool:
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        raw = read_proc(f"/proc/{pid}/task/{tid}/stat")
        if raw is not None and raw[raw.rindex(b")") + 2:][:1] not in (b"Z", b"X"):
            return True
    return False


def parse_stat(raw: bytes, pid: int) -> ProcessStat:
    """Parse ``/proc/PID/stat`` (the command name may hold spaces and parentheses: the fields start after the
    last ``)``)."""
    rest = raw[raw.rindex(b")") + 2 :].split(None, 20)
    return ProcessStat(pid, chr(rest[0][0]), int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19]), int(rest[17]),
                       int(rest[4]), int(rest[5]), int(rest[6]))


def read_proc(path: str, size: int = 65536, offset: int = 0) -> bytes | None:
    """Up to ``size`` bytes of a small ``/proc`` file from ``offset``, or ``None`` (raw fd calls: this is on the
    hot path)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.pread(fd, size, offset)
    except OSError:
        return None
    finally:
        os.close(fd)


#: How long a reader waits for a read that can wait on the process it reads (see :class:`GuardedReads`).
GUARDED_READ_SECONDS = 0.25
#: Reads given up on that may still be waiting, at most; past that, no such read is tried (each holds a thread).
MAX_STUCK_READS = 4
#: A worker with no read to do for this long ends (the next read starts another): no thread outlives its use.
WORKER_IDLE_SECONDS = 2.0


class GuardedReads:
    """Reads of ``/proc`` files that can wait on the process they describe, each done by a worker thread and
    given up on after :data:`GUARDED_READ_SECONDS`.

    Reading a process's memory (``/proc/PID/mem``: a poll's fds, a sleep's timeout) brings its pages in, and
    a page of a file on a FUSE mount the program serves itself (in a user namespace of its own) waits for
    that server, for ever and uninterruptibly if it never answers; an epoll's ``fdinfo`` waits for the epoll's
    lock, which a thread adding a FUSE file to it holds while the server does not answer.  Read on the loop,
    either hung every session, and every cell waiting on one, for good.  (A contained session can mount no
    FUSE file system - see ``sandbox.SHARED_DEVICES`` -; one under process tracking still can.)

    A read given up on leaves its worker to finish or not (a new one serves the next read), and its pid is
    read no more until it does; :data:`MAX_STUCK_READS` such reads at once, and no guarded read is tried.  A
    worker idle for ``idle_seconds`` ends, so the thread is there only while sessions are being looked at."""

    def __init__(self, idle_seconds: float = WORKER_IDLE_SECONDS) -> None:
        self._idle_seconds = idle_seconds
        self._worker: _Worker | None = None
        self._lock = threading.Lock()
        #: Pids with a read given up on that has not finished: the number of such reads for each.
        self._stuck: dict[int, int] = {}

    def forget_the_parents_worker(self) -> None:
        """In a forked child: the worker thread stayed in the parent (reads queued for it were never done)."""
        self._worker, self._lock, self._stuck = None, threading.Lock(), {}

    def read(self, path: str, pid: int, size: int = 65536, offset: int = 0) -> bytes | None:
        """:func:`read_proc` of ``pid``'s ``path``, or None when it failed, took too long or was not tried."""
        with self._lock:
            if pid in self._stuck or sum(self._stuck.values()) >= MAX_STUCK_READS:
                return None
            if self._worker is None:
                try:
                    self._worker = _Worker(self._finished_late, self._retire, self._idle_seconds)
                except RuntimeError:  # (no thread can start: out of threads, or the interpreter is exiting)
                    return None
            worker = self._worker
            request = _Read(path, pid, size, offset)
            worker.requests.put(request)  # (under the lock: a worker retires only with nothing queued)
        if request.done.acquire(timeout=GUARDED_READ_SECONDS):
            return request.result
        with self._lock:
            if request.abandon():  # (it may have finished just now: then nothing is stuck)
                self._stuck[pid] = self._stuck.get(pid, 0) + 1
                self._worker = None
                worker.requests.put(None)  # (ends it once its read comes back)
                return None
        return request.result

    def _retire(self, worker: "_Worker") -> bool:
        """Whether an idle ``worker`` may end: it is still the one reads go to and nothing is queued for it (a
        replaced worker ends on the None queued for it when it was given up on)."""
        with self._lock:
            if self._worker is not worker or not worker.requests.empty():
                return False
            self._worker = None
            return True

    def _finished_late(self, request: "_Read") -> None:
        with self._lock:
            left = self._stuck.get(request.pid, 0) - 1
            if left > 0:
                self._stuck[request.pid] = left
            else:
                self._stuck.pop(request.pid, None)


class _Read:
    """One guarded read: done (its lock released) by the worker, or abandoned by the reader first."""

    def __init__(self, path: str, pid: int, size: int, offset: int) -> None:
        self.path, self.pid, self.size, self.offset = path, pid, size, offset
        self.result: bytes | None = None
        self.done = threading.Lock()
        self.done.acquire()
        self._state = threading.Lock()
        self._abandoned = False
        self._finished = False

    def run(self) -> bool:
        """Do the read; returns whether it was abandoned meanwhile."""
        result = read_proc(self.path, self.size, self.offset)
        with self._state:
            self.result, self._finished = result, True
            self.done.release()
            return self._abandoned

    def abandon(self) -> bool:
        """Give up on the read unless it finished; returns whether it was given up on."""
        with self._state:
            self._abandoned = not self._finished
            return self._abandoned


class _Worker:
    """A daemon thread doing guarded reads one after another until it is sent None, or is idle for
    ``idle_seconds`` and ``retire`` lets it end."""

    def __init__(self, finished_late: Callable[[_Read], None], retire: Callable[["_Worker"], bool],
                 idle_seconds: float) -> None:
        self.requests: queue.SimpleQueue[_Read | None] = queue.SimpleQueue()
        self._finished_late, self._retire, self._idle_seconds = finished_late, retire, idle_seconds
        self.thread = threading.Thread(target=self._serve, name="dsh-terminal-proc-read", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                request = self.requests.get(timeout=self._idle_seconds)
            except queue.Empty:
                if self._retire(self):
                    return
                continue
            if request is None:
                return
            if request.run():
                self._finished_late(request)


#: The process's guarded reads (one worker serves every session's).
guarded_reads = GuardedReads()
os.register_at_fork(after_in_child=guarded_reads.forget_the_parents_worker)


def read_memory(pid: int, address: int, size: int) -> bytes:
    """``size`` bytes of ``pid``'s memory at ``address`` (raises ``ValueError`` when short, failed or given up
    on: a read of memory can wait on the program - see :class:`GuardedReads`)."""
    data = guarded_reads.read(f"/proc/{pid}/mem", pid, size, address)
    if data is None or len(data) != size:
        raise ValueError("short read of process memory")
    return data


def read_link(path: str) -> str | None:
    """Where the symbolic link ``path`` points (a ``/proc`` link: a descriptor's file, a program); None when
    it cannot be read."""
    try:
        return os.readlink(path)
    except OSError:
        return None


def program_of(pid: int) -> str | None:
    """The program ``pid`` runs (its ``/proc/PID/exe``; None when that cannot be read).  It changes at each
    exec, and its reading takes no lock the program may hold (the file is the kernel's note of the exec)."""
    return read_link(f"/proc/{pid}/exe")


def read_stat(pid: int, tid: int | None = None) -> ProcessStat | None:
    """Read one process (or thread) stat; ``None`` when it does not exist or cannot be read."""
    return stat_of(read_proc(stat_path(pid, tid)), pid)


def stat_path(pid: int, tid: int | None = None) -> str:
    return f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"


def stat_of(raw: bytes | None, pid: int) -> ProcessStat | None:
    """The parsed text of a ``stat`` file, or ``None`` for a file that could not be read or parsed."""
    if raw is None:
        return None
    try:
        return parse_stat(raw, pid)
    except (ValueError, IndexError):
        return None


#: Open ``/proc`` files all :class:`ProcFiles` may keep at once: at most this, and a quarter of the fd limit.
PROC_FILES_BUDGET = 4096
#: Processes besides its program whose files a :class:`ProcFiles` keeps open (the foreground command's).
KEPT_OTHERS = 2
_proc_files_open = 0


def _proc_files_budget() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return PROC_FILES_BUDGET if soft == resource.RLIM_INFINITY else min(PROC_FILES_BUDGET, soft // 4)


class ProcFiles:
    """``/proc`` files of one process, kept open and re-read with ``pread``; other processes' files read by path.

    A readiness check reads a dozen small files, most of them the session's
    program's (a shell or REPL at its prompt); opening each costs three
    syscalls (10 us here), re-reading an open one costs one (2 us).  Only the
    files of the process given (:meth:`keep_files_of`) and of the few named
    with :meth:`keep_also` (the command in the foreground, looked at on every
    tick while it runs) are kept: a command's processes come and go.  An fd of ``/proc/PID/...`` stays bound to that
    process, so a read of a process that exited fails; then the path is opened afresh once, which
    reads whatever has that pid now - the same answer as reading by path.  (A process's memory is read
    by :func:`read_memory`, never through a kept file.)  At most ``limit``
    files per instance and :data:`PROC_FILES_BUDGET` in the whole process stay
    open (past those, files are read by path); :meth:`close` closes them all.
    """

    def __init__(self, pid: int, limit: int = 16) -> None:
        self.limit = limit
        self._fds: dict[str, int] = {}
        #: The directories whose files are kept: the program's first, then those named by keep_also.
        self._prefixes: tuple[str, ...] = ("",)
        self.keep_files_of(pid)

    def keep_files_of(self, pid: int) -> None:
        """Keep ``pid``'s files from now on (closing those of the process kept so far)."""
        self._keep((f"/proc/{pid}/", *self._prefixes[1:]))

    def keep_also(self, pids: list[int]) -> None:
        """Keep the files of ``pids`` too, at most :data:`KEPT_OTHERS` of them (closing those of the others
        kept so far)."""
        also = tuple(f"/proc/{pid}/" for pid in pids[:KEPT_OTHERS])
        if also != self._prefixes[1:]:
            self._keep((self._prefixes[0], *also))

    def _keep(self, prefixes: tuple[str, ...]) -> None:
        self._prefixes = prefixes
        for path in [p for p in self._fds if not p.startswith(prefixes)]:
            self._forget(path)

    def read(self, path: str) -> bytes | None:
        """The contents of a small ``/proc`` file, or ``None`` when it cannot be read."""
        fd = self._fds.get(path)
        if fd is not None:
            try:
                return os.pread(fd, 65536, 0)
            except OSError:
                self._forget(path)  # gone or reused: read by path once more
        return self._open_and_read(path, 65536, 0)

    def close(self) -> None:
        """Close every kept file; later reads go by path and keep nothing."""
        global _proc_files_open
        self.limit = 0
        for fd in self._fds.values():
            os.close(fd)
        _proc_files_open -= len(self._fds)
        self._fds.clear()

    def _open_and_read(self, path: str, size: int, offset: int) -> bytes | None:
        global _proc_files_open
        if not (path.startswith(self._prefixes) and len(self._fds) < self.limit
                and _proc_files_open < _proc_files_budget()):
            return read_proc(path, size, offset)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        self._fds[path] = fd
        _proc_files_open += 1
        try:
            return os.pread(fd, size, offset)
        except OSError:
            self._forget(path)
            return None

    def _forget(self, path: str) -> None:
        global _proc_files_open
        os.close(self._fds.pop(path))
        _proc_files_open -= 1


def process_table() -> dict[int, ProcessStat]:
    """Every process visible in ``/proc``, by pid."""
    table: dict[int, ProcessStat] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            stat = read_stat(int(name))
            if stat is not None:
                table[stat.pid] = stat
    return table


#: Whether the kernel lists each thread's children (``/proc/PID/task/TID/children``): then a tree is walked
#: down from its root instead of found in a scan of every process on the machine.
CHILDREN_LISTED = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def subtree_table(roots: Iterable[int]) -> dict[int, ProcessStat]:
    """``roots`` and every process below them, by pid, walked down their children lists: the cost of the tree,
    not of the machine (on a host running 2000 other processes, each scan of them all held the loop 35 ms, and
    a close made six).  Without children lists, one scan of all."""
    if not CHILDREN_LISTED:
        table = process_table()
        return {pid: table[pid] for pid in descendants(roots, table) if pid in table}
    found: dict[int, ProcessStat] = {}
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        stat = read_stat(pid)
        if stat is None:
            continue
        found[pid] = stat
        stack.extend(child for child in children_of(pid) if child not in found)
    return found


def descendants(roots: Iterable[int], table: dict[int, ProcessStat]) -> set[int]:
    """Pids of ``roots`` and everything below them in ``table``."""
    children: dict[int, list[int]] = {}
    for stat in table.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    found: set[int] = set()
    stack = [r for r in roots if r in table]
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, ()))
    return found


def carries_token(pid: int, token: bytes) -> bool:
    """Whether the process's environment holds ``DSH_TERMINAL_SESSION`` starting with ``token``."""
    env = read_proc(f"/proc/{pid}/environ")
    if env is None:
        return False
    needle = SESSION_TOKEN_ENV.encode() + b"=" + token
    return needle in env


def with_token(token: bytes, table: dict[int, ProcessStat], skip: set[int]) -> set[int]:
    """Pids in ``table`` (other than ``skip``) whose environment carries ``token``."""
    me = os.getpid()
    return {pid for pid in table if pid not in skip and pid != me and carries_token(pid, token)}


def is_alive(ident: ProcessId) -> bool:
    """True while the very process ``ident`` exists and is not a zombie."""
    stat = read_stat(ident.pid)
    return stat is not None and stat.start_time == ident.start_time and not stat.gone


async def until_reaped(idents: Iterable[ProcessId], seconds: float, poll: float = 0.001) -> None:
    """Wait (at most ``seconds``) until each of ``idents`` has ended and been reaped: gone from ``/proc``, not a
    zombie any more."""
    deadline = time.monotonic() + seconds
    waiting = list(idents)
    while waiting := [ident for ident in waiting
                      if (stat := read_stat(ident.pid)) is not None and stat.start_time == ident.start_time]:
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(poll)


def send_signal(ident: ProcessId, sig: int, refused: set[ProcessId] | None = None) -> bool:
    """Signal ``ident`` only if its pid still names the same process; one we may not signal (another user's)
    is added to ``refused``."""
    stat = read_stat(ident.pid)
    if stat is None or stat.start_time != ident.start_time:
        return False
    try:
        os.kill(ident.pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        if refused is not None:
            refused.add(ident)
        return False
    return True


_LIBC: "ctypes.CDLL | None" = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def make_leader_preexec(parent_pid: int):  # type: ignore[no-untyped-def]
    """A ``preexec_fn`` for the session leader: become a child subreaper, die with our process.

    Everything that can be decided before the fork is: the child, a copy of this whole process, pays a page
    fault for each page it writes, so it does as little Python as it can.  Handlers are reset by the exec
    itself; only signals this process ignores stay ignored across it, so those are set back - every one of
    them, as a terminal's program starts with none ignored (Python ignores SIGPIPE and SIGXFSZ, and a program
    that inherited SIGXFSZ ignored gets EFBIG past ``ulimit -f`` instead of being stopped).
    """
    prctl = _libc().prctl
    ignored = [sig for sig in signal.valid_signals()
               if sig not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(sig) == signal.SIG_IGN]

    def preexec() -> None:
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # parent died before prctl took effect
            os._exit(1)
        first_for_the_oom_killer()
        for sig in ignored:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        terminal_modes(0)

    return preexec


class LeaderCap(NamedTuple):
    """How a session leader caps the tasks (processes and threads) its session may run at once, right before
    its exec: it joins cgroups - a pids cgroup, the kernel's cpu cgroup - by their ``cgroup.procs`` files (all
    it starts stay there), and/or lowers its ``RLIMIT_NPROC`` (what every process of the user may then have,
    counted together; root ignores it).  See :mod:`.process_cap`."""

    procs_files: tuple[str, ...]
    nproc: int | None


def within_nproc_hard_limit(tasks: int) -> int:
    """``tasks``, or this process's hard ``RLIMIT_NPROC`` when that is lower: a leader cannot raise it (a user
    who is not root whose limit is below what a cap asked for got no session at all - ``not allowed to raise
    maximum limit``), and below it the user's own limit is the tighter cap."""
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    return tasks if hard == resource.RLIM_INFINITY else min(tasks, hard)


def join_cap(procs_files: Iterable[str], nproc: int | None) -> None:
    """In a leader, right before its exec: take the cap :class:`LeaderCap` describes.  Raises :class:`OSError`
    when a cgroup will not take it (the open then fails: a cap that was promised is never silently missing)."""
    for procs_file in procs_files:
        write_control(procs_file, str(os.getpid()).encode())
    if nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


#: The session's processes' ``oom_score_adj`` (inherited by all they start): the most, so that when memory runs
#: out the kernel's out-of-memory killer takes one of them before this process.
SESSION_OOM_SCORE_ADJ = b"1000"


def first_for_the_oom_killer() -> None:
    """Make this process (a session's, right before its exec) the first the out-of-memory killer takes.

    It takes the process with the most memory: a session that ran forty 20 MB processes in a 400 MB memory
    cgroup got the kernel killed (150 MB of notebook state), and with it every session.  Losing a session's
    process is never worse: the kernel's death ends them all.  Raising one's own score needs no privilege;
    a program may lower its own back (to 0 without ``CAP_SYS_RESOURCE``): this guards against accidents,
    not against a program that means it."""
    try:
        write_control("/proc/self/oom_score_adj", SESSION_OOM_SCORE_ADJ)
    except OSError:
        pass


def write_control(path: str, value: bytes) -> None:
    """Write ``value`` to a kernel control file (``/proc``, cgroups) in one ``write``; raises :class:`OSError`."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value)
    finally:
        os.close(fd)


#: ``termios.IUTF8`` (Python 3.13 names it; Linux's value).
IUTF8 = getattr(termios, "IUTF8", 0o40000)


def terminal_modes(fd: int) -> None:
    """Set terminal ``fd``'s input modes as our terminal's: XON/XOFF flow control off (``stty -ixon``) and
    UTF-8 input on (``stty iutf8``).

    Nobody reads a session's screen but us, and we read all of it, so a C-s could only stop its output - for
    good, with every later send timing out on silence; programs get C-s and C-q as keys (readline's forward
    search).  The terminal speaks UTF-8 (keys are sent, output read, as UTF-8), so the kernel's line editing
    must too, as under xterm or a terminal over ssh: without ``iutf8`` a Backspace in a line being read
    (``read``, ``cat``, a password prompt) erased one byte of an ``é``, and the program read the other."""
    try:
        attrs = termios.tcgetattr(fd)
        wanted = (attrs[0] & ~termios.IXON) | IUTF8
        if attrs[0] != wanted:
            attrs[0] = wanted
            termios.tcsetattr(fd, termios.TCSANOW, attrs)
    except termios.error:
        pass


#: Landlock's ABI (Linux 6.12) with scopes: a domain that may not connect to abstract Unix sockets made outside it.
LANDLOCK_SCOPED_ABI = 6
_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET = 1
_LANDLOCK_CREATE_RULESET_VERSION = 1
_SYS_LANDLOCK_CREATE_RULESET = {"x86_64": 444, "aarch64": 444}
_SYS_LANDLOCK_RESTRICT_SELF = {"x86_64": 446, "aarch64": 446}
_PR_SET_NO_NEW_PRIVS = 38


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (or on a machine whose system call numbers are not
    known here)."""
    number = _SYS_LANDLOCK_CREATE_RULESET.get(os.uname().machine)
    if number is None:
        return 0
    syscall = _libc().syscall
    syscall.restype = ctypes.c_long
    return max(0, syscall(ctypes.c_long(number), None, ctypes.c_size_t(0),
                          ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION)))


def enter_abstract_socket_scope() -> None:
    """Put this process - a session's leader, right before it execs ``bwrap`` - and all it starts in a Landlock
    domain scoped to its own abstract Unix sockets: a ``connect`` to one made outside it is refused.  Sets
    ``no_new_privs`` (a setuid ``bwrap`` would lose its rights: see :func:`.sandbox.abstract_socket_scope_works`).
    Raises :class:`OSError` when a step fails."""
    libc = _libc()
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    machine = os.uname().machine
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "could not set no_new_privs for the sandbox's socket scope")
    attr = struct.pack("QQQ", 0, 0, _LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET)  # (no file or network access handled)
    ruleset = syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET[machine]), ctypes.c_char_p(attr),
                      ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "could not make the sandbox's Landlock socket scope")
    try:
        if syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF[machine]), ctypes.c_int(ruleset), ctypes.c_uint32(0)):
            raise OSError(ctypes.get_errno(), "could not enter the sandbox's Landlock socket scope")
    finally:
        os.close(ruleset)


@dataclass
class TreeToEnd:
    """One session's tree being ended: its leader, its token, what was seen of it."""

    leader: ProcessId
    token: bytes
    leader_exited: bool
    #: Whether the tree lives in a pid namespace of its own whose init dies with the leader (bubblewrap's
    #: ``--die-with-parent``): once the leader is gone so is all of it, and no orphan is looked for by token.
    contained: bool
    members: set[ProcessId]
    #: Members this process may not signal (another user's: a command run with ``sudo``, a setuid program):
    #: nothing here can end them, and the close does not wait for them.
    beyond_reach: set[ProcessId]

    def __init__(self, leader: ProcessId, token: bytes, leader_exited: bool, contained: bool = False) -> None:
        self.leader = leader
        self.token = token
        self.leader_exited = leader_exited
        self.contained = contained
        self.members = set()
        self.beyond_reach = set()

    def signal(self, ident: ProcessId, sig: int) -> bool:
        """:func:`send_signal` to a member; one we may not signal is noted in :attr:`beyond_reach`."""
        return send_signal(ident, sig, self.beyond_reach)

    def out_of_reach_alive(self) -> list[int]:
        """Pids of the members beyond reach still running (after the close: what it left)."""
        return sorted(ident.pid for ident in self.beyond_reach if is_alive(ident))


async def discover(trees: list[TreeToEnd]) -> dict[int, ProcessStat]:
    """Refresh every tree's members; return the table they were found in.

    While its leader lives, a tree is walked down from its members: orphans stay under the leader, a
    subreaper.  Once a leader is gone its orphans may be anywhere, and what carries its token is looked
    for in a scan of every process - in a thread of its own: on a busy machine that scan (every process's
    environment read) is long, and the loop serves every other session meanwhile.  A contained tree has no
    orphans outside its namespace, which ends with its leader: it needs no scan (on a host running 2000
    other processes, the scan was 20 ms of a close's CPU, under the interpreter lock every send needs)."""
    tokens = [tree.token for tree in trees if tree.leader_exited and not tree.contained]
    carriers = await off_the_loop(_scan_for_tokens, tokens) if tokens else {}
    table = subtree_table(m.pid for tree in trees for m in tree.members | {tree.leader})
    for pid in set().union(*carriers.values()) - table.keys():
        stat = read_stat(pid)
        if stat is not None:
            table[pid] = stat
    for tree in trees:
        roots = [m.pid for m in tree.members | {tree.leader}
                 if m.pid in table and table[m.pid].start_time == m.start_time]
        pids = descendants(roots, table)
        if tree.leader_exited:
            pids |= carriers.get(tree.token, set()) & table.keys()  # (one that ended since the scan is not there)
        known = {m.pid: m for m in tree.members}
        for pid in pids:
            stat = table[pid]
            ident = stat.ident
            if pid in known and known[pid] != ident:
                tree.members.discard(known[pid])
            if pid == tree.leader.pid and ident != tree.leader:
                continue
            if not stat.gone:
                tree.members.add(ident)
    return table


def _scan_for_tokens(tokens: list[bytes]) -> dict[bytes, set[int]]:
    """For each token, the pids whose environment carries it (every process's environment read once).  Only the
    environments: on a host running 2000 other processes, reading every ``stat`` too made this scan twice as
    long (a close makes one), and what the trees need of ``stat`` is their own members' and the carriers'."""
    needles = {token: SESSION_TOKEN_ENV.encode() + b"=" + token for token in tokens}
    carriers: dict[bytes, set[int]] = {token: set() for token in tokens}
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return carriers
    for pid in (int(name) for name in names if name.isdigit()):
        env = read_proc(f"/proc/{pid}/environ") if pid != me else None
        if env:
            for token, needle in needles.items():
                if needle in env:
                    carriers[token].add(pid)
    return carriers


_T = TypeVar("_T")


async def off_the_loop(work: Callable[..., _T], *args: object, name: str = "dsh-terminal-scan") -> _T:
    """``work(*args)`` in a thread of its own, awaited (on the loop, which goes on meanwhile: a thread that never
    comes back - a hung mount - costs only itself); run here when no thread can start (interpreter exit).
    (Here, not in :mod:`.event_loop`: the watchdog imports this module as a script's, which imports nothing of
    the package.)"""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_T] = loop.create_future()

    def settle(outcome: _T | None, error: BaseException | None) -> None:
        if done.done():  # (given up on: cancelled, or its deadline passed)
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(outcome)  # type: ignore[arg-type]

    def run() -> None:
        try:
            outcome, error = work(*args), None
        except BaseException as exc:  # (handed to the awaiting loop)
            outcome, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, outcome, error)
        except RuntimeError:  # the loop closed meanwhile: nobody waits any more
            pass

    try:
        threading.Thread(target=run, name=name, daemon=True).start()
    except RuntimeError:
        return work(*args)
    return await done


def _living(tree: TreeToEnd, table: dict[int, ProcessStat], killed: bool = False) -> set[ProcessId]:
    """The tree's members still there (``killed``: after SIGKILL, when one held in the kernel ends too)."""
    if killed:
        return {ident for ident in tree.members - tree.beyond_reach if not _ended(ident, table.get(ident.pid))}
    return {ident for ident in tree.members
            if (stat := table.get(ident.pid)) is not None and stat.start_time == ident.start_time and not stat.gone}


def _ended(ident: ProcessId, stat: ProcessStat | None) -> bool:
    """Whether ``ident`` (``stat``: its ``/proc`` stat now) is over for a close: gone, or killed (or exiting)
    and still held in the kernel :data:`KILLED_BUT_HELD_SECONDS` later.  Such a process never runs code of its
    own again, and may be held for ever: a read from a FUSE server that stopped answering (a dead sshfs) holds
    it in uninterruptible sleep, and a pid namespace's init in its exit until that one is gone."""
    if stat is None or stat.start_time != ident.start_time or stat.gone:
        _held_since.pop(ident, None)
        return True
    if not _killed(stat):
        _held_since.pop(ident, None)
        return False
    now = time.monotonic()
    return now - _held_since.setdefault(ident, now) >= KILLED_BUT_HELD_SECONDS


def _killed(stat: ProcessStat) -> bool:
    """Whether the process is already exiting (``PF_EXITING``) or has a SIGKILL pending."""
    if stat.flags & PF_EXITING:
        return True
    status = read_proc(f"/proc/{stat.pid}/status")
    if status is None:
        return False
    try:
        pending = [int(line.split()[1], 16) for line in status.splitlines()
                   if line.startswith((b"SigPnd:", b"ShdPnd:"))]
    except (ValueError, IndexError):
        return False
    return any(mask & (1 << (signal.SIGKILL - 1)) for mask in pending)


async def end_trees(trees: list[TreeToEnd], grace: float, poll: float = 0.005) -> dict[ProcessId, bool]:
    """End every process of every tree; return only when none of them remains - but those this process may
    not signal (:attr:`TreeToEnd.beyond_reach`), which nothing here can end.

    1. Polite: SIGTERM, SIGHUP and SIGCONT to every member except the leader
       (which stays alive as the subreaper that keeps orphans in the tree),
       then wait up to ``grace`` seconds for them to go.
    2. Freeze: SIGSTOP every member, leader included, each the moment it is
       found by following children from the members (a fork chain cannot
       outrun that), then rescanning ``/proc`` until nothing new turns up.
    3. SIGKILL every member but the leaders, which stay (stopped) to adopt the
       orphans of what dies; follow them again and kill what turned up (a
       fork under way at the freeze) until none is left; let the leaders reap
       what died under them (:func:`_leaders_reap`); then kill the leaders,
       and stragglers found by token, until a scan finds none.

    Returns ``{member: killed_by_sigkill}`` for reporting.
    """
    table = await discover(trees)
    others = [m for t in trees for m in _living(t, table) if m != t.leader]
    forced: dict[ProcessId, bool] = {}
    if others:
        deadline = time.monotonic() + grace
        signalled: set[ProcessId] = set()
        while True:
            pending = [(t, m) for t in trees for m in _living(t, table) if m != t.leader and m not in t.beyond_reach]
            for tree, member in pending:
                if member not in signalled:
                    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCONT):
                        tree.signal(member, sig)
                    signalled.add(member)
            if not pending or time.monotonic() >= deadline:
                break
            await asyncio.sleep(poll)
            table = await discover(trees)
    stopped: set[ProcessId] = set()
    await _freeze_all(trees, stopped)
    for _ in range(100):
        for tree in trees:
            for member in tree.members - {tree.leader}:
                forced[member] = tree.signal(member, signal.SIGKILL)
        await _wait_all_gone(trees, poll, but=True)
        if not await _freeze_all(trees, stopped):
            break
    await _leaders_reap(trees, poll)
    for _ in range(100):
        for tree in trees:
            for member in tree.members:
                forced[member] = tree.signal(member, signal.SIGKILL)
        await _wait_all_gone(trees, poll)
        # A child whose fork was under way at the freeze appears only now, orphaned: with the leaders
        # gone, look for stragglers by token too, until a scan finds none.
        for tree in trees:
            tree.leader_exited = True
        table = await discover(trees)
        if not any(_living(t, table, killed=True) for t in trees):
            break
        await _freeze_all(trees, stopped)
    return forced


async def _leaders_reap(trees: list[TreeToEnd], poll: float) -> None:
    """Continue each leader that holds dead children, and give it up to :data:`REAP_GRACE` to reap them (a
    shell does at once).  A leader killed first passed them to pid 1 as zombies, which an init that does not
    reap - in a container often the notebook server itself - keeps for ever.  What a leader starts meanwhile
    is found and ended by the rounds that follow."""
    waiting = [tree.leader for tree in trees if is_alive(tree.leader) and _dead_children(tree.leader.pid)]
    for leader in waiting:
        send_signal(leader, signal.SIGCONT)
    deadline = time.monotonic() + REAP_GRACE
    while waiting and time.monotonic() < deadline:
        await asyncio.sleep(poll)
        waiting = [leader for leader in waiting if is_alive(leader) and _dead_children(leader.pid)]


def _dead_children(pid: int) -> bool:
    """Whether ``pid`` has a child that has ended and waits to be reaped."""
    return any((stat := read_stat(child)) is not None and stat.state == "Z" for child in children_of(pid))


async def _freeze_all(trees: list[TreeToEnd], stopped: set[ProcessId]) -> bool:
    """SIGSTOP every member not ``stopped`` yet, and what they started, until a round finds nothing new;
    True when anything was."""
    found = False
    for _ in range(1000):
        fresh = [ident for tree in trees for ident in _stop_below(tree, stopped)]
        table = await discover(trees)  # (what a walk down from the members cannot reach: adopted elsewhere)
        for tree in trees:
            for ident in _living(tree, table) - stopped:
                tree.signal(ident, signal.SIGSTOP)
                stopped.add(ident)
                fresh.append(ident)
        if not fresh:
            return found
        found = True
        await asyncio.sleep(0)
    return found


def _stop_below(tree: TreeToEnd, stopped: set[ProcessId]) -> list[ProcessId]:
    """SIGSTOP the tree's members and every process under them, each as soon as it is found (its children
    are read after it is stopped, so a process that forks is caught at its next child); returns the ones
    stopped now, all added to the tree's members."""
    fresh = []
    stack = list(tree.members | {tree.leader})
    seen: set[ProcessId] = set()
    while stack:
        ident = stack.pop()
        if ident in seen:
            continue
        seen.add(ident)
        if ident not in stopped:
            if not tree.signal(ident, signal.SIGSTOP) and ident not in tree.beyond_reach:
                continue  # (gone, or its pid names another process now; one beyond reach may have ours below)
            stopped.add(ident)
            tree.members.add(ident)
            fresh.append(ident)
        for pid in children_of(ident.pid):
            stat = read_stat(pid)
            if stat is not None and not stat.gone and stat.ppid == ident.pid:
                stack.append(stat.ident)
    return fresh


def children_of(pid: int) -> list[int]:
    """Pids of ``pid``'s children, from every thread's ``children`` list (empty when it cannot be read)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        listed = read_proc(f"/proc/{pid}/task/{tid}/children")
        if listed:
            out.extend(int(child) for child in listed.split())
    return out


async def _wait_all_gone(trees: list[TreeToEnd], poll: float, but: bool = False) -> None:
    """Wait until every member is gone (``but``: every member but the leader), killing them again meanwhile;
    those beyond reach are not waited for."""
    for tree in trees:
        while True:
            left = [m for m in tree.members - tree.beyond_reach
                    if not _ended(m, read_stat(m.pid)) and not (but and m == tree.leader)]
            if not left:
                break
            for member in left:
                tree.signal(member, signal.SIGKILL)
            await asyncio.sleep(poll)
