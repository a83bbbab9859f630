"""A cap on the tasks (processes and threads) a session may run at once: ``maxProcesses`` for agents' sessions.

A fork bomb (``:(){ :|:& };:``) typed into one session took all 32768 pids of the machine in under 5 s:
every program of every user - the notebook server, this kernel's own threads - then failed to fork, and the
close that ended it took 11 s (the kernel ending 30,000 processes).  The cap stops it inside the session:

- a **pids cgroup** of the session's own (``pids.max``), inside one of this kernel's that holds all its capped
  sessions together to half the machine's pids (:func:`kernel_share`), where this process may make them: in
  cgroup v1's pids hierarchy, or in v2 where the pids controller reaches its cgroup's children (the root
  cgroup; a delegated subtree).  The leader joins it right before its exec, so everything it starts is in it
  whatever it does to its parent links or namespaces;
- else, for a user who is not root, ``RLIMIT_NPROC``.  The kernel counts it per user namespace.  In a
  session with a namespace of its own (bubblewrap's containment or sandbox), the namespace's init sets it to
  the cap there, which counts the session's tasks alone (see :meth:`.sandbox.Sandbox._init`); the leader's, which
  the namespace is made under, is what the user runs at the open plus this kernel's share
  (:func:`kernel_share`), which bounds the user's tasks in all.  Without a namespace (process tracking) the
  leader's is the user's tasks at the open plus the cap: that keeps the machine and this kernel (whose own limit
  is unchanged) able to fork, not the session's neighbours of the same user;
- else (root, with no pids cgroup to make: root ignores ``RLIMIT_NPROC``) nothing - the session's motd says so.

And capped sessions share one cgroup of the kernel's in cgroup v1's cpu hierarchy (:func:`_kernel_cpu_cgroup`),
so that all together they weigh as one program against the kernel, whatever their processes do.

Everything here runs off the loop (it asks the file system), except :meth:`ProcessCap.remove`, which is one
``rmdir`` on the cgroup file system.
"""
from __future__ import annotations

import atexit
import errno
import os
import threading
from typing import Callable, NamedTuple

from ..errors import TerminalError
from .process_tree import LeaderCap, read_proc, within_nproc_hard_limit, write_control

#: Prefix of this kernel's pids cgroup (``dsh-terminal-<pid>``), which holds a cgroup for each capped session.
KERNEL_CGROUP_PREFIX = "dsh-terminal-"
#: The least the kernel's share is, whatever the machine's pid space (see :func:`kernel_share`).
MIN_KERNEL_SHARE = 1024


class _Hierarchy(NamedTuple):
    """This process's own pids cgroup: its directory and the cgroup version."""

    directory: str
    version: int


class ProcessCap:
    """One session's cap: made (:meth:`make`) in the spawner thread right before the spawn, which its leader
    then takes; said in the motd (:meth:`describe`); its cgroup removed with the session (:meth:`remove`)."""

    def __init__(self, limit: int, name: str) -> None:
        self.limit = limit
        #: The cgroup's name (unique among this kernel's sessions: the session id).
        self.name = name
        #: The session's own pids cgroup directory, once made (None without one).
        self.cgroup: str | None = None
        #: The ``RLIMIT_NPROC`` the leader takes (None without one).
        self.nproc: int | None = None
        #: Whether the session's init sets the cap in the session's own user namespace (``RLIMIT_NPROC``).
        self.in_namespace = False

    def make(self, in_namespace: bool = False) -> LeaderCap | None:
        """Make the cap (off the loop): the session's cgroup where one can be made, else the ``RLIMIT_NPROC``
        of a user who is not root; returns what the leader takes (None: nothing - not enforced).  A cgroup
        found usable that then refuses the session's raises :class:`TerminalError`: never silently uncapped.
        ``in_namespace``: the session's init sets the cap in a user namespace of the session's own
        (:attr:`.sandbox.Sandbox.caps_in_namespace`)."""
        kernel = _kernel_cgroup()
        if kernel is not None:
            directory = os.path.join(kernel, self.name)
            try:
                os.mkdir(directory)
                try:
                    write_control(os.path.join(directory, "pids.max"), str(self.limit).encode())
                except OSError:
                    os.rmdir(directory)
                    raise
            except OSError as exc:
                raise TerminalError(f"could not make the pids cgroup that caps the session's processes ({exc}): "
                                    "open it with the config's maxProcesses null (no cap), or mend the cgroup "
                                    "file system") from None
            self.cgroup = directory
        elif os.getuid() != 0:
            self.in_namespace = in_namespace
            self.nproc = within_nproc_hard_limit(_user_tasks(os.getuid()) + (kernel_share() if in_namespace
                                                                               else self.limit))
        cpu = _kernel_cpu_cgroup()
        if self.cgroup is not None and os.path.dirname(self.cgroup) == cpu:
            cpu = None  # (one hierarchy for both: the session's cgroup is inside the kernel's already)
        joins = tuple(os.path.join(group, "cgroup.procs") for group in (self.cgroup, cpu) if group is not None)
        return LeaderCap(joins, self.nproc) if joins or self.nproc is not None else None

    def describe(self) -> str:
        """One line for the session's motd."""
        if self.cgroup is not None:
            return f"processes: at most {self.limit} processes and threads at once (a pids cgroup)"
        if self.nproc is not None and self.in_namespace:
            return (f"processes: at most {within_nproc_hard_limit(self.limit)} processes and threads at once "
                    f"(RLIMIT_NPROC in the session's user namespace; this user's at most {self.nproc} in all)")
        if self.nproc is not None:
            return (f"processes: at most {self.nproc} processes and threads of this user at once ({self.limit} more "
                    "than it ran at the open; RLIMIT_NPROC)")
        return (f"processes: not capped (maxProcesses {self.limit}: root ignores RLIMIT_NPROC, and this process may "
                "make no pids cgroup here)")

    def remove(self) -> bool:
        """Remove the session's cgroup once its processes are gone; False while some still are (an exiting
        task may hold it for a moment: try again later)."""
        if self.cgroup is None:
            return True
        try:
            os.rmdir(self.cgroup)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                return False
        self.cgroup = None
        return True


def kernel_share() -> int:
    """The most tasks all this kernel's capped sessions may run together: half of what the machine allows
    (``pid_max``, ``threads-max``), so that one kernel's agents can never take all of it."""
    limits = []
    for path in ("/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"):
        try:
            with open(path, "rb") as value:
                limits.append(int(value.read()))
        except (OSError, ValueError):
            pass
    return max(MIN_KERNEL_SHARE, min(limits, default=2 * MIN_KERNEL_SHARE) // 2)


_kernel_lock = threading.Lock()
#: This kernel's cgroups by hierarchy (``pids``, ``cpu``) once looked for (``""``: none can be made there).
#: A forked child starts afresh: its sessions are its own, in cgroups named for its pid.
_kernel_directories: dict[str, str] = {}


def _forget_in_child() -> None:
    global _kernel_lock
    _kernel_lock = threading.Lock()  # (another thread may have held it at the fork)
    _kernel_directories.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _kernel_directory(hierarchy: str, make: Callable[[], str | None]) -> str | None:
    with _kernel_lock:
        if hierarchy not in _kernel_directories:
            _kernel_directories[hierarchy] = make() or ""
        return _kernel_directories[hierarchy] or None


def _kernel_cgroup() -> str | None:
    """This kernel's pids cgroup (made at the first capped open, with :func:`kernel_share` as its cap, after
    removing what kernels that are gone left behind), or None where this process can make none."""
    return _kernel_directory("pids", _make_kernel_cgroup)


def _kernel_cpu_cgroup() -> str | None:
    """This kernel's cgroup in cgroup v1's cpu hierarchy (made at the first capped open), or None.

    All agents' sessions of the kernel share it, so that together they weigh as one program against the
    kernel: a session whose 100 spinning processes each called ``setsid`` (each its own autogroup, which the
    scheduler shares the CPU between) slowed the kernel's own Python 48-fold and another session's
    ``echo hi`` from 0.4 to 48 ms.  (Under v2 the sessions' pids cgroups are inside the kernel's, which the
    cpu controller weighs as one wherever it is on for the kernel's cgroup's children.)"""
    def make() -> str | None:
        parent = _own_v1_cgroup("cpu")
        return _make_kernel_directory(parent) if parent is not None else None
    return _kernel_directory("cpu", make)


def _own_v1_cgroup(controller: str) -> str | None:
    """This process's cgroup directory in cgroup v1's ``controller`` hierarchy, if it may make cgroups there."""
    memberships = _memberships()
    for mount_point, root, fstype, options in _cgroup_mounts():
        if fstype == "cgroup" and controller in options and controller in memberships:
            directory = _inside(mount_point, root, memberships[controller])
            if directory is not None and os.access(directory, os.W_OK):
                return directory
    return None


def _make_kernel_directory(parent: str) -> str | None:
    """``dsh-terminal-<pid>`` in ``parent`` (what kernels that are gone left there removed first), removed at
    exit; None when it cannot be made."""
    _remove_left_behind(parent)
    directory = os.path.join(parent, f"{KERNEL_CGROUP_PREFIX}{os.getpid()}")
    try:
        os.mkdir(directory)
    except FileExistsError:
        pass
    except OSError:
        return None
    atexit.register(_remove_at_exit, directory, os.getpid())
    return directory


def _make_kernel_cgroup() -> str | None:
    hierarchy = _own_pids_cgroup()
    if hierarchy is None:
        return None
    directory = _make_kernel_directory(hierarchy.directory)
    if directory is None:
        return None
    try:
        write_control(os.path.join(directory, "pids.max"), str(kernel_share()).encode())
        if hierarchy.version == 2:  # (the sessions' cgroups below it get pids.max only so)
            write_control(os.path.join(directory, "cgroup.subtree_control"), b"+pids")
    except OSError:
        _rmdir_quietly(directory)
        return None
    return directory


def _own_pids_cgroup() -> _Hierarchy | None:
    """The directory of this process's pids cgroup, if it may make cgroups below it that have ``pids.max``:
    cgroup v1's pids hierarchy, else v2 where the pids controller reaches the children (switched on at the
    root cgroup, where that is allowed)."""
    v1 = _own_v1_cgroup("pids")
    if v1 is not None:
        return _Hierarchy(v1, 1)
    memberships = _memberships()
    for mount_point, root, fstype, _ in _cgroup_mounts():
        if fstype == "cgroup2" and "" in memberships:
            directory = _inside(mount_point, root, memberships[""])
            if directory is not None and _v2_reaches_children(directory, memberships[""] == "/"):
                return _Hierarchy(directory, 2)
    return None


def _v2_reaches_children(directory: str, is_root: bool) -> bool:
    if not (os.access(directory, os.W_OK) and os.access(os.path.join(directory, "cgroup.procs"), os.W_OK)):
        return False
    if b"pids" in (read_proc(os.path.join(directory, "cgroup.subtree_control")) or b"").split():
        return True
    if not is_root or b"pids" not in (read_proc(os.path.join(directory, "cgroup.controllers")) or b"").split():
        return False  # (a cgroup with processes of its own may not switch controllers on for its children)
    try:
        write_control(os.path.join(directory, "cgroup.subtree_control"), b"+pids")
    except OSError:
        return False
    return True


def _memberships() -> dict[str, str]:
    """This process's cgroup path by controller (v1), and under ``""`` its v2 path."""
    found: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as lines:
            for line in lines:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    found[controller] = path
    except (OSError, ValueError):
        pass
    return found


def _cgroup_mounts() -> list[tuple[str, str, str, set[str]]]:
    """The cgroup file systems mounted here: (mount point, root inside the hierarchy, type, super options)."""
    mounts = []
    try:
        with open("/proc/self/mountinfo") as lines:
            for line in lines:
                fields = line.split()
                tail = fields[fields.index("-") + 1:]
                if tail and tail[0] in ("cgroup", "cgroup2"):
                    mounts.append((_unescape(fields[4]), _unescape(fields[3]), tail[0], set(tail[2].split(","))))
    except (OSError, ValueError, IndexError):
        pass
    return mounts


def _inside(mount_point: str, root: str, path: str) -> str | None:
    """Where cgroup ``path`` is under a hierarchy mounted at ``mount_point`` from ``root`` (None: not there)."""
    if root != "/" and path != root and not path.startswith(root.rstrip("/") + "/"):
        return None
    relative = path[len(root):] if root != "/" else path
    return os.path.join(mount_point, relative.lstrip("/"))


def _unescape(field: str) -> str:
    """A mountinfo path field (spaces and the like come as octal escapes)."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def _remove_left_behind(directory: str) -> None:
    """Remove the cgroups of this package's kernels that are gone (a kernel killed before it could): only
    empty ones go, which a live process never leaves."""
    try:
        names = [name for name in os.listdir(directory) if name.startswith(KERNEL_CGROUP_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(KERNEL_CGROUP_PREFIX):]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        kernel = os.path.join(directory, name)
        try:
            sessions = [entry.path for entry in os.scandir(kernel) if entry.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for session in sessions:
            _rmdir_quietly(session)
        _rmdir_quietly(kernel)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _user_tasks(uid: int) -> int:
    """How many tasks (threads) the processes of ``uid`` run now, counted as ``RLIMIT_NPROC`` counts them."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid == uid:
                count += len(os.listdir(f"/proc/{name}/task"))
        except OSError:
            pass  # (gone meanwhile)
    return count


def _remove_at_exit(directory: str, maker: int) -> None:
    """At exit, the kernel's cgroup (empty by then), by the process that made it - not a forked child of it
    leaving (``multiprocessing``), which took it from under the kernel's next open."""
    if os.getpid() == maker:
        _rmdir_quietly(directory)


def _rmdir_quietly(directory: str) -> None:
    try:
        os.rmdir(directory)
    except OSError:
        pass
