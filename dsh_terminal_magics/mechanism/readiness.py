"""Is the program waiting for me?  Observed from ``/proc``, not guessed.

A program wants input when a thread of the terminal's foreground process
group is blocked reading *this* terminal: in ``read``/``readv`` on the tty fd,
or in ``select``/``poll``/``epoll`` with the tty among the fds it waits to
read.  Three fences keep this from firing early (see FIELD-NOTES):

* **fresh evidence** - a thread's wait counts only if its scheduler stats
  changed since just before our write (or it is a new thread): a wait that
  was already in progress before the write says nothing about our input;
* **input consumed** - the tty's unread input (``TIOCINQ``) must be zero,
  counted after input still in transit was handed to the line discipline
  (see :meth:`ReadinessProbe.unread_input`);
* **atomic sample** - ``/proc`` reads are not atomic, so the scheduler stats
  are read before and after the other reads and a moved sample is discarded.

Short waits (timeout under :data:`SHORT_WAIT`) are housekeeping timers, not
prompts.  Anything unreadable is a miss, never a hit.

**Relays.**  ``script``, ``sudo`` (``use_pty``), ``pty.spawn`` and ``expect``
run the command on a terminal of their own and copy between the two: they
wait on our tty *and* on that terminal's master all the time, whatever the
command does.  A thread waiting on both is looked through: the answer is the
inner terminal's - the same rules applied to its foreground group and its
pts, found from the processes under the relay (their controlling terminal and
its foreground group, from ``stat``), relays inside relays included.

**Readers outside the group.**  A program may ask through a helper that is
not in the foreground group at all: ``gpg`` waits on its agent's socket while
``pinentry-curses``, started by the agent (a daemon in a session of its own),
opens the terminal by its name and reads the passphrase.  When every thread of
the group is asleep and none reads the tty, the processes the session started
are looked at too (the program's root's descendants: orphans stay in that
tree, adopted by the session's subreaper or its namespace's init); a fresh
read wait on this tty among them is the answer, fenced like the group's.
"""
from __future__ import annotations

import fcntl
import math
import os
import platform
import select
import socket
import struct
import termios
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping

from .process_tree import (HAVE_PROC, ProcFiles, ProcessStat, guarded_reads, process_table, read_link, read_memory,
                           read_proc, stat_of, stat_path)

#: Waits with a timeout shorter than this (seconds) are timers, not prompts.
SHORT_WAIT = 0.05

_SYSCALLS = {
    "x86_64": {0: "read", 19: "readv", 7: "poll", 271: "ppoll", 23: "select", 270: "pselect6",
               232: "epoll_wait", 281: "epoll_pwait", 441: "epoll_pwait2"},
    "aarch64": {63: "read", 65: "readv", 73: "ppoll", 72: "pselect6", 22: "epoll_pwait",
                441: "epoll_pwait2"},
}.get(platform.machine(), {})

#: Receives from a socket (``recvfrom``, ``recvmsg``, ``recvmmsg``): reads of what another process sends.
_RECEIVES = {"x86_64": {45, 47, 299}, "aarch64": {207, 212, 243}}.get(platform.machine(), set())
#: Waits for a child process to end: a member in one runs a command (see :meth:`ReadinessProbe._runs_a_command`).
_CHILD_WAITS = {"x86_64": {61, 247}, "aarch64": {260, 95}}.get(platform.machine(), set())
_POLLIN = 0x1
_EPOLLIN = 0x1
#: Timed waits whose end can be read from the syscall's arguments: name -> (index of the timeout argument,
#: its kind: "ms" an int of milliseconds, "ts" a timespec, "tv" a timeval; a negative int or a null
#: pointer is no timeout).  nanosleep(req, rem), clock_nanosleep(clock, flags, req, rem) and futex(addr, op,
#: val, timeout) are read with their clocks and flags.
_TIMED = {
    "x86_64": {35: "nanosleep", 230: "clock_nanosleep", 202: "futex", 7: "poll", 271: "ppoll", 23: "select",
               270: "pselect6", 232: "epoll_wait", 281: "epoll_pwait", 441: "epoll_pwait2"},
    "aarch64": {101: "nanosleep", 115: "clock_nanosleep", 98: "futex", 73: "ppoll", 72: "pselect6",
                22: "epoll_pwait", 441: "epoll_pwait2"},
}.get(platform.machine(), {})
_TIMEOUT_ARG = {"poll": (2, "ms"), "ppoll": (2, "ts"), "select": (4, "tv"), "pselect6": (4, "ts"),
                "epoll_wait": (3, "ms"), "epoll_pwait": (3, "ms"), "epoll_pwait2": (3, "ts")}
_CLOCK_REALTIME, _CLOCK_MONOTONIC, _TIMER_ABSTIME = 0, 1, 1
_FUTEX_WAIT, _FUTEX_WAIT_BITSET, _FUTEX_CMD_MASK, _FUTEX_CLOCK_REALTIME = 0, 9, 0x7F, 0x100
#: The clock ticks a second of ``/proc/PID/stat``'s start time counts.
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: Sleeps shorter than this (seconds, from when first seen) are left to the tick.
MIN_WATCHED_SLEEP = 0.05
#: A thread's entry in a check's sample when the look did not find it settled: equal to no read.
_UNSETTLED = b""
#: A PTY master as ``/proc/PID/fd`` links show it: waiting on one and on our tty makes a thread a relay.
_PTY_MASTERS = ("/dev/ptmx", "/dev/pts/ptmx")
#: Parents followed up from a reader of the tty, looking for the unseen processes of its group it runs under.
MAX_PARENTS_FOLLOWED = 16
#: Relays inside relays followed (``sudo`` inside ``script``), and processes looked at under one relay.
MAX_RELAY_DEPTH = 3
MAX_RELAY_PROCESSES = 256
#: Most threads a check looks at in one group (and in one process outside it).  What a session runs is
#: untrusted: a program with 2000 sleeping threads made every check 0.3 s of the loop.  A bigger group is
#: never found waiting (the send ends on its idle window or timeout).
MAX_THREADS_LOOKED = 256
#: Most processes a walk (of the group, or of the processes under one) looks at, and most ``children`` files
#: it reads: a shell with 1000 background jobs, or a job of 1000 processes, made every check a walk of them
#: (44% of a core).  A group whose walk stops there is not looked into either.
MAX_WALK_LOOKS = 1024
#: Most threads looked at, in all, to tell whether a helper a program talks to (and what the helper started) is
#: at rest (see :meth:`ReadinessProbe._helper_idle`): one look per check while the program waits.
MAX_HELPER_LOOKS = 64
#: Most descriptors of one wait looked at (``select``'s lowest, ``poll``'s and ``epoll``'s first): each is a
#: ``readlink``, and a program polling 10,000 pipes made each check 90 ms of the loop.  A terminal is nearly
#: always among the lowest descriptors.
MAX_FDS_LOOKED = 1024
#: Most often the processes outside the foreground group are looked at (seconds between looks): each look
#: walks the session's tree, and what the session started is untrusted (200 daemons made every look 20 ms).
OUTSIDE_GAP = 0.1
#: Searches for processes anywhere holding a terminal open (a tmux server started before the session, which
#: ``tmux attach`` handed the terminal to) read every fd link in ``/proc`` (3 ms for 300 here; tens of
#: thousands on a busy host), in a thread of their own: one search serves every session, at most every this
#: many seconds, and at most :data:`HOLDER_SEARCH_SHARE` of the time.
HOLDER_SEARCH_GAP = 0.5
HOLDER_SEARCH_SHARE = 0.02
#: Most threads outside the group waiting on the tty that one walk looks into (each may be a relay, whose
#: own walk can take :data:`MAX_WALK_LOOKS`).
MAX_OUTSIDE_READERS = 8
#: Most bytes of a ``/proc/PID/net`` socket table read (about 1700 sockets): a socket past them is not known
#: to be connected over the network.
MAX_SOCKET_TABLE = 256 * 1024
#: Netlink socket diagnostics: the protocol, the request, what a Unix socket's answer is to show (its peer, its
#: queues), and the attributes that hold them.
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _UDIAG_SHOW_PEER, _UDIAG_SHOW_RQLEN = 4, 20, 4, 0x10
_UNIX_DIAG_PEER, _UNIX_DIAG_RQLEN = 2, 4
#: Socket states in those tables: connected; still connecting (looked up again at the next wait).
_CONNECTED = b"01"
_CONNECTING = (b"02", b"03")
#: A socket's other end is not in the group looked at.
_AWAY = -1
#: A Unix socket's other end is held by a helper the waiting process started outside the group (see
#: :meth:`ReadinessProbe._helper_idle`).
_HELPER = -2
#: The device numbers of Unix98 pty slaves: majors 136-143.
_PTS_MAJORS = range(136, 144)


@dataclass(frozen=True)
class _Terminal:
    """A terminal as a check matches it: its path as ``/proc/PID/fd`` links show it, its device number as
    ``tty_nr`` in ``/proc/PID/stat`` shows a controlling terminal (for ``/dev/tty``), and, when the session has
    a /dev of its own (None otherwise), the mount id and inode number of our open pts (see
    :func:`_fd_identity`): a sandbox's private ``/dev`` shows it as ``/dev/console`` (``ttyname`` there, so
    ``GPG_TTY``; a bind mount: the same inode on a mount of its own), and a pts of the sandbox's own devpts
    may share its path and number but not its mount."""

    path: str
    rdev: int | None
    node: tuple[int, int | None] | None = None


@dataclass
class Fence:
    """Scheduler stats of the foreground group's threads taken just before a write."""

    schedstat: dict[tuple[int, int], bytes] = field(default_factory=dict)
    accept_stale: bool = False
    #: The foreground group they belong to (0: none known).
    pgid: int = 0


@dataclass(slots=True)
class _Look:
    """What looks at one thread's wait saw: its state (``key``: the syscall line and scheduler stats), when
    first seen in it (``since``), when last looked at (``last``), and when last looked at before, in another
    state (``before``; None: never)."""

    key: tuple[str, bytes | None]
    since: float
    before: float | None
    last: float = 0.0


class ReadinessProbe:
    """Answers "is the foreground program blocked reading this tty?" for one session."""

    def __init__(self, master_fd: int, slave_fd: int, tty_path: str, leader_pid: int,
                 private_dev: bool = False) -> None:
        """``private_dev``: the session has a /dev of its own (a sandbox), where our terminal has another name
        and a pts of its own devpts may share our pts's path: then a wait is matched by the open file's mount
        and inode, not the path (one ``fdinfo`` read more per look; elsewhere the path is unique).  ``slave_fd``
        is -1 (and ``tty_path`` empty) when the program was gone before its terminal could be opened: nothing is
        observed then."""
        self.master_fd = master_fd
        self.slave_fd = slave_fd
        #: A poll of the slave: polling a tty hands it the input still in transit (see :meth:`unread_input`).
        self._transit = select.poll()
        if slave_fd >= 0:
            self._transit.register(slave_fd, select.POLLIN)
        self.tty_path = tty_path
        #: The program the session runs (the shell, a REPL): found under a wrapper once it started.
        self._leader_pid = leader_pid
        #: Processes of a wrapper around the program (bubblewrap) that only wait for it: never members.
        self.wrappers: frozenset[int] = frozenset()
        #: The processes the last check found freshly waiting on the tty, and the ``syscall`` line of each (None
        #: when it may not be read; see :meth:`read_call`).
        self.tty_readers: list[int] = []
        self._tty_read_lines: dict[int, str | None] = {}
        #: What the current check found the threads of the group doing when not reading the tty: their
        #: ``syscall`` lines ("stopped": stopped), and the processes with a thread waiting on the tty.
        self._other_waits: dict[tuple[int, int], str] = {}
        self._tty_waiters: set[int] = set()
        #: Processes with a thread asleep whose wait the check may not read (see :meth:`_asks_for_a_secret`).
        self._unseen: set[int] = set()
        #: Whether the last check found the program itself stopped by a signal (``T``: C-z, ``SIGSTOP``; not a
        #: tracer's stop) - with nothing above it in the session to continue it (see :meth:`Session.wake_program`).
        self.program_stopped = False
        #: Whether the last check found a thread that does not read the tty run since the fence: what a reader
        #: took may have been handed on to it (Textual's input thread passes keys to the app's main thread).
        self.handed_on = False
        #: The longest of those threads' timed waits shorter than :data:`SHORT_WAIT` (seconds left; 0: none): a
        #: timer set since the write, due within milliseconds (fzf draws its list after one).
        self.timer_due = 0.0
        #: Thread ids per pid, read once per check (a walk and the verdict both need them).
        self._tasks: dict[int, list[int]] = {}
        #: Children per member, read by the walk (the verdict checks that none were added since).
        self._kids: dict[int, list[int]] = {}
        #: /proc files read by checks; the program's are kept open (a check re-reads the same dozen files).
        self._files = ProcFiles(leader_pid)
        self.available = HAVE_PROC and bool(_SYSCALLS) and slave_fd >= 0
        try:
            #: The pts's device number, as ``tty_nr`` in ``/proc/PID/stat`` shows a controlling terminal.
            self.tty_rdev: int | None = os.stat(tty_path).st_rdev if tty_path else None
        except OSError:
            self.tty_rdev = None
        #: The terminal the check is looking at: ours, or the inner one of a relay (see the module docstring).
        self._terminal = _Terminal(tty_path, self.tty_rdev,
                                   _fd_identity(read_proc(f"/proc/self/fdinfo/{slave_fd}"))
                                   if private_dev and slave_fd >= 0 else None)
        self._relay_depth = 0
        #: PTY masters among the fds of the wait just read; processes found under relays by this check.
        self._masters: list[int] = []
        #: Socket inodes among the fds of the wait just read, and what is at the other end of sockets seen: a
        #: process of the group looked at, :data:`_AWAY` (another host, or a process outside), or None.
        self._sockets: list[int] = []
        self._peers: dict[int, int | None] = {}
        #: For sockets to a :data:`_HELPER`: the helper's pid and the inode of its end.
        self._helpers: dict[int, tuple[int, int]] = {}
        #: The processes of the group being looked at (the foreground group, or one behind a relay).
        self._looked_at: list[int] = []
        self._relayed: list[int] = []
        #: The process the session started (a wrapper, or the program): everything the session runs is under
        #: it.  Readers of our tty found under it outside the foreground group by the last check.
        self._root_pid = leader_pid
        self._outside: list[int] = []
        #: When the processes outside the group were last looked at, and whether another look is owed: the
        #: last one found one of them on a CPU, was put off (too soon), or output came since.
        self._outside_at = -math.inf
        self._outside_owed = False
        #: Whether the last check found every thread of the group asleep, none reading the tty.
        self._group_idle = False
        #: Whether the last walk of the group stopped at :data:`MAX_WALK_LOOKS`, and whether the last check
        #: found the group too big to look into (that, or more than :data:`MAX_THREADS_LOOKED` threads).
        self._walk_cut = False
        self._too_big = False
        #: The readers the last walk found (a look too soon for another walk looks at them again).
        self._outside_found: list[int] = []
        #: Processes outside the group found reading our tty since they started (a prompter in a session of its
        #: own: ``su -c``'s command, ``pinentry``): what they wait for next is watched like the group's own
        #: threads' waits (see :meth:`sleep_ends`), at most :data:`MAX_OUTSIDE_READERS` of them.
        self._prompters: list[int] = []
        #: Whether the last "waiting" verdict was seen through a relay (its output may still be in transit).
        self.through_relay = False
        #: Whether it was a relay's own wait, one that kept our input (see :meth:`_relayed_state`).
        self.kept_by_relay = False
        self._timeout = 0.0
        self._group_cache: tuple[int, list[int]] | None = None
        #: The foreground group and the scheduler stats of every thread the last check looked at.
        self._last_sample: tuple[int, dict[tuple[int, int], bytes]] | None = None
        #: The last sample whose verdict was "waiting": it looked at every thread of the group.
        self._ready_sample: tuple[int, dict[tuple[int, int], bytes]] | None = None
        #: What the last looks at watched threads' waits saw: (pid, tid) -> :class:`_Look`.
        self._looks: dict[tuple[int, int], _Look] = {}
        #: The last :meth:`sleep_ends` answer and the check it was read after (nothing ran since: reuse it).
        self._sleep_answer: tuple[object, float | None] | None = None
        #: The group leader's stat as the current check first read it: (pgid, stat).
        self._leader_stat: tuple[int, ProcessStat] | None = None
        #: The thread the last check found on a CPU (or that ran during its sample), if any.
        self.running_thread: tuple[int, int] | None = None

    # -- public ------------------------------------------------------------
    @property
    def leader_pid(self) -> int:
        """The program the session runs (the shell, a REPL); set when it is found under a wrapper."""
        return self._leader_pid

    @leader_pid.setter
    def leader_pid(self, pid: int) -> None:
        self._leader_pid = pid
        self._files.keep_files_of(pid)

    def close(self) -> None:
        """Close the /proc files kept open (the session is gone)."""
        self._files.close()

    def foreground_pgid(self) -> int:
        """The tty's foreground process group, or 0 when not known yet."""
        try:
            return max(0, os.tcgetpgrp(self.master_fd))
        except OSError:
            return 0

    def reads_lines(self) -> bool:
        """True while the tty is in canonical mode: programs read whole lines, none has taken the keys
        (a full-screen program, a line editor at its prompt).  True when not known."""
        modes = self._modes()
        return modes is None or bool(modes[3] & termios.ICANON)

    def echoes(self) -> bool:
        """True while the terminal echoes what is typed (a password prompt turns that off).  True when not
        known."""
        modes = self._modes()
        return modes is None or bool(modes[3] & termios.ECHO)

    def _modes(self) -> list[Any] | None:
        """The terminal's modes (``termios.tcgetattr``'s list), or None when they cannot be read."""
        try:
            return termios.tcgetattr(self.master_fd)
        except (OSError, termios.error):
            return None

    def fence(self, accept_stale: bool = False) -> Fence:
        """Snapshot taken right before writing input.

        When nothing the last ready verdict looked at has run since, its sample is the snapshot (one small
        read per thread instead of a walk of the group): a send after a prompt costs no walk.
        """
        fence = Fence(accept_stale=accept_stale)
        pgid = self.foreground_pgid()
        if not self.available or pgid <= 0:
            return fence
        fence.pgid = pgid
        ready = self._ready_sample
        if ready is not None and ready[0] == pgid and self._none_ran_since(ready[1]):
            fence.schedstat = dict(ready[1])
            return fence
        self._tasks = {}
        # (behind a relay, its command's threads too; and readers of the tty outside the group)
        pids = [*self.group_members(pgid), *self._relayed, *self._outside]
        if self._too_big_to_look_into(pids):
            return fence  # (no check will find them waiting)
        for pid in pids:
            for tid in self._threads(pid):
                stat = self._schedstat(pid, tid)
                if stat is not None:
                    fence.schedstat[(pid, tid)] = stat
        return fence

    def fence_past_answer(self, fence: Fence) -> Fence:
        """``fence`` moved past an answer to a terminal query written now: the foreground group's threads
        must run after it for their wait to count, while a program the group relays (a tmux pane's shell)
        keeps the fence it had - the answer was not its input."""
        moved = self.fence(accept_stale=fence.accept_stale)
        members = set(self.members_seen(moved.pgid)) if moved.pgid > 0 else set()
        moved.schedstat = {**{key: stat for key, stat in moved.schedstat.items() if key[0] in members},
                           **{key: stat for key, stat in fence.schedstat.items() if key[0] not in members}}
        return moved

    @staticmethod
    def cpu_seconds(sample: object) -> float:
        """The CPU time the threads of a :meth:`waiting_sample` had used when it was taken (seconds)."""
        if not isinstance(sample, tuple):
            return 0.0
        total = 0
        for stat in sample[1].values():
            run = stat.split(maxsplit=1)[:1] if isinstance(stat, bytes) else []
            total += int(run[0]) if run and run[0].isdigit() else 0
        return total / 1e9

    def waiting_sample(self) -> object:
        """What the last "waiting" verdict saw of the group (its threads' scheduler stats): equal for two
        verdicts only if no thread it looked at ran between them."""
        return self._ready_sample

    def unread_input(self) -> int:
        """Bytes written to the tty that no program has read yet (complete lines in canonical mode): zero
        only when there are none, input in transit included (see :meth:`deliver_input_in_transit`; once
        some is there, what is still in transit may not be counted yet)."""
        self.deliver_input_in_transit()
        return self._unread_now()

    def _unread_now(self) -> int:
        """:meth:`unread_input` without handing over input in transit (a check did that as it began)."""
        if self.slave_fd < 0:
            return -1
        try:
            buf = fcntl.ioctl(self.slave_fd, termios.TIOCINQ, b"\0\0\0\0")
        except OSError:
            return -1
        return int(struct.unpack("i", buf)[0])

    def deliver_input_in_transit(self) -> None:
        """Hand the line discipline the input written to the master that it has not received yet.

        A write to a PTY master only queues the bytes: a kernel worker moves them to the terminal's input
        later, and until then ``TIOCINQ`` counts none of them (right after a write, almost always) and a
        reader is not woken.  A reader that blocked in that gap - the shell reaching its prompt after an
        interrupted command, as our next command was being written - looked like a fresh wait with all input
        read: the send ended at once with the interrupted command's exit code.  Polling the slave makes the
        kernel finish that work first (``n_tty_poll``); a reader it wakes is then seen running."""
        try:
            self._transit.poll(0)
        except OSError:
            pass

    def waiting_for_input(self, fence: Fence) -> float | None:
        """The timeout of the foreground group's fresh wait on this tty (``math.inf``: none), or None.

        None means the program is not observed waiting for input.  Every
        member of the foreground group counts (``git`` waits in ``wait4``
        while its child ``vim`` reads), on any fd that is this terminal (the
        pts itself, or ``/dev/tty`` opened by a process whose controlling
        terminal is this pts: password prompts).  A finite timeout is a timed
        wait: a prompt that polls (IPython), or a program that will go on by
        itself when it expires (vim after Esc); the caller decides.
        """
        if not self.available:
            return None
        pgid = self.foreground_pgid()
        if pgid <= 0:
            return None
        self.deliver_input_in_transit()  # (before the look: a reader our input wakes must be seen awake)
        return self._check(pgid, fence, count_from_leader=True)

    def _check(self, pgid: int, fence: Fence, count_from_leader: bool) -> float | None:
        """:meth:`waiting_for_input` for group ``pgid`` (``count_from_leader``: a leader's stat that says it
        has one thread is taken at its word, instead of listing its threads)."""
        self._timeout = 0.0
        self.running_thread = None
        self._tasks = {}
        self._kids = {}
        self._leader_stat = None
        self._relayed = []
        self._outside = []
        self.tty_readers, self._tty_read_lines = [], {}
        self._other_waits, self._tty_waiters, self._unseen = {}, set(), set()
        self.program_stopped = False
        self.handed_on = False
        self.timer_due = 0.0
        self._too_big = False
        self.through_relay = self.kept_by_relay = False
        if pgid not in self.wrappers:  # the group's leader on a CPU answers "no" without a walk
            leader = self._stat(pgid, pgid)
            if leader is not None and leader.state in "RD":
                self.running_thread = (pgid, pgid)
                self._last_sample = (pgid, {})
                return None
            if count_from_leader and leader is not None and leader.threads == 1:
                self._tasks[pgid] = [pgid]  # its only thread: no need to list them
            self._leader_stat = (pgid, leader) if leader is not None else None
        members = self.group_members(pgid)
        self._last_sample = (pgid, {})
        state = self._group_state(members, fence) if members else None
        if state != "tty" and self.leader_pid not in members:
            self.program_stopped = self.program_stopped or self._program_stopped_by_another(members)
        self._group_idle = state == "idle"
        if state == "idle":
            state = self._outside_reader(members, fence)
        # Input still unread is the program's to read first.  (Asked last: a look that found a thread asleep
        # on the tty, with no run across it, saw no input left then - it would have woken the reader.)
        if state != "tty":
            return None
        if not self._members_unchanged(pgid, members):  # (threads or processes started meanwhile may run)
            if count_from_leader:
                return self._check(pgid, fence, count_from_leader=False)
            self._last_sample = (pgid, {})  # (changed again: the next look is a full check)
            return None
        if not self._others_still_asleep():
            self._last_sample = (pgid, {})
            return None
        if self._unread_now() == 0:  # (input in transit was handed over as the check began; only we write)
            self._ready_sample = self._last_sample
            return self._timeout
        return None

    def _program_stopped_by_another(self, members: list[int]) -> bool:
        """Whether the session's program (our shell) is stopped while nothing of the terminal's foreground group
        is left but zombies the stopped shell cannot reap: a command that stopped its parent shell and ended
        (``kill(getppid(), SIGSTOP)``) left the session with nobody to read its terminal, for good - a shell that
        stops itself (``kill -STOP $$``) is woken alike."""
        leader = self._stat(self.leader_pid)
        if leader is None or leader.gone or leader.state != "T":
            return False
        stats = [self._stat(pid) for pid in members]
        return all(stat is None or stat.gone for stat in stats)

    def _others_still_asleep(self) -> bool:
        """Whether the threads this check found waiting on something else still wait as they were seen.  They
        were looked at one by one, before the reader: the reader may have woken one since, handing it what it
        just read (a worker taking the line from a queue) - it is runnable, or has run, and works on our input
        (the send ended as the line's echo came back, before the work's output and prompt)."""
        sample = self._last_sample[1] if self._last_sample is not None else {}
        others = {key: sample.get(key, _UNSETTLED) for key in self._other_waits}
        return not others or (self._none_ran_since(others) and not any(self._runnable(*key) for key in others))

    def _members_unchanged(self, pgid: int, members: list[int]) -> bool:
        """Whether the members of group ``pgid`` are still in it, with the threads and children this check
        listed before it looked at them.  A member found reading the tty may have started threads or processes
        between the listing and the look (a program that starts workers and then asks); those were not looked
        at.  Or it left the group meanwhile (``su -c``'s prompter calling ``setsid``, then reading): looked at as
        a member, it was not known as a reader outside the group, whose pause after our answer is waited for.  (The
        group's leader is listed unlooked, see :meth:`_walk_group`: one that moved to another group of the session
        is no reader outside it.)"""
        for pid in members:
            stat = self._stat(pid)
            if stat is None or stat.gone:
                continue  # (it ended: nothing of it runs)
            if (stat.pgrp != pgid and pid != pgid) or stat.threads != len(self._threads(pid)):
                return False
            if pid in self._kids and not set(self._children(pid)) <= set(self._kids[pid]):
                return False
        return True

    def unchanged_since_last_check(self) -> bool:
        """Whether no thread the last check looked at has run since (one small read per thread).

        Then that check's answer still stands - unless a process joined the group without any member
        running, which is why callers still check in full now and then.
        """
        last = self._last_sample
        if self._too_big:
            return True  # (the group is too big to look into: a full look now and then is enough)
        if self._group_idle and self._outside_owed and time.monotonic() - self._outside_at >= OUTSIDE_GAP:
            return False  # (a look outside the idle group is owed and due: it comes with a full check)
        return last is not None and self._group_unchanged(*last)

    def output_arrived(self) -> None:
        """The session read output: if it came from outside the group (a helper's prompt), a look there is
        owed even though no thread of the group ran."""
        self._outside_owed = True

    def nothing_ran_since(self, fence: Fence) -> bool:
        """Whether no thread of ``fence``'s sample has run since it was taken and its group still has the
        terminal: input written after it is still unread, so no wait can be fresh yet.  (A process of
        another group can take the terminal without any of them running: one that ignores ``SIGTTOU``.)"""
        return self._group_unchanged(fence.pgid, fence.schedstat)

    def _group_unchanged(self, pgid: int, sample: dict[tuple[int, int], bytes]) -> bool:
        """Whether group ``pgid`` still has the terminal and no thread of ``sample`` has run since."""
        return pgid > 0 and bool(sample) and self.foreground_pgid() == pgid and self._none_ran_since(sample)

    def _none_ran_since(self, sample: dict[tuple[int, int], bytes]) -> bool:
        """Whether a non-empty sample's threads all still show the scheduler stats it recorded."""
        return bool(sample) and all(self._schedstat(pid, tid) == stat for (pid, tid), stat in sample.items())

    def still_running(self) -> bool:
        """Whether the thread the last check found running is still not blocked (one small read).

        Then that check's "not waiting" still stands: a running thread of the group means nobody waits.  A
        program that computes and then reads gives no event when it blocks; this is what makes it cheap to
        look often while it computes.
        """
        return self.running_thread is not None and self._runnable(*self.running_thread)

    def _runnable(self, pid: int, tid: int) -> bool:
        """Whether the thread is running or waiting for a CPU (or in an uninterruptible wait): not blocked (a
        stopped one, T, is not: ^Z, SIGSTOP)."""
        stat = self._stat(pid, tid)
        return stat is not None and stat.state in "RD"

    def waits_on_time_elsewhere(self, pids: Collection[int] | None = None) -> bool:
        """Whether a thread the last check found waiting on something other than our terminal (of one of
        ``pids``, if given) is in a timed wait (a sleep, a futex or poll with a timeout): when it ends, the
        program may go on by itself (a REPL's worker sleeping while its reader polls the terminal; a JVM's many
        timed threads)."""
        return any(self._timeout_of_call(pid, _timed_call(wait)) for (pid, _), wait in self._other_waits.items()
                   if pids is None or pid in pids)

    def reader_works_on_time(self) -> bool:
        """Whether a process the last check found reading our terminal has another thread in a timed wait: a
        reader that takes the keys all along, while its other thread runs what it was given (a sleep) - see
        :meth:`SendOperation._keys_read_while_timed_work`.  Other processes of the group do not count (a
        background job's ``sleep``)."""
        return self.waits_on_time_elsewhere(set(self.tty_readers))

    def sleep_ends(self, now: float) -> float | None:
        """When the first thread of the last check that is in a timed wait wakes up (``time.monotonic()``
        seconds), or None.

        A timed wait is a sleep (``nanosleep``, ``clock_nanosleep``), a ``futex`` wait with a timeout (a
        condition or event waited on with a timeout), or ``poll``/``select``/``epoll`` with a timeout on other
        fds (an event loop's timer: ``asyncio.sleep``, node's ``setTimeout``).  A program that waits so and
        then reads (``time.sleep(2); input()``) gives no event when it wakes; a check scheduled for that moment
        sees its read at once instead of at the next slow tick.  An absolute deadline (Python's ``time.sleep``)
        says exactly when; a relative one is timed from when it was first seen, so the check comes at or a
        little after the wake, never before it.
        """
        last = self._last_sample
        if last is None or not _TIMED:
            return None
        if self._sleep_answer is not None and self._sleep_answer[0] is last[1] and not self._prompters:
            return self._sleep_answer[1]  # no check since: nothing of the group has run
        watched = self._watched(last[1])
        for gone in self._looks.keys() - watched.keys():  # threads no longer seen
            del self._looks[gone]
        wake = self._first_wake(watched, now)
        self._sleep_answer = (last[1], wake[1] if wake is not None else None)
        return self._sleep_answer[1]

    def pause_ends(self, now: float, began_after: float) -> tuple[float, float] | None:
        """When the first thread of the last check that pauses by itself wakes up, as the earliest and the latest
        it can be (``time.monotonic()`` seconds), or None: a pause is a sleep (``nanosleep``,
        ``clock_nanosleep``: ``sleep 5``, ``time.sleep``) or a ``select``/``poll`` on no fds at all (PAM's delay
        after a wrong password).  Such a thread waits for nothing but time - not for us, not for the network -
        so its wake is when the program goes on.

        An absolute deadline is exact.  A relative one began after the last look that saw the thread otherwise
        and by the first that saw it so: on a busy host, or with the loop held up, the two lie apart.  It is not
        taken to have begun before ``began_after`` (the send's write: a look from an earlier send says nothing of
        what the program did since); a pause that did is timed as if it began then, which never makes it seem
        nearer than it is."""
        last = self._last_sample
        if last is None or not _TIMED:
            return None
        return self._first_wake(self._watched(last[1]), now, pauses_only=True, began_after=began_after)

    def _watched(self, sample: dict[tuple[int, int], bytes]) -> Mapping[tuple[int, int], bytes | None]:
        """The threads whose timed waits are watched, each with its scheduler stats: those of ``sample`` (the
        last check's), and those of the prompters outside the group that are still there (see
        :attr:`_prompters`).  ``sample`` itself when there are none (a tick's look copies nothing)."""
        if not self._prompters:
            return sample
        watched: dict[tuple[int, int], bytes | None] = dict(sample)
        alive = []
        for pid in self._prompters:
            stat = self._stat(pid)
            if stat is None or stat.gone:
                continue
            alive.append(pid)
            for tid in self._threads(pid)[:MAX_THREADS_LOOKED]:
                watched.setdefault((pid, tid), self._schedstat(pid, tid))
        self._prompters = alive
        return watched

    def _first_wake(self, threads: Mapping[tuple[int, int], bytes | None], now: float,
                    pauses_only: bool = False, began_after: float = -math.inf) -> tuple[float, float] | None:
        """When the first of ``threads`` (with their scheduler stats) in a timed wait (only a pause:
        ``pauses_only``) wakes, at the earliest and at the latest (see :meth:`_sleep_end`), or None."""
        earliest = latest = math.inf
        for (pid, tid), ran in threads.items():
            line = self._text(f"/proc/{pid}/task/{tid}/syscall")
            end = self._sleep_end(pid, tid, line, now, ran, pauses_only, began_after) if line else None
            if end is not None:
                earliest, latest = min(earliest, end[0]), min(latest, end[1])
        return (earliest, latest) if latest < math.inf else None

    def _sleep_end(self, pid: int, tid: int, line: str, now: float, ran: bytes | None,
                   pauses_only: bool = False, began_after: float = -math.inf) -> tuple[float, float] | None:
        """When thread ``tid``'s timed wait (its syscall ``line``) ends, at the earliest and at the latest, or
        None.  A relative wait is timed from the look before the first that saw it (it began after that one,
        and after ``began_after``) and from that first look (it had begun by then): the latest is never before
        its real end."""
        # The same wait as before only if the thread has not run since (a loop of identical sleeps is new
        # sleeps).
        key = (line, ran)
        look = self._looks.get((pid, tid))
        if look is None or look.key != key:
            look = self._looks[(pid, tid)] = _Look(key, now, look.last if look is not None else None)
        look.last = now
        call = _timed_call(line)
        if pauses_only and (call is None or not _pauses(*call)):
            return None
        timeout = self._timeout_of_call(pid, call)
        if timeout is None:
            return None
        clock, absolute, seconds = timeout
        if absolute:
            end = _deadline(clock, seconds, now)
            span = (end, end) if end is not None else None
        else:
            began = look.since
            if pauses_only:  # (only a pause's earliest end is asked for: see pause_ends)
                after = look.before if look.before is not None else self._thread_started(pid, tid)
                began = min(max(after if after is not None else began, began_after), began)
            span = (began + seconds, look.since + seconds)
        # Only long waits are watched: a program waking every few milliseconds is busy, and the tick serves
        # it; an end already past is no prediction at all.
        if span is None or span[1] <= now or span[1] - look.since < MIN_WATCHED_SLEEP:
            return None
        return span

    def _thread_started(self, pid: int, tid: int) -> float | None:
        """When thread ``tid`` started (``time.monotonic()`` seconds, rounded down to the clock tick the kernel
        counts in), or None: a wait of a thread never looked at before began after that."""
        stat = self._stat(pid, tid)
        if stat is None:
            return None
        return stat.start_time / _CLOCK_TICKS - (time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic())

    # -- internals ---------------------------------------------------------
    def members_seen(self, pgid: int) -> list[int]:
        """The members of ``pgid`` the last check found (found now when that check was of another group)."""
        if self._group_cache is not None and self._group_cache[0] == pgid:
            return self._group_cache[1]
        self._tasks = {}
        return self.group_members(pgid)

    def group_members(self, pgid: int) -> list[int]:
        """Members of process group ``pgid``, found from the program and last known members downwards.

        A member is the program itself or what it started in its own group
        (a REPL's ``os.system('vim')``), a child of the shell (the members of
        a pipeline), or was forked by another member (``git`` forks ``vim``),
        so walking ``/proc/PID/task/TID/children`` from there finds every
        member without scanning all of ``/proc``; when that finds nothing, one
        full scan does.  A wrapper's processes are left out.
        """
        if pgid == self.leader_pid or pgid in self.wrappers:
            seeds = [self.leader_pid]  # the program at its prompt, or the program running in the wrapper's group
        else:
            seeds = [pgid, *self._children(self.leader_pid)]  # a job: a pipeline's members are the shell's children
            if self._group_cache is not None and self._group_cache[0] == pgid:
                seeds += self._group_cache[1]
        members = [pid for pid in self._walk_group(seeds, pgid) if pid not in self.wrappers]
        if not members:
            members = [pid for pid, stat in process_table().items()
                       if stat.pgrp == pgid and not stat.gone and pid not in self.wrappers]
        self._group_cache = (pgid, members)
        # A command's files are read on every tick while it runs: keep them open too (its leader first).
        self._files.keep_also([] if pgid == self.leader_pid else members)
        return members

    def _walk_group(self, seeds: list[int], pgid: int) -> list[int]:
        """Processes of group ``pgid`` among ``seeds`` and their descendants (through group members only)."""
        found: list[int] = []
        seen: set[int] = set()
        stack = seeds[::-1]  # (the group's leader first)
        self._walk_cut = False
        while stack:
            if len(seen) >= MAX_WALK_LOOKS or len(found) > MAX_THREADS_LOOKED:
                self._walk_cut = True  # (the group is too big to look into: see _group_state)
                break
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            if pid != pgid:  # the group's leader needs no look: a live group keeps its id from reuse
                stat = self._stat(pid)
                if stat is None or stat.gone or stat.pgrp != pgid:
                    continue
            found.append(pid)
            kids = self._kids[pid] = self._children(pid)
            stack.extend(kids)
        return found

    def _children(self, pid: int) -> list[int]:
        """Pids of ``pid``'s children (from every thread's ``children`` list)."""
        out: list[int] = []
        for tid in self._threads(pid)[:MAX_THREADS_LOOKED]:  # (beyond, the group is too big to look into)
            children = self._files.read(f"/proc/{pid}/task/{tid}/children")
            if children:
                out.extend(int(child) for child in children.split())
        return out

    def _threads(self, pid: int) -> list[int]:
        tasks = self._tasks.get(pid)
        if tasks is None:
            try:
                tasks = self._tasks[pid] = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                return []
        return tasks

    def _too_big_to_look_into(self, group: list[int]) -> bool:
        """Whether the group just walked (``group``: its members) is past a check's bounds: its walk stopped
        at :data:`MAX_WALK_LOOKS`, or it has more than :data:`MAX_THREADS_LOOKED` threads."""
        return self._walk_cut or self._too_many_threads(group)

    def _too_many_threads(self, pids: list[int]) -> bool:
        """Whether ``pids`` have more threads than one check looks at (:data:`MAX_THREADS_LOOKED`)."""
        total = 0
        for pid in pids:
            total += len(self._threads(pid))
            if total > MAX_THREADS_LOOKED:
                return True
        return False

    def _take_leader_stat(self, pid: int, tid: int) -> ProcessStat | None:
        """The group leader's stat this check read a moment ago, once.  Its state only filters: a thread that
        ran since shows it in its ``syscall`` file, read between the two scheduler samples."""
        kept, self._leader_stat = self._leader_stat, None
        return kept[1] if kept is not None and kept[0] == pid == tid else None

    def _schedstat(self, pid: int, tid: int) -> bytes | None:
        return self._files.read(f"/proc/{pid}/task/{tid}/schedstat")

    def _stat(self, pid: int, tid: int | None = None) -> ProcessStat | None:
        return stat_of(self._files.read(stat_path(pid, tid)), pid)

    def _text(self, path: str) -> str | None:
        raw = self._files.read(path)
        return None if raw is None else raw.decode("ascii", "replace")

    def _group_state(self, pids: list[int], fence: Fence) -> str | None:
        """``"tty"``: someone reads the tty freshly and nobody runs; ``"stale"``: nobody runs, and whoever reads
        the tty has waited since before the fence (our input has not reached them); ``"busy"``: someone runs,
        waits in a way that says nothing, or waits for a command at work (see :meth:`_runs_a_command`);
        ``"idle"``: everyone is asleep on something else; None: nobody seen."""
        self._too_big = self._too_big_to_look_into(pids)
        if self._too_big:
            return "busy"
        outer, self._looked_at = self._looked_at, pids
        try:
            found = self._thread_states(pids, fence)
        finally:
            self._looked_at = outer
        if "busy" in found:
            return "busy"
        if not found:
            return None
        if "unseen" in found and not ("tty" in found and self._unseen_wait_for_readers()):
            return "busy"
        if "stale" in found:
            return "busy" if "tty" in found else "stale"
        if "tty" in found:
            return "busy" if len(pids) > 1 and self._runs_a_command(pids) else "tty"
        return "idle"

    def _thread_states(self, pids: list[int], fence: Fence) -> set[str]:
        """The states of the threads of ``pids`` (see :meth:`_thread_state`): up to the first that is busy or
        running, as ``"busy"``."""
        found: set[str] = set()
        for pid in pids:
            for tid in self._threads(pid):
                state = self._thread_state(pid, tid, fence)
                if state == "running":
                    self.running_thread = (pid, tid)
                if state in ("busy", "running"):
                    return {"busy"}
                if state is not None:
                    found.add(state)
        return found

    def _outside_reader(self, members: list[int], fence: Fence) -> str:
        """``"tty"`` when a process the session runs outside the foreground group (``pinentry`` under
        ``gpg-agent``), or one elsewhere that holds this tty open (a tmux server ``tmux attach`` handed it
        to), freshly waits to read this tty, else ``"idle"`` (see the module docstring).  Only
        sleepers are looked at, and only their waits: what else runs outside the group is not our business.
        Only processes in another session than the group's count: for the rest this tty is their controlling
        terminal, and job control stops a background job that reads it (one that polls it, ``ssh host cmd &``,
        is not waiting for us).

        Looks come at most every :data:`OUTSIDE_GAP` seconds; one that finds such a process on a CPU (it may
        read the tty the moment after), or is put off, owes the next (see :meth:`unchanged_since_last_check`).
        """
        group_stat = self._stat(members[0]) if members and not self._relay_depth else None
        if group_stat is None:
            return "idle"
        outer, self._looked_at = self._looked_at, members  # (a tmux server's socket to its client, a member)
        try:
            return self._outside_state(members, group_stat, fence)
        finally:
            self._looked_at = outer
            for pid in self._outside:
                if pid not in self._prompters:
                    self._prompters = [*self._prompters, pid][-MAX_OUTSIDE_READERS:]

    def _outside_state(self, members: list[int], group_stat: ProcessStat, fence: Fence) -> str:
        now = time.monotonic()
        if now - self._outside_at < OUTSIDE_GAP:  # too soon for a walk: the readers it found, again
            self._outside_owed = True
            for pid in self._outside_found:
                if any(self._thread_state(pid, tid, fence) == "tty" for tid in self._threads(pid)):
                    self._outside.append(pid)
            return "tty" if self._outside else "idle"
        self._outside_at, self._outside_owed = now, False
        self._outside_found = self._outside
        skip = {*members, *self.wrappers}
        candidates = MAX_OUTSIDE_READERS
        tree = self._descendants(self._root_pid)
        holders = [pid for pid in _HOLDERS.of(self.tty_path, now) if pid not in skip and pid not in tree]
        if _HOLDERS.searching:
            self._outside_owed = True  # (its answer is for the next look)
        for pid in [*tree, *holders]:
            stat = self._stat(pid) if pid not in skip else None
            if stat is None or stat.gone or stat.session == group_stat.session or not candidates:
                continue
            if stat.state in "RD":
                self._outside_owed = True
            if stat.state != "S" or self._too_many_threads([pid]):
                continue
            for tid in self._threads(pid):
                syscall = self._text(f"/proc/{pid}/task/{tid}/syscall")
                self._masters, self._sockets, timeout = [], [], self._timeout
                waits = self._waits_on_tty(pid, syscall) if syscall is not None else None
                self._timeout = timeout  # (this look only filters: the verdict's look records the timeout)
                if waits is None:
                    self._outside_owed = True
                elif waits and candidates:
                    candidates -= 1  # (each may be a relay, with a walk of its own: tmux's server)
                    if self._thread_state(pid, tid, fence) == "tty":
                        self._outside.append(pid)
        return "tty" if self._outside else "idle"

    def _thread_state(self, pid: int, tid: int, fence: Fence) -> str | None:
        """``"tty"`` (fresh read wait on our tty), ``"stale"`` (a read wait on it from before the fence),
        ``"running"`` (on a CPU, or ran while sampled), ``"busy"`` (not waiting for us: unknown), ``"idle"``, or
        None (gone).

        Every thread looked at goes into the check's sample (see :meth:`unchanged_since_last_check`): with
        its scheduler stats when the look found it settled, else with :data:`_UNSETTLED`, which no later
        read equals - a thread found running may block the moment after, with no run left to notice.
        """
        before = self._schedstat(pid, tid)
        if before is None:
            if pid == tid == self._leader_pid:
                self._blind_to_the_program(f"/proc/{pid}/task/{tid}/schedstat")  # (gVisor has none)
            return None
        sample = self._last_sample[1] if self._last_sample is not None else {}
        sample[(pid, tid)] = _UNSETTLED
        stat = self._take_leader_stat(pid, tid) or self._stat(pid, tid)
        if stat is None:
            return None
        if stat.gone or stat.state in "Tt":
            # Stopped, or stopped by a tracer: it neither runs nor reads until continued.  (A read it was in
            # when gdb stopped it on ^C still shows in its syscall file, until gdb takes the terminal back.)
            sample[(pid, tid)] = before
            self._other_waits[(pid, tid)] = "stopped"
            self.program_stopped = self.program_stopped or (pid == self.leader_pid and stat.state == "T")
            return "idle"
        if stat.state != "S":
            return "running"
        syscall = self._text(f"/proc/{pid}/task/{tid}/syscall")
        if syscall is None and not self._asks_for_a_secret():
            if pid == tid == self._leader_pid:
                self._blind_to_the_program(f"/proc/{pid}/task/{tid}/syscall")
            return self._unseen_state(pid, tid, before, sample)
        timeout_before, self._masters, self._sockets = self._timeout, [], []
        # (a wait we may not look into, on a terminal set to take a secret: a read of it, see _asks_for_a_secret)
        waits_on_tty = self._waits_on_tty(pid, syscall) if syscall is not None else self._waiting(math.inf)
        after = self._schedstat(pid, tid)
        if after != before:
            return "running"
        sample[(pid, tid)] = after
        if waits_on_tty is None:
            return "busy"
        if not waits_on_tty and syscall is not None:  # (one not looked into is a read here, or busy above)
            self._other_waits[(pid, tid)] = syscall
            if fence.schedstat.get((pid, tid)) != after:  # (it ran since the write)
                self.handed_on = True
                self.timer_due = max(self.timer_due, self._short_timer(pid, syscall))
            return "idle"
        if self._sockets and self._passes_input_away(pid, self._sockets):
            return "busy"  # (ssh: what we type runs on another host, where nothing is seen)
        self._tty_waiters.add(pid)
        fresh = fence.accept_stale or fence.schedstat.get((pid, tid)) != after
        if fresh and not self._masters and self._sockets and self._serves_a_member(pid, self._sockets):
            # It kept our input and talks to another member: it counts once settled, with no new output (a
            # tmux server whose last pane has exited reads our tty a moment before it tells its client to go).
            self.kept_by_relay = True
        if self._masters and self._relay_depth < MAX_RELAY_DEPTH:
            own_timeout, self._timeout = self._timeout, timeout_before  # (the inner wait's timeout counts)
            state = self._relayed_state(pid, self._masters, fence)
            if state != "kept":
                return state
            if not fresh:
                return "stale"
            # It took our input and nothing behind it has run since: it kept the input, and its own wait is
            # the prompt (settled a while: input it did pass on may be on its way to its command still).
            self._timeout, self.kept_by_relay = own_timeout, True
        if fresh:
            self.tty_readers.append(pid)
            self._tty_read_lines[pid] = syscall
        return "tty" if fresh else "stale"

    def read_call(self, pid: int) -> tuple[str, bool] | None:
        """The wait a process the last check found freshly reading the tty is in (None: it found none): its
        system call (``read``, ``pselect6``, ...; ``""`` when it may not be read) and whether it sets a signal
        mask for the wait (``pselect6``'s last argument: readline's own wait for a key does).  Parsed here,
        when asked (after an interrupt), not on every check."""
        if pid not in self._tty_read_lines:
            return None
        line = self._tty_read_lines[pid]
        parts = line.split() if line else []
        number = self._syscall_number(line)
        name = _SYSCALLS.get(number, "") if number is not None else ""
        return name, name == "pselect6" and len(parts) > 6 and parts[6] not in ("0x0", "0")

    def _blind_to_the_program(self, path: str) -> None:
        """Stop looking if the session's own program's ``path`` (its ``syscall`` or ``schedstat`` file, which a
        look could not read) is closed to us while the program is there: Yama's ``ptrace_scope`` 2 or 3 refuses
        it, gVisor's ``/proc`` has neither file.  Every look would find the program busy and every send end on
        the idle window; from now on the shell's exit-code marker tells, as where there is no ``/proc``.  (Any
        other failure - out of file descriptors - or a program gone meanwhile changes nothing.)"""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.read(fd, 64)
            finally:
                os.close(fd)
        except (PermissionError, FileNotFoundError):
            if self._stat(self._leader_pid) is not None:
                self.available = False
        except OSError:
            pass

    def _unseen_state(self, pid: int, tid: int, before: bytes, sample: dict[tuple[int, int], bytes]) -> str:
        """The state of an asleep thread whose wait we may not read (see :meth:`_asks_for_a_secret`), not on a
        terminal set for a secret: ``"unseen"``, which the group's state counts as busy unless a process it
        started reads the tty (see :meth:`_unseen_wait_for_readers`); ``"running"`` if it ran meanwhile."""
        after = self._schedstat(pid, tid)
        if after is None or after != before:
            return "running"
        sample[(pid, tid)] = after
        self._unseen.add(pid)
        return "unseen"

    def _unseen_wait_for_readers(self) -> bool:
        """Whether every process of the group whose wait we may not read has a fresh reader of the tty among
        the processes it started: it waits for that one, most likely - ``crontab -e`` and ``sudoedit`` (setgid,
        setuid: unseen by a user's kernel) wait for the editor they ran as the user, which asks.  (A parent
        that works meanwhile is on a CPU, or runs between our samples: not asleep.)"""
        above: set[int] = set()
        for reader in self.tty_readers:
            pid = reader
            for _ in range(MAX_PARENTS_FOLLOWED):
                stat = self._stat(pid)
                if stat is None or stat.ppid <= 1:
                    break
                pid = stat.ppid
                above.add(pid)
        return self._unseen <= above

    def _asks_for_a_secret(self) -> bool:
        """Whether our terminal is set the way a password prompt sets it: lines, echo off.

        What a thread waits on is in its ``syscall`` file, which only a process that may trace it can read:
        not a user's kernel for a setuid program it runs (``sudo``, ``su``, ``passwd``), nor a kernel
        without ``CAP_SYS_PTRACE`` (a container's root) for another user's processes.  Such a thread, asleep,
        is taken to read the terminal only while the terminal is in line mode with echo off - every password
        prompt sets it so right before it reads, and puts echo back right after (``su``'s delay after a wrong
        password runs with echo on).  Behind a relay the inner terminal's modes are not ours to read: no.
        """
        modes = self._modes() if not self._relay_depth else None
        return modes is not None and bool(modes[3] & termios.ICANON) and not modes[3] & termios.ECHO

    def _passes_input_away(self, pid: int, sockets: list[int]) -> bool:
        """Whether one of ``pid``'s ``sockets`` (inodes) is connected to a process not in the group looked at:
        a thread that waits on our tty and on such a socket passes our input to another host (``ssh``,
        ``telnet``, ``nc``) or to a daemon (``docker exec``, ssh's shared connection), and its wait is no
        prompt - the command it passed it to may run there still, unseen.  A connection to a member is not
        (``node inspect`` talks to the program it debugs, whose state the group's answers; asyncio's own
        wake-up pair, in IPython's wait at its prompt, is a pair of sockets in one process).  What a socket
        is, is remembered (in :attr:`_peers`), but for one still connecting, or whose other end waits in its
        listener's queue: that end has no file yet and is no process's until one takes it, so the wait is no
        prompt for this look, and the next asks again.  (``node inspect``'s connection, before the inspector of
        the program it debugs takes it, was remembered as one to another host, or to nobody: every later send
        to it ended on the idle window; and a relay to a daemon that took its connection late, a prompt.)"""
        known = self._peers
        members = self._looked_at
        # (a member holding the other end may have left the group since: a helper's setsid after its fork)
        unknown = [inode for inode in sockets if inode not in known or (known[inode] or 0) > 0
                   and known[inode] not in members]
        if unknown and self._learn_peers(pid, unknown):
            return True
        return any(known.get(inode) == _AWAY or (known.get(inode) == _HELPER and not self._helper_idle(inode))
                   for inode in sockets)

    def _helper_idle(self, inode: int) -> bool:
        """Whether the helper at the other end of Unix socket ``inode`` has nothing of ours to work on: no byte
        unread at either end, and the helper and everything it started wait for input only, untimed (see
        :meth:`_at_rest_outside`).  A program may talk to a helper of its own that left the group (the Erlang
        VM's ``erl_child_setup``, in a session of its own, runs its ports); our input reaches the helper only
        through the program, so while the helper sleeps with its queue empty the program's wait is its own
        prompt - and while a command it passed on runs there (``os:cmd("sleep 5")``), it is not."""
        helper, end = self._helpers[inode]
        return _unix_unread(inode) == 0 and _unix_unread(end) == 0 and self._at_rest_outside(helper)

    def _at_rest_outside(self, root: int) -> bool:
        """Whether ``root``, outside the group, and its descendants are each asleep in an untimed wait for input
        (``read``, or ``poll``/``select``/``epoll``/a futex with no timeout) or for their children; zombies count
        as at rest.  What they run is untrusted: past :data:`MAX_HELPER_LOOKS` threads, they are not."""
        queue, looks = [root], MAX_HELPER_LOOKS
        while queue:
            pid = queue.pop()
            threads = self._threads(pid)
            looks -= len(threads) + 1
            if looks < 0:
                return False
            for tid in threads:
                stat = self._stat(pid, tid)
                if stat is None or stat.gone:
                    continue
                wait = self._text(f"/proc/{pid}/task/{tid}/syscall") if stat.state == "S" else None
                number = self._syscall_number(wait)
                if wait is None or number is None:
                    return False
                if number not in _CHILD_WAITS and not self._waits_for_input(pid, number, wait):
                    return False
            queue.extend(self._children(pid))
        return True

    def _descendant_holding(self, pid: int, link: str) -> int | None:
        """A descendant of ``pid`` holding ``link`` open (its descendants' descriptors looked at: at most
        :data:`MAX_FDS_LOOKED` in all)."""
        queue, looks = self._children(pid), MAX_FDS_LOOKED
        while queue and looks > 0:
            child = queue.pop(0)
            fds = _fds(child, looks)
            looks -= len(fds) + 1
            if any(read_link(f"/proc/{child}/fd/{fd}") == link for fd in fds):
                return child
            queue.extend(self._children(child))
        return None

    def _serves_a_member(self, pid: int, sockets: list[int]) -> bool:
        """Whether one of ``pid``'s ``sockets`` is connected to another process of the group looked at (known
        from :meth:`_passes_input_away`): a tmux server talking to its client, a debugger to its program."""
        return any(self._peers.get(inode) not in (None, _AWAY, pid) for inode in sockets)

    def _learn_peers(self, pid: int, inodes: list[int]) -> bool:
        """Note for each socket what is at its other end: :data:`_AWAY`, a member's pid, or None (not
        connected, or no TCP, UDP or Unix socket; but one not found in a TCP or UDP table read only in part, on
        a host with thousands of sockets, is most likely one of its connections: :data:`_AWAY`).  True when
        one's other end waits in its listener's queue (nothing is noted for it)."""
        queued = False
        known = self._peers
        by_inode, by_ends, cut = _inet_sockets(pid)
        held: dict[str, int] | None = None
        if len(known) > MAX_FDS_LOOKED:
            known.clear()
            self._helpers.clear()
        for inode in inodes:
            if inode in by_inode:
                state, (protocol, local, remote) = by_inode[inode]
                if state in _CONNECTING:
                    continue
                peer = by_ends.get((protocol, remote, local)) if state == _CONNECTED else None
                if state == _CONNECTED and peer is None:  # (the other end is on another host)
                    known[inode] = _AWAY
                    continue
            else:
                peer = _unix_peer(inode)
            if peer == 0:  # (the other end waits in its listener's queue: who takes it is not known yet)
                queued = True
                continue
            if peer is None:  # (not connected - or, past the part of a table read, most likely a host's)
                known[inode] = _AWAY if cut and inode not in by_inode else None
                continue
            if held is None:  # (read once for all the sockets learnt here)
                held = self._held_by_members()
            holder = held.get(f"socket:[{peer}]")
            helper = self._descendant_holding(pid, f"socket:[{peer}]") \
                if holder is None and inode not in by_inode else None
            if helper is not None:
                known[inode], self._helpers[inode] = _HELPER, (helper, peer)
            else:
                known[inode] = _AWAY if holder is None else holder
        return queued

    def _held_by_members(self) -> dict[str, int]:
        """What the processes of the group looked at hold open (their ``/proc/PID/fd`` links), each with the
        first of them that holds it (the look stops at :data:`MAX_FDS_LOOKED` descriptors a process)."""
        return {link: member for member in reversed(self._looked_at) for link in _fd_links(member, MAX_FDS_LOOKED)}

    def _runs_a_command(self, members: list[int]) -> bool:
        """Whether a member of the group waits for a child of the group (``wait4``, ``waitid``) that is still
        at work: the group's reader of the tty then passes input on to a command that runs.  ``cat | sh``
        running ``sleep 2``: ``cat`` reads the tty again at once, while ``sh`` waits for ``sleep``.  A child
        that waits for us (it, or a process it waits for, reads the tty: ``git`` waiting for its editor), or
        is at rest otherwise (see :meth:`_at_rest`), is no command at work; nor is a child of a process that
        reads the tty itself (a program waiting for its helper in one thread while another asks)."""
        group = set(members)
        waiters = {pid for (pid, _), wait in self._other_waits.items() if self._syscall_number(wait) in _CHILD_WAITS}
        return any(not all(self._at_rest(child, group, MAX_RELAY_PROCESSES) for child in self._commands(pid, group))
                   for pid in (waiters & group) - self._tty_waiters)

    def _commands(self, pid: int, group: set[int]) -> list[int]:
        """``pid``'s children in the group, but for background jobs: a shell without job control runs ``job &``
        in its own group with its input from ``/dev/null`` (``sh -c 'server & client'``: the client asks)."""
        commands = []
        kids = self._kids.get(pid)
        for child in kids if kids is not None else self._children(pid):  # (a group behind a relay: not walked)
            if child in group:
                try:
                    if os.readlink(f"/proc/{child}/fd/0") == "/dev/null":
                        continue
                except OSError:
                    pass
                commands.append(child)
        return commands

    def _at_rest(self, pid: int, group: set[int], budget: int) -> bool:
        """Whether ``pid`` waits for nothing but input: it reads the tty; or each of its threads is stopped, is
        blocked in a read (of what is passed on: a pipe, a socket), waits without a timeout in ``poll``,
        ``select``, ``epoll`` or on a futex (for another thread), or waits for children of the group at rest.
        A sleep, a timed wait or a system call not known here is work of its own (``sleep``, a download)."""
        if pid in self._tty_waiters:
            return True
        for tid in self._threads(pid):
            wait = self._other_waits.get((pid, tid))
            if wait == "stopped":
                continue
            number = self._syscall_number(wait)
            if number in _CHILD_WAITS:
                budget -= 1
                if budget > 0 and all(self._at_rest(child, group, budget) for child in self._commands(pid, group)):
                    continue
                return False
            if wait is None or not self._waits_for_input(pid, number, wait):
                return False
        return True

    def _waits_for_input(self, pid: int, number: int | None, wait: str) -> bool:
        """Whether a thread in ``wait`` (its syscall line) waits for data from another process, untimed."""
        name = _SYSCALLS.get(number) or _TIMED.get(number) if number is not None else None
        if name in ("read", "readv") or number in _RECEIVES:
            return True
        if name is None or name in ("nanosleep", "clock_nanosleep"):
            return False
        try:
            return _timeout_of(pid, name, [int(a, 16) for a in wait.split()[1:7]]) is None
        except (OSError, ValueError, struct.error, IndexError):
            return False

    @staticmethod
    def _syscall_number(wait: str | None) -> int | None:
        parts = wait.split(maxsplit=1) if wait else None
        return int(parts[0]) if parts and parts[0].isdigit() else None

    def _relayed_state(self, relay: int, masters: list[int], fence: Fence) -> str:
        """A relay's thread state is its command's: ``"tty"`` when the inner terminal's foreground group waits
        for input on it (by the same rules, fences included; the others', if it has several, waiting from
        before the fence); ``"kept"`` when every inner terminal's group waits on it from before the fence
        (nothing reached them: a program with terminals of its own, as ``mc``'s subshell or an editor's
        terminal window, that took our input for itself); else ``"busy"`` - also when an inner terminal or
        its group cannot be found: a relay waits on our tty whatever its command does."""
        inner = self._inner_terminals(relay, masters)
        if not inner:
            return "busy"
        states = []
        for terminal, members in inner:
            self._relayed.extend(members)
            outer, self._terminal = self._terminal, terminal
            self._relay_depth += 1
            try:
                states.append(self._group_state(members, fence))
            finally:
                self._terminal = outer
                self._relay_depth -= 1
        if not set(states) <= {"tty", "stale"}:
            return "busy"
        if "tty" in states:  # (the one our input reached waits again; the others never had it)
            self.through_relay = True
            return "tty"
        return "kept"

    def _inner_terminals(self, relay: int, masters: list[int]) -> list[tuple[_Terminal, list[int]]] | None:
        """The terminals behind ``relay``'s PTY masters, each with the members of its foreground group, found
        among the processes under the relay: those in another session whose controlling terminal it is.
        None when any of them cannot be found."""
        indexes = {self._tty_index(relay, fd) for fd in masters}
        relay_stat = self._stat(relay)
        if None in indexes or relay_stat is None:
            return None
        under = [(pid, stat) for pid in self._descendants(relay) if (stat := self._stat(pid)) is not None
                 and not stat.gone]
        found = []
        for index in sorted(indexes):  # type: ignore[type-var]
            on_it = [stat for _, stat in under
                     if stat.session != relay_stat.session and _pts_index(stat.tty_nr) == index]
            if not on_it or on_it[0].tpgid <= 0:
                return None
            rdev, pgid = on_it[0].tty_nr, on_it[0].tpgid
            members = [pid for pid, stat in under if stat.pgrp == pgid]
            if not members:
                return None
            found.append((_Terminal(f"/dev/pts/{index}", rdev), members))
        return found

    def _tty_index(self, pid: int, fd: int) -> int | None:
        """The pts number of the PTY master ``fd`` of ``pid`` (``tty-index`` in its fdinfo)."""
        index = _fdinfo_fields(self._files.read(f"/proc/{pid}/fdinfo/{fd}")).get(b"tty-index")
        return None if index is None else int(index)

    def _descendants(self, pid: int) -> list[int]:
        """Processes under ``pid`` (at most :data:`MAX_RELAY_PROCESSES`), breadth first."""
        found: list[int] = []
        queue = self._children(pid)
        looks = 1
        while queue and len(found) < MAX_RELAY_PROCESSES and looks < MAX_WALK_LOOKS:
            child = queue.pop(0)
            if child not in found:
                found.append(child)
                looks += min(len(self._threads(child)), MAX_THREADS_LOOKED)  # (a children file per thread)
                queue.extend(self._children(child))
        return found

    def _waits_on_tty(self, pid: int, syscall: str) -> bool | None:
        """True/False for a blocking wait that does/doesn't read our tty; None if not blocked in a syscall."""
        parts = syscall.split()
        if not parts or parts[0] == "running" or parts[0] == "-1":
            return None
        try:
            nr = int(parts[0])
            args = [int(a, 16) for a in parts[1:7]]
        except ValueError:
            return None
        name = _SYSCALLS.get(nr)
        if name is None:
            return False
        try:
            if name in ("read", "readv"):
                seconds = self._read_timeout() if self._is_tty(pid, args[0]) else None
                return seconds is not None and self._waiting(seconds)
            if name in ("select", "pselect6"):
                return self._select_reads_tty(pid, name, args)
            if name in ("poll", "ppoll"):
                return self._poll_reads_tty(pid, name, args)
            return self._epoll_reads_tty(pid, name, args)
        except (OSError, ValueError, struct.error):
            return False

    def _read_timeout(self) -> float | None:
        """How long a read of our terminal waits for input, from its modes (``math.inf``: until some comes), or
        None when it does not wait at all.  In raw mode with ``VMIN`` 0 a read returns after ``VTIME`` tenths
        of a second with nothing: a reader that reads so over and over (JLine's, in ``jshell``, all along -
        also while a snippet runs) is in a timed wait, not at a prompt by that alone (see
        :meth:`SendOperation._settled`).  An inner terminal's modes (behind a relay) are not read: untimed."""
        attrs = self._modes() if not self._relay_depth else None
        if attrs is None:
            return math.inf
        if attrs[3] & termios.ICANON or attrs[6][termios.VMIN] != 0:  # (VMIN, VTIME: ints in raw mode only)
            return math.inf
        seconds = int(attrs[6][termios.VTIME]) / 10
        return seconds if seconds >= SHORT_WAIT else None

    def _short_timer(self, pid: int, syscall: str) -> float:
        """Seconds until a timed wait (its ``syscall`` line) ends, if that is under :data:`SHORT_WAIT`; else 0."""
        timeout = self._timeout_of_call(pid, _timed_call(syscall))
        if timeout is None:
            return 0.0
        clock, absolute, seconds = timeout
        if absolute:
            now = time.monotonic()
            end = _deadline(clock, seconds, now)
            seconds = end - now if end is not None else 0.0
        return seconds if 0 < seconds < SHORT_WAIT else 0.0

    def _timeout_of_call(self, pid: int, call: tuple[str, list[int]] | None) -> tuple[int, bool, float] | None:
        """:func:`_timeout_of` for ``pid``'s timed wait ``call`` (see :func:`_timed_call`), or None: no call, no
        timeout, or its arguments could not be read (the process gone)."""
        try:
            return _timeout_of(pid, *call) if call is not None else None
        except (OSError, ValueError, IndexError, struct.error):
            return None

    def _waiting(self, seconds: float) -> bool:
        """Record a tty wait's timeout (the longest seen in this check wins) and report it."""
        self._timeout = max(self._timeout, seconds)
        return True

    def _is_tty(self, pid: int, fd: int) -> bool:
        """Is ``pid``'s ``fd`` this terminal: the pts, or ``/dev/tty`` with this pts as its controlling tty?
        (A PTY master is noted in :attr:`_masters`: waiting on one too makes the thread a relay.)"""
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            return False
        terminal = self._terminal
        if target in _PTY_MASTERS:
            self._masters.append(fd)
            return False
        if target.startswith("socket:["):
            self._sockets.append(int(target[8:-1]))
            return False
        if target == "/dev/tty":
            stat = self._stat(pid) if terminal.rdev is not None else None
            return stat is not None and stat.tty_nr == terminal.rdev
        if terminal.node is None:
            return target == terminal.path
        # By the open file's mount and inode, never by a stat (see _fd_identity); only device paths are looked
        # at (not pipes, sockets).
        if not target.startswith("/dev/"):
            return False
        found = _fd_identity(self._files.read(f"/proc/{pid}/fdinfo/{fd}"))
        return found is not None and found[1] == terminal.node[1] \
            and (found[0] == terminal.node[0] or target == "/dev/console")

    def _wait_timeout(self, pid: int, name: str, args: list[int]) -> float | None:
        """A tty wait's timeout in seconds (``math.inf``: none), or None for a timer (under :data:`SHORT_WAIT`)."""
        timeout = _timeout_of(pid, name, args)
        seconds = math.inf if timeout is None else timeout[2]
        return None if seconds < SHORT_WAIT else seconds

    def _select_reads_tty(self, pid: int, name: str, args: list[int]) -> bool:
        nfds, readfds = args[0], args[1]
        seconds = self._wait_timeout(pid, name, args)
        if seconds is None or not readfds or nfds <= 0 or nfds > 65536:
            return False
        if nfds == 1:  # (fd 0 or nothing: bash's and Python's readline wait so - no memory read, the hot path)
            return self._reads_tty(pid, [0], seconds)
        looked = min(nfds, MAX_FDS_LOOKED)
        bits = read_memory(pid, readfds, (looked + 7) // 8)
        fds = [index * 8 + bit for index, byte in enumerate(bits) if byte for bit in range(8) if byte & (1 << bit)]
        return self._reads_tty(pid, [fd for fd in fds if fd < looked], seconds)

    def _poll_reads_tty(self, pid: int, name: str, args: list[int]) -> bool:
        fds_ptr, nfds = args[0], args[1]
        seconds = self._wait_timeout(pid, name, args)
        if seconds is None or not fds_ptr or nfds <= 0 or nfds > 65536:
            return False
        raw = read_memory(pid, fds_ptr, 8 * min(nfds, MAX_FDS_LOOKED))
        return self._reads_tty(pid, [fd for fd, events, _ in struct.iter_unpack("ihh", raw)
                                     if fd >= 0 and events & _POLLIN], seconds)

    def _epoll_reads_tty(self, pid: int, name: str, args: list[int]) -> bool:
        seconds = self._wait_timeout(pid, name, args)
        # (An epoll's fdinfo waits for its lock, which can be held for good: a guarded read, see GuardedReads.)
        raw = guarded_reads.read(f"/proc/{pid}/fdinfo/{args[0]}", pid) if seconds is not None else None
        info = None if raw is None else raw.decode("ascii", "replace")
        if seconds is None or info is None:
            return False
        fds = []
        for line in info.splitlines():
            if line.startswith("tfd:"):
                fields = line.split()
                if int(fields[3], 16) & _EPOLLIN:
                    fds.append(int(fields[1]))
                    if len(fds) >= MAX_FDS_LOOKED:
                        break
        return self._reads_tty(pid, fds, seconds)

    def _reads_tty(self, pid: int, fds: list[int], seconds: float) -> bool:
        """Whether a wait to read ``fds`` reads this terminal (every fd is looked at: a relay's master may
        come after the tty)."""
        found = False
        for fd in fds:
            found = self._is_tty(pid, fd) or found
        return found and self._waiting(seconds)


class _HolderSearch:
    """Which processes hold each terminal open, from a search of every process's fds in a thread of its own.

    :meth:`of` answers from the last search at once and starts the next one when the last is old enough
    (:data:`HOLDER_SEARCH_GAP`, or longer when searches are slow: :data:`HOLDER_SEARCH_SHARE`)."""

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Start afresh: nothing found, no search under way (in a forked child, those were the parent's)."""
        self._found: dict[str, tuple[int, ...]] = {}
        self._started = -math.inf
        self._cost = 0.0
        self.searching = False

    def of(self, tty_path: str, now: float) -> tuple[int, ...]:
        """The pids the last search found holding ``tty_path`` open (our own process left out)."""
        if not self.searching and now - self._started >= max(HOLDER_SEARCH_GAP, self._cost / HOLDER_SEARCH_SHARE):
            self.searching, self._started = True, now
            # (a thread per search, gone when it is done: none stays for a search that may never come again)
            try:
                threading.Thread(target=self._search, name="dsh-terminal-holders", daemon=True).start()
            except RuntimeError:  # no thread can start (the user's process limit): the last answer stands and the
                self.searching = False  # look goes on - the send failed with "can't start new thread"
        return self._found.get(tty_path, ())

    def _search(self) -> None:
        started = time.monotonic()
        found: dict[str, list[int]] = {}
        me = str(os.getpid())
        try:
            for name in os.listdir("/proc"):
                if name.isdigit() and name != me:
                    for target in _pts_links(name):
                        found.setdefault(target, []).append(int(name))
            self._found = {target: tuple(pids) for target, pids in found.items()}
        finally:
            self._cost = time.monotonic() - started
            self.searching = False


def _pts_links(pid: str) -> set[str]:
    """The pts devices among ``pid``'s open fds (by their ``/proc/PID/fd`` links)."""
    return {target for target in _fd_links(pid) if target.startswith("/dev/pts/")}


def _fds(pid: int | str, limit: int | None = None) -> list[str]:
    """``pid``'s first ``limit`` open fds (their numbers, as ``/proc/PID/fd`` lists them); none when unreadable."""
    try:
        return os.listdir(f"/proc/{pid}/fd")[:limit]
    except OSError:
        return []


def _fd_links(pid: int | str, limit: int | None = None) -> set[str]:
    """What ``pid``'s open fds point to, as their ``/proc/PID/fd`` links show it (its first ``limit`` fds)."""
    return {link for fd in _fds(pid, limit) if (link := read_link(f"/proc/{pid}/fd/{fd}")) is not None}


_HOLDERS = _HolderSearch()
os.register_at_fork(after_in_child=_HOLDERS.forget)


def _fdinfo_fields(fdinfo: bytes | None) -> dict[bytes, bytes]:
    """The ``name: value`` lines of an fd's ``/proc/PID/fdinfo`` file (none when it could not be read)."""
    return dict(line.split(b":", 1) for line in (fdinfo or b"").splitlines() if b":" in line)


def _fd_identity(fdinfo: bytes | None) -> tuple[int, int | None] | None:
    """An open file's mount id and inode number (None before Linux 5.14, which shows no ``ino``) from its
    ``fdinfo``, or None.  A ``stat`` of ``/proc/PID/fd/N`` would ask the file's file system, and a program can
    serve one itself (FUSE, in a user namespace of its own): a read of such a file under a private ``/dev``,
    with ``GETATTR`` left unanswered, held the loop in that stat for good (a contained session can mount none
    now - see ``sandbox.SHARED_DEVICES`` - and a stat follows no fd of the program anywhere)."""
    fields = _fdinfo_fields(fdinfo)
    try:
        return int(fields[b"mnt_id"]), int(fields[b"ino"]) if b"ino" in fields else None
    except (KeyError, ValueError):
        return None


def _unix_peer(inode: int) -> int | None:
    """The inode of the other end of Unix socket ``inode`` (in this process's network namespace); 0 while that
    end waits in its listener's queue (it has no file yet); None when it is no connected Unix socket there."""
    return _unix_diag(inode, _UDIAG_SHOW_PEER, _UNIX_DIAG_PEER)


def _unix_unread(inode: int) -> int | None:
    """Bytes waiting to be read at Unix socket ``inode``'s end (None when it cannot be asked)."""
    return _unix_diag(inode, _UDIAG_SHOW_RQLEN, _UNIX_DIAG_RQLEN)


def _unix_diag(inode: int, show: int, wanted: int) -> int | None:
    """The first 32-bit field of attribute ``wanted`` in the kernel's socket diagnostics of Unix socket
    ``inode`` (asked over netlink, with ``show``), or None."""
    request = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, inode & 0xFFFFFFFF, show,
                          0xFFFFFFFF, 0xFFFFFFFF)
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(1.0)
            diag.sendto(struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, 1, 1, 0) + request, (0, 0))
            answer = diag.recv(8192)
        length, kind = struct.unpack_from("=IH", answer)
        offset = 32  # (the netlink header, then unix_diag_msg; its attributes follow)
        while kind == _SOCK_DIAG_BY_FAMILY and offset + 8 <= min(length, len(answer)):
            size, attribute = struct.unpack_from("=HH", answer, offset)
            if attribute == wanted:
                return int(struct.unpack_from("=I", answer, offset + 4)[0])
            if size < 4:
                break
            offset += (size + 3) & ~3
    except (OSError, struct.error):
        pass
    return None


#: A socket's ends as ``/proc/PID/net`` tables show them: the protocol, the local and the remote address.
_Ends = tuple[str, bytes, bytes]


def _inet_sockets(pid: int) -> tuple[dict[int, tuple[bytes, _Ends]], dict[_Ends, int], bool]:
    """The TCP and UDP sockets of ``pid``'s network namespace, from the first :data:`MAX_SOCKET_TABLE` bytes of
    each table: inode -> (state, ends), ``b"01"`` being connected; and ends -> inode, to find a connection's
    other end on this host (its ends are the same, the other way round); and whether a table was cut there."""
    by_inode: dict[int, tuple[bytes, _Ends]] = {}
    by_ends: dict[_Ends, int] = {}
    cut = False
    for table in ("tcp", "tcp6", "udp", "udp6"):
        try:
            with open(f"/proc/{pid}/net/{table}", "rb") as f:
                text = f.read(MAX_SOCKET_TABLE)
                cut = cut or (len(text) == MAX_SOCKET_TABLE and bool(f.read(1)))
                lines = text.splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[9].isdigit():
                ends = (table[:3], _ipv4_form(fields[1]), _ipv4_form(fields[2]))
                by_inode[int(fields[9])] = (fields[3], ends)
                by_ends[ends] = int(fields[9])
    return by_inode, by_ends, cut


#: How ``/proc/net/tcp6`` shows an IPv4-mapped address (``::ffff:a.b.c.d``), before its IPv4 part.
_IPV4_MAPPED = b"0000000000000000FFFF0000"


def _ipv4_form(address: bytes) -> bytes:
    """A ``/proc/net`` table's address (hex, ``:port``), an IPv4-mapped one in the IPv4 form: a dual-stack
    listener's connection from ``127.0.0.1`` is in ``tcp6`` as ``::ffff:127.0.0.1``, its other end in ``tcp``;
    they were not found to be the two ends of one connection, and it was taken for one to another host."""
    return address[len(_IPV4_MAPPED):] if address.startswith(_IPV4_MAPPED) else address


def _pts_index(rdev: int) -> int | None:
    """The pts number of a device number, or None when it is not a pts."""
    major = os.major(rdev)
    return (major - 136) * 256 + os.minor(rdev) if rdev and major in _PTS_MAJORS else None


def _timed_call(line: str | None) -> tuple[str, list[int]] | None:
    """The syscall name and arguments of a thread's ``syscall`` line when it is one that can wait with a timeout
    (:data:`_TIMED`), or None (another syscall, or a line of another form: running, gone, ``"stopped"``)."""
    parts = line.split() if line else []
    try:
        name = _TIMED.get(int(parts[0]))
        return (name, [int(a, 16) for a in parts[1:7]]) if name is not None else None
    except (ValueError, IndexError):
        return None


def _pauses(name: str | None, args: list[int]) -> bool:
    """Whether timed wait ``name`` (with its syscall ``args``) is a pause: a sleep, or a select/poll on no fds
    (their count: select's first argument, poll's second)."""
    if name in ("select", "pselect6"):
        return args[0] == 0
    if name in ("poll", "ppoll"):
        return args[1] == 0
    return name in ("nanosleep", "clock_nanosleep")


def _timeout_of(pid: int, name: str, args: list[int]) -> tuple[int, bool, float] | None:
    """A timed wait's (clock, absolute, seconds) from its syscall arguments, or None for an untimed wait."""
    if name == "nanosleep":
        return _CLOCK_MONOTONIC, False, _timespec(pid, args[0])
    if name == "clock_nanosleep":
        return args[0], bool(args[1] & _TIMER_ABSTIME), _timespec(pid, args[2])
    if name == "futex":
        command = args[1] & _FUTEX_CMD_MASK
        if command not in (_FUTEX_WAIT, _FUTEX_WAIT_BITSET) or not args[3]:
            return None
        clock = _CLOCK_REALTIME if args[1] & _FUTEX_CLOCK_REALTIME else _CLOCK_MONOTONIC
        return clock, command == _FUTEX_WAIT_BITSET, _timespec(pid, args[3])
    index, kind = _TIMEOUT_ARG[name]
    value = args[index]
    if kind == "ms":
        millis = struct.unpack("i", struct.pack("I", value & 0xFFFFFFFF))[0]
        return (_CLOCK_MONOTONIC, False, millis / 1000) if millis >= 0 else None
    if not value:
        return None
    sec, frac = struct.unpack("qq", read_memory(pid, value, 16))
    return _CLOCK_MONOTONIC, False, sec + frac / (1e6 if kind == "tv" else 1e9)


def _deadline(clock: int, seconds: float, now: float) -> float | None:
    """An absolute wait's deadline ``seconds`` on ``clock`` as a ``time.monotonic()`` time (``now`` is that
    clock's reading), or None for a clock other than the monotonic and realtime ones."""
    if clock == _CLOCK_MONOTONIC:
        return seconds
    if clock == _CLOCK_REALTIME:
        return now + (seconds - time.time())
    return None


def _timespec(pid: int, address: int) -> float:
    sec, nsec = struct.unpack("qq", read_memory(pid, address, 16))
    return sec + nsec / 1e9

