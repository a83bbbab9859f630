"""The opt-in sandbox: a session's shell runs under bubblewrap (``bwrap``) with a seccomp filter.

Modes (config ``sandbox``):

* ``off`` - no sandbox (the default);
* ``workspace-write`` - the whole file system read-only except the workspace
  (the manager's ``workspace_root``, set by whoever configures the tools - not
  the ``cwd`` a model asks for) and a private ``/tmp``; the workspace's
  repositories (``.git``, ``.hg``, ``.jj``) stay read-only (version control
  runs their hooks and config outside);
* ``read-only`` - no writes at all except the private ``/tmp``.

In both modes the session gets its own pid namespace (its processes cannot
see or signal anything outside it, and when its init ends everything in it
ends, kernel death included), no network unless ``sandboxNetwork`` (then no
abstract Unix socket of the host: :func:`abstract_socket_scope`), and a
seccomp filter that refuses ``TIOCSTI``/``TIOCLINUX`` (keystroke injection
into a terminal).  ``/dev`` is the session's own (contained sessions' too): its
terminal shows there as ``/dev/console``, and the observed readiness knows it by
its node.  When the sandbox cannot be set up, opening the session fails with the
reason - it never runs unsandboxed.
"""
from __future__ import annotations

import glob
import os
import platform
import shlex
import shutil
import site
import stat
import struct
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from itertools import islice
from typing import Iterable, Literal, NamedTuple

from ..errors import BackendError
from .backends import REAPER_SCRIPT
from .process_tree import LANDLOCK_SCOPED_ABI, LeaderCap, landlock_abi, within_nproc_hard_limit

SandboxMode = Literal["off", "read-only", "workspace-write"]

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_IOCTL_NR = {"x86_64": 16, "aarch64": 29}
_USERFAULTFD_NR = {"x86_64": 323, "aarch64": 282}
#: ioctls that inject input into a terminal.
_DENIED_IOCTLS = (0x5412, 0x541C)  # TIOCSTI, TIOCLINUX
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO_EPERM = 0x00050000 | 1
#: Most host Unix sockets outside the masked directories a sandbox masks one by one (a bind mount each).
MAX_MASKED_SOCKETS = 4096
#: Most entries of the workspace looked at for repositories (``.git``, ``.hg``, ``.jj``) kept read-only.
MAX_REPOSITORY_LOOKS = 4096
#: How many directories down from the workspace repositories are looked for (``work/org/project/.git``: 2).
MAX_REPOSITORY_DEPTH = 4
#: Most entries of the user's home looked at for the directories that stay writable in it (see :func:`_home_kept`).
MAX_HOME_LOOKS = 1024


class Wrapped(NamedTuple):
    """A session's command as a sandbox runs it."""

    argv: list[str]
    #: Descriptors the command is given (the seccomp filter's).
    fds: list[int]
    #: Whether the leader enters a Landlock scope of its own abstract Unix sockets just before its exec
    #: (:func:`.process_tree.enter_abstract_socket_scope`).
    abstract_socket_scope: bool = False
    #: The cap on tasks the leader takes right before its exec (:mod:`.process_cap`).
    cap: LeaderCap | None = None
    #: Whether the namespace's init sets the task cap, in a user namespace of the session's own
    #: (:attr:`Sandbox.caps_in_namespace`, as the command was wrapped).
    caps_in_namespace: bool = False


@dataclass(frozen=True)
class Sandbox:
    """How to wrap a session's command.

    ``mode="off"`` with ``contain=False`` wraps nothing (containment by process
    tracking); ``contain=True`` alone gives the session its own pid namespace
    and nothing else (no file system, network or seccomp restrictions).
    """

    mode: SandboxMode = "off"
    network: bool = False
    contain: bool = False
    #: The most tasks (processes and threads) the session may run at once (None: no cap; see
    #: :mod:`.process_cap`).
    max_processes: int | None = None

    @property
    def wrapped(self) -> bool:
        return self.mode != "off" or self.contain

    @property
    def private_dev(self) -> bool:
        """Whether the session gets a /dev of its own (its terminal shows there as ``/dev/console``): sandboxed
        and contained sessions alike."""
        return self.wrapped

    def cwd_problem(self, cwd: str) -> str | None:
        """Why a session cannot start in directory ``cwd`` under this wrapping (None when it can): a wrapped
        session's /dev is its own, where the host's directories in /dev are not (bubblewrap failed to start
        the session there, which then showed as exited)."""
        if self.private_dev and _within(os.path.realpath(cwd), "/dev"):
            return (f"cwd {cwd!r} is in /dev, and this session's /dev is its own (the host's devices are not "
                    "there): pick a directory outside /dev")
        return None

    def describe(self) -> str:
        """One line for the session's motd: what confines and what contains the session."""
        if self.mode != "off":
            network = "network on" if self.network else "no network"
            return (f"sandbox: {self.mode} (bubblewrap, {network}, no TIOCSTI); containment: pid namespace - "
                    "everything the session starts ends with it")
        if self.contain:
            return "containment: pid namespace (bubblewrap) - everything the session starts ends with it"
        return "containment: process tracking (subreaper, start times, token)"

    def wrap(self, argv: list[str], cwd: str, workspace: str) -> Wrapped:
        """The command under bwrap, started in ``cwd``, with the seccomp filter's descriptor (and, with the
        network on, the abstract socket scope: :func:`abstract_socket_scope`).  ``workspace`` is the one
        directory ``workspace-write`` may write: a session opened in another ``cwd`` starts there read-only (a
        model choosing ``cwd: "~"`` got the user's home writable)."""
        if not self.wrapped:
            return Wrapped(argv, [])
        what = f"sandbox {self.mode!r}" if self.mode != "off" else "containment 'namespace'"
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise BackendError(f"{what} needs bubblewrap, which is not installed: install it "
                               "(Debian/Ubuntu: apt-get install bubblewrap) or turn it off")
        check_bwrap_works(bwrap)
        # (asked once: the argv and the leader's cap follow the same answer.  bubblewrap makes a user namespace
        # for a user who is not root anyway: said here, as the cap relies on it.)
        counted = self.caps_in_namespace
        own_user_namespace = ("--unshare-user",) if counted else ()
        # A private /dev (null, zero, random, tty, its own devpts for the ptys it opens, and this terminal as
        # /dev/console): the host's would let the session read and write other sessions' terminals - take the
        # notebook user's or another agent's keystrokes (a `cat /dev/pts/0` took their next command), write
        # into what they see - and raw disks, whatever the read-only binds say.  IPC of its own: System V shared
        # memory, semaphores and message queues of the user's other programs (a desktop's X clients share
        # their windows' pixels that way) are not there.
        if self.mode == "off":
            args = [bwrap, "--dev-bind", "/", "/", "--dev", "/dev", *_shared_devices("/dev"), *_PROC,
                    *_kernel_masks(cwd, workspace), *_contained_root_limits(), "--unshare-pid", "--unshare-ipc",
                    *own_user_namespace, "--as-pid-1", "--die-with-parent"]
            # (the sandbox's seccomp filter: no userfaultfd - see SHARED_DEVICES - nor keys typed into the terminal)
            filter_fds = [seccomp_filter_fd()] if platform.machine() in _AUDIT_ARCH else []
            for fd in filter_fds:
                args += ["--seccomp", str(fd)]
            return Wrapped([*args, "--chdir", cwd, "--", *self._init(counted), *argv], filter_fds,
                           caps_in_namespace=counted)
        # No capabilities (bubblewrap keeps root's): root could remount the read-only file system writable,
        # unmount the namespace's /proc to find the host's under it, or make a node for a raw disk.
        args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", *_PROC,
                "--tmpfs", "/tmp", "--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts",
                *own_user_namespace, "--die-with-parent", "--cap-drop", "ALL"]
        if not self.network:
            args.append("--unshare-net")
        masked = _runtime_directories()
        for path in masked:  # the host's daemons' sockets: empty there
            args += ["--tmpfs", path]
        if self.network:  # (DNS: resolv.conf may live in /run)
            args += [arg for path in _resolver_directories(masked) for arg in ("--ro-bind", path, path)]
        workspace, cwd = os.path.realpath(workspace), os.path.realpath(cwd)
        # What the private /tmp and the masks would hide: the program itself (a venv, this package), a cwd
        # outside the workspace (read-only, before the workspace: an ancestor of it must not cover its bind).
        hidden = _hidden(argv, [] if _within(cwd, workspace) else [cwd], ["/tmp", *masked])
        for path in hidden:
            args += ["--ro-bind", path, path]
        args += ["--bind" if self.mode == "workspace-write" else "--ro-bind", workspace, workspace]
        if self.mode == "workspace-write":
            args += _home_kept(workspace)
            # (after the home's: one may lie in it)
            for path in [*_kernel_environment(workspace), *_repository_directories(workspace, cwd)]:
                args += ["--ro-bind", path, path]
        for path in masked:  # (a workspace above them - the home directory, "/" - must not bring them back)
            if path != workspace and _within(path, workspace):
                args += ["--tmpfs", path]
        for path in _host_sockets(["/tmp", *masked], [*hidden, workspace]):  # (last: no bind may bring one back)
            args += ["--ro-bind", "/dev/null", path]
        # Its own network namespace has abstract sockets of its own; sharing the host's, it could reach the host's
        # (an X server's, a D-Bus bus's: where `systemd-run --user` starts anything outside the sandbox).
        scoped = self.network and abstract_socket_scope_works(bwrap)
        filter_fd = seccomp_filter_fd()  # (last: a refusal above leaves no descriptor behind)
        args += ["--seccomp", str(filter_fd), "--chdir", cwd, "--"]
        return Wrapped(args + [*self._init(counted), *argv], [filter_fd], scoped, caps_in_namespace=counted)

    @property
    def caps_in_namespace(self) -> bool:
        """Whether the session's task cap is counted in a user namespace of its own: a kernel that is not root,
        under a bubblewrap that makes one (any that is not setuid-root) - see :meth:`_init`."""
        return self.wrapped and self.max_processes is not None and os.getuid() != 0 and not _bwrap_is_setuid()

    def _init(self, caps_in_namespace: bool) -> tuple[str, ...]:
        """The namespace's init (:data:`_INIT`); for a capped session of a kernel that is not root, it first sets
        ``RLIMIT_NPROC`` to the cap.  The kernel counts that limit per user *namespace*: in the session's own,
        it counts the session's tasks alone.  Set outside, it counted all the user's tasks together, so a session
        that filled its cap left every session opened before it unable to fork (``sh: Cannot fork``).  (dash
        names it ``ulimit -p``, bash ``-u``; a shell that has neither fails the start, never leaves it
        uncapped.  A hard limit of the user's below the cap is the cap: it cannot be raised.)"""
        if not caps_in_namespace:
            return _INIT
        limit = within_nproc_hard_limit(self.max_processes or 0)
        tries = " || ".join(f"ulimit {flag} {limit}" for flag in NPROC_FLAGS)
        cap = f"{{ {tries}; }} 2>/dev/null || {{ echo {shlex.quote(INIT_FAILED)} >&2; exit 125; }}"
        return ("/bin/sh", "-c", f"{cap}; {REAPER_SCRIPT}", "sh")


def _bwrap_is_setuid() -> bool:
    """Whether the bubblewrap on ``PATH`` is setuid (old installs): it then makes no user namespace unless told
    to, and may be refused one - the cap stays on the user's tasks together (see :mod:`.process_cap`)."""
    bwrap = shutil.which("bwrap")
    try:
        return bwrap is not None and bool(os.stat(bwrap).st_mode & stat.S_ISUID)
    except OSError:
        return False


#: How shells name ``RLIMIT_NPROC`` to ``ulimit``: bash ``-u``, dash ``-p``.
NPROC_FLAGS = ("-u", "-p")
#: What the namespace's init says when it cannot set the session's cap; the open fails with it (see
#: :meth:`Sandbox._init`).
INIT_FAILED = ("the namespace's /bin/sh could not set the cap on the session's processes (it has neither "
               "ulimit -u nor ulimit -p): open sessions with the config's maxProcesses null (no cap)")


#: The namespace's init: a shell that runs the session's program as its child, reaps what is orphaned in the
#: namespace, and exits with the program's status (a death by a signal as 128 + its number; as :func:`reaped`).
#: bubblewrap's own init (without ``--as-pid-1``) was left a zombie for pid 1 at every session's end - its
#: monitor exits as soon as that init reports the command's end, before reaping it - and an init that does not
#: reap (in a container, often the notebook server itself) keeps those for ever.  The program itself as the
#: namespace's init would take no signal from inside that it does not catch (``kill -9 $$`` did nothing).
_INIT = ("/bin/sh", "-c", REAPER_SCRIPT, "sh")

#: The session's /proc: its pid namespace's, with the kernel's settings (``/proc/sys``) read-only.  bubblewrap
#: means to cover them but skips a directory its setup cannot write to, and root wrote them - even with no
#: capabilities, in the sandbox: ``kernel.core_pattern`` names a program the kernel runs as root, outside
#: every namespace, when a process crashes (``kernel.modprobe`` alike).  (The host's view, bound read-only:
#: a bind's source is a host path.)
_PROC = ("--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys")

#: What root keeps in a contained session (sandbox off), by bubblewrap's names and their bits: every
#: capability but those that reach past the namespace - mount and unmount (the host's ``/proc`` lies under
#: the namespace's: its kernel's environment, secrets included, was one ``umount -l /proc`` away), entering
#: other namespaces, kernel modules, raw memory and I/O (``/dev/mem``, ``/proc/kcore``), device nodes (a raw
#: disk's), opening files by handle past the masks, rebooting into another kernel, and the security modules'
#: policy.  Capabilities newer than these (``CAP_BPF``, ``CAP_PERFMON``: reading any process's memory) are
#: left out too, and names an older bubblewrap's libcap does not know are never asked for.
_CONTAINED_ROOT_CAPABILITIES = {
    "CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6, "SETUID": 7, "SETPCAP": 8,
    "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10, "NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13,
    "IPC_LOCK": 14, "IPC_OWNER": 15, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_PACCT": 20, "SYS_NICE": 23,
    "SYS_RESOURCE": 24, "SYS_TIME": 25, "SYS_TTY_CONFIG": 26, "LEASE": 28, "AUDIT_WRITE": 29,
    "AUDIT_CONTROL": 30, "SETFCAP": 31, "SYSLOG": 34, "WAKE_ALARM": 35, "BLOCK_SUSPEND": 36, "AUDIT_READ": 37}


#: The host's devices a contained session's private /dev shows (names in ``/dev``, shell patterns): GPUs and
#: other accelerators (NVIDIA's, DRM's render nodes, AMD's compute, the kernel's accel class and TPU VMs'
#: ``accel0``..., WSL's) and KVM - what an agent's work uses.  Nothing else: no terminal (``pts``, ``tty*``,
#: ``vcs*``: other sessions' keystrokes and screens), no block device (raw disks, swap), no input device (a
#: keylogger, or typing into the host's desktop through ``uinput``), no ``mem``, ``kmsg`` or ``watchdog``, and
#: no ``fuse`` or ``userfaultfd``: with either a program makes a page of its own memory wait on it for ever,
#: and whatever touches that page waits with it - a read of the terminal copying input there holds the
#: terminal's locks, and the loop's next look at the terminal (its unread input) waited for good.  (FUSE
#: worked there only in a user namespace of the session's own: ``no_new_privs`` keeps ``fusermount`` from
#: mounting, and root there may not mount.)
SHARED_DEVICES = ("nvidia*", "dri", "kfd", "accel*", "dxg", "kvm")


def _shared_devices(top: str) -> list[str]:
    """bwrap arguments binding :data:`SHARED_DEVICES` of ``top`` (the host's ``/dev``) into a private /dev."""
    args: list[str] = []
    for pattern in SHARED_DEVICES:
        for path in sorted(glob.glob(os.path.join(top, pattern))):
            if os.path.exists(path):  # (not a dangling symlink: bubblewrap would refuse to start)
                args += ["--dev-bind", path, os.path.join("/dev", os.path.basename(path))]
    return args


def _contained_root_limits() -> list[str]:
    """bwrap arguments that keep a contained session of a root kernel inside its namespace: the capabilities
    of :data:`_CONTAINED_ROOT_CAPABILITIES` the kernel has (bubblewrap asked for one it lacks - in a container,
    often ``CAP_SYS_RESOURCE`` - gives the session all of root's instead) and ``/sys`` read-only (its /dev is
    its own, with no block device: root reads a raw disk, or the swap device, by its file mode alone).  A
    kernel that is not root needs none of it: bubblewrap gives an unprivileged sandbox no capabilities, and
    the files' modes keep it out."""
    if os.getuid() != 0:
        return []
    held = _permitted_capabilities()
    args = ["--cap-drop", "ALL"]
    for name, bit in _CONTAINED_ROOT_CAPABILITIES.items():
        if held >> bit & 1:
            args += ["--cap-add", f"CAP_{name}"]
    # sysfs read-only: root writes it by file mode alone, and some of it names a program the kernel runs as root
    # outside every namespace (``/sys/kernel/uevent_helper``), or stops the machine (``/sys/power/state``).
    return [*args, "--ro-bind", "/sys", "/sys"]


def _permitted_capabilities() -> int:
    """This process's permitted capabilities (a bit mask; 0 when unknown)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("CapPrm:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return 0


#: The directories where version control keeps a repository's own files, hooks and config among them.
_REPOSITORY_DIRECTORIES = (".git", ".hg", ".jj")


def _home_kept(workspace: str) -> list[str]:
    """bwrap arguments for a workspace that holds the user's home directory (Jupyter started in ``~``): the
    home's top level stays read-only, bar its directories that are not hidden (and not ``~/bin``, which a
    login puts on ``PATH``).  What runs by itself outside the sandbox lives there - a sandboxed agent wrote
    ``~/.bashrc`` (run by the user's next shell) and an IPython startup file (run by their next kernel), and
    could have written ``~/.ssh/authorized_keys``, a ``.pth`` file under ``~/.local`` or a ``~/.bash_login``
    that did not exist yet.  New files go in those directories, not beside them."""
    home = os.path.realpath(os.path.expanduser("~"))
    if home == "/" or not _within(home, workspace) or not os.path.isdir(home):
        return []
    args = ["--ro-bind", home, home]
    try:
        with os.scandir(home) as entries:
            for entry in islice(entries, MAX_HOME_LOOKS):
                if entry.name[:1] != "." and entry.name != "bin" and entry.is_dir(follow_symlinks=False):
                    args += ["--bind", entry.path, entry.path]
    except OSError:
        pass
    return args


def _kernel_environment(workspace: str) -> list[str]:
    """The kernel's own Python environment where it lies in the workspace (a project's ``.venv`` that Jupyter
    runs from), which stays read-only there: a sandboxed agent wrote a ``.pth`` file into its site-packages,
    run by every Python started from it - the user's next kernel among them - outside the sandbox (and could
    have changed a module the running kernel imports later).  Its prefixes and site-packages directories."""
    candidates = {sys.prefix, sys.exec_prefix, sys.base_prefix, *site.getsitepackages()}
    if site.ENABLE_USER_SITE:
        candidates.add(site.getusersitepackages())
    reals = {os.path.realpath(path) for path in candidates if path and os.path.isdir(path)}
    return _outermost(path for path in reals if _within(path, workspace) and path != workspace)


def _repository_directories(workspace: str, cwd: str) -> list[str]:
    """The repositories' own files in the workspace, which stay read-only in it: version control runs what
    they hold outside the sandbox - a git hook written there runs at the user's next commit, a
    ``core.fsmonitor`` command in a repository's config at their next ``git status`` (Mercurial's hooks and
    jj's configured commands alike).  Looked for: the ``.git``, ``.hg`` and ``.jj`` of the workspace, of each
    directory from it down to ``cwd``, and of its directories :data:`MAX_REPOSITORY_DEPTH` levels down (a
    folder of repositories, an organisation's folders of them), nearest first, at most
    :data:`MAX_REPOSITORY_LOOKS` entries looked at; a ``.git`` file (a worktree, a submodule) and the
    directory it names, when that is in the workspace."""
    candidates = _repositories_below(workspace)
    place = cwd
    while _within(place, workspace) and place != workspace:
        candidates.update(path for name in _REPOSITORY_DIRECTORIES
                          if os.path.lexists(path := os.path.join(place, name)))
        place = os.path.dirname(place)
    found: set[str] = set()
    for repository in candidates:
        found.add(os.path.realpath(repository))
        if repository.endswith("/.git") and os.path.isfile(repository):  # (it names the repository's directory)
            named = _named_git_directory(repository)
            if named is not None and _within(named, workspace) and os.path.isdir(named):
                found.add(named)
    return sorted(path for path in found if _within(path, workspace))


def _repositories_below(top: str) -> set[str]:
    """The ``.git``, ``.hg`` and ``.jj`` entries of ``top`` and of its directories :data:`MAX_REPOSITORY_DEPTH`
    levels down, nearest first, until :data:`MAX_REPOSITORY_LOOKS` entries have been looked at (symlinked
    directories not followed, repositories' own directories not entered)."""
    found: set[str] = set()
    queue, looks = deque([(top, 0)]), MAX_REPOSITORY_LOOKS
    while queue and looks > 0:
        directory, depth = queue.popleft()
        try:
            with os.scandir(directory) as entries:
                for entry in islice(entries, looks):
                    looks -= 1
                    if entry.name in _REPOSITORY_DIRECTORIES:
                        found.add(entry.path)
                    elif depth < MAX_REPOSITORY_DEPTH and entry.is_dir(follow_symlinks=False):
                        queue.append((entry.path, depth + 1))
        except OSError:
            continue
    return found


def _named_git_directory(git_file: str) -> str | None:
    """The directory a ``.git`` file names (``gitdir: PATH``, relative to the file's directory), or None."""
    try:
        with open(git_file, encoding="utf-8", errors="replace") as file:
            line = file.readline(4096).strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    return os.path.realpath(os.path.join(os.path.dirname(git_file), line[len("gitdir:"):].strip()))


def _runtime_directories() -> list[str]:
    """Where the host's services listen on Unix sockets, which a read-only bind leaves open to ``connect``
    (write permission on a socket is not a file system write): ``/run`` (the D-Bus session bus - where
    ``systemd-run --user`` starts anything, outside the sandbox -, Docker's socket, the system bus) and the
    user's runtime directory wherever ``XDG_RUNTIME_DIR`` puts it (ssh and gpg agents, Wayland); and Jupyter's
    (see :func:`_kernel_connection_directories`).  Each gets an empty ``tmpfs`` in the sandbox.  ``/tmp`` is
    private already; sockets elsewhere are masked one by one (:func:`_host_sockets`)."""
    found: list[str] = []
    tmp = os.path.realpath("/tmp")
    for path in ("/run", "/var/run", os.environ.get("XDG_RUNTIME_DIR", ""), *_kernel_connection_directories()):
        if path and os.path.isabs(path) and os.path.isdir(path) and not os.path.islink(path):
            real = os.path.realpath(path)
            if not any(_within(real, other) for other in [*found, tmp]):
                found.append(real)
    return found


def _host_sockets(masked: list[str], bound: list[str]) -> list[str]:
    """The Unix sockets bound on the host to a path the sandbox shows - outside the ``masked`` directories,
    or in a directory ``bound`` back in -, as the kernel lists them (``/proc/net/unix``): a read-only bind
    leaves them open to ``connect`` too.  The runtime directories hold most daemons' sockets; these are the
    rest - a gpg agent in ``~/.gnupg``, ssh's shared connections, Docker Desktop's socket under the home
    directory, LXD's in ``/var/snap``.  Each gets ``/dev/null`` bound over it in the sandbox (a ``connect``
    there is refused).  A socket bound after the session opened is not covered."""
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="surrogateescape") as listing:
            lines = listing.read().splitlines()[1:]
    except OSError:
        return []
    roots = [os.path.realpath(path) for path in masked]
    shown = [os.path.realpath(path) for path in bound]
    found: set[str] = set()
    for line in lines:
        fields = line.split(None, 7)
        if len(fields) < 8 or not fields[7].startswith("/"):
            continue  # (unnamed, or abstract: those are the network namespace's, private to the sandbox)
        path = os.path.realpath(fields[7])
        if path in found or not _shown_in_sandbox(path, roots, shown):
            continue
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                found.add(path)
        except (OSError, ValueError):
            continue  # (gone since it was bound, or a name no file system holds)
    if len(found) > MAX_MASKED_SOCKETS:
        raise BackendError(f"the sandbox cannot be set up: the host has {len(found)} Unix sockets outside /run "
                           f"and /tmp (at most {MAX_MASKED_SOCKETS} can be masked); set sandbox to 'off'")
    return sorted(found)


def _shown_in_sandbox(path: str, masked: list[str], bound: list[str]) -> bool:
    """Whether ``path`` shows in the sandbox: no ``masked`` directory holds it, or a directory ``bound``
    back in holds it more closely than any (the deepest mount over a path is the one seen)."""
    mask = max((len(root) for root in masked if _within(path, root)), default=-1)
    return mask < 0 or max((len(directory) for directory in bound if _within(path, directory)), default=-1) > mask


def _kernel_connection_directories() -> list[str]:
    """Where Jupyter keeps kernels' connection files (their ports and signing keys): with the network on, a
    sandboxed session that read this kernel's could run code in it, outside the sandbox."""
    runtime, connection_file = _jupyter_runtime_directory(), _kernel_connection_file()
    return [path for path in (runtime, connection_file and os.path.dirname(connection_file)) if path]


def _jupyter_runtime_directory() -> str | None:
    """Jupyter's runtime directory: the connection files of the kernels a Jupyter server started, and the
    server's own files (its URL and token)."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir
        return os.path.abspath(jupyter_runtime_dir())
    except Exception:  # (no jupyter_core, or a broken configuration: nothing to mask)
        return None


def _kernel_connection_file() -> str | None:
    """This kernel's connection file, when this process is an IPython kernel."""
    kernel = sys.modules.get("ipykernel.kernelapp")
    app = getattr(kernel, "IPKernelApp", None)
    if app is not None and app.initialized():
        return os.path.abspath(app.instance().abs_connection_file)
    return None


def _kernel_masks(cwd: str, workspace: str) -> list[str]:
    """bwrap arguments that hide Jupyter's connection files from a session that shares the kernel's file
    system and network (containment only): one that read them could run code in a kernel - and there read
    its secret variables, or call the tools as any agent.  Jupyter's runtime directory gets an empty
    ``tmpfs`` (its kernels' and servers' files, those written later too), or, when the session works in it
    or it is ``/tmp`` or ``/``, each such file ``/dev/null``; this kernel's own connection file, wherever it
    is (``/tmp`` when a ``KernelManager`` started it), ``/dev/null``."""
    args: list[str] = []
    cwd, workspace = os.path.realpath(cwd), os.path.realpath(workspace)
    runtime = _jupyter_runtime_directory()
    hidden = None
    if runtime is not None and os.path.isdir(runtime):
        runtime = os.path.realpath(runtime)
        if runtime in ("/", os.path.realpath("/tmp")) or _within(cwd, runtime) or _within(workspace, runtime):
            for pattern in ("kernel-*.json", "jpserver-*", "nbserver-*"):
                for path in glob.glob(os.path.join(glob.escape(runtime), pattern)):
                    args += ["--ro-bind", "/dev/null", path]
        else:
            args += ["--tmpfs", runtime]
            hidden = runtime
    connection_file = _kernel_connection_file()
    if connection_file is not None and os.path.isfile(connection_file):
        connection_file = os.path.realpath(connection_file)
        if hidden is None or not _within(connection_file, hidden):
            args += ["--ro-bind", "/dev/null", connection_file]
    return args


def _resolver_directories(masked: list[str]) -> list[str]:
    """The directory of ``/etc/resolv.conf``'s target when it lies in a ``masked`` runtime directory
    (systemd-resolved's stub), so that a sandbox with network access still resolves names."""
    target = os.path.realpath("/etc/resolv.conf")
    return [os.path.dirname(target)] if os.path.exists(target) and any(_within(target, m) for m in masked) else []


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _hidden(argv: list[str], directories: list[str], masked: list[str]) -> list[str]:
    """Directories the command needs that lie under a ``masked`` one (which the sandbox replaces: ``/tmp``,
    the runtime directories): the directories of absolute paths in ``argv`` (an rc file, an interpreter),
    this interpreter's prefixes and ``directories``."""
    candidates = {os.path.dirname(a) for a in argv if os.path.isabs(a) and os.path.exists(a)} | set(directories)
    candidates |= {sys.prefix, sys.base_prefix, sys.exec_prefix}
    roots = [os.path.realpath(m) for m in masked]
    reals = {os.path.realpath(c) for c in candidates if os.path.isdir(c)}
    return _outermost(p for p in reals if any(p != r and _within(p, r) for r in roots))


def _outermost(paths: Iterable[str]) -> list[str]:
    """``paths``, sorted, without those that lie in another of them (one bind covers what is below it)."""
    found = sorted(set(paths))
    return [p for p in found if not any(p != q and _within(p, q) for q in found)]


def abstract_socket_scope_works(bwrap: str) -> bool:
    """Whether a session's leader can enter a Landlock domain scoped to its own abstract Unix sockets before it
    execs ``bwrap`` (:func:`.process_tree.enter_abstract_socket_scope`; inherited by everything the session
    starts): the kernel has such scopes (Linux 6.12) and ``bwrap`` is not setuid (the step sets
    ``no_new_privs``, which a setuid program loses its rights under).  Sharing the host's network namespace
    (``sandboxNetwork``), a session reached every abstract socket of the host."""
    return landlock_abi() >= LANDLOCK_SCOPED_ABI and not os.stat(bwrap).st_mode & stat.S_ISUID


def seccomp_filter_fd() -> int:
    """A pipe's read end holding the compiled filter (what ``bwrap --seccomp FD`` reads)."""
    machine = platform.machine()
    if machine not in _AUDIT_ARCH:
        raise BackendError(f"the sandbox's seccomp filter is not available on {machine}: set sandbox to 'off'")
    program = seccomp_program(_AUDIT_ARCH[machine], _IOCTL_NR[machine], _USERFAULTFD_NR[machine])
    read_end, write_end = os.pipe()
    os.write(write_end, program)
    os.close(write_end)
    os.set_inheritable(read_end, True)
    return read_end


def seccomp_program(audit_arch: int, ioctl_nr: int, userfaultfd_nr: int) -> bytes:
    """Classic BPF: refuse ``ioctl(fd, TIOCSTI | TIOCLINUX, …)`` and ``userfaultfd`` with EPERM (see
    :data:`SHARED_DEVICES`: a root kernel's contained session keeps ``CAP_SYS_PTRACE``, which lets it handle
    the kernel's own faults on its pages), allow everything else."""
    ld_w_abs, jeq_k, ret_k = 0x20, 0x15, 0x06
    denied = len(_DENIED_IOCTLS)
    insns = [
        (ld_w_abs, 0, 0, 4),                       # A = seccomp_data.arch
        (jeq_k, 0, 4 + denied, audit_arch),        # another architecture: allow
        (ld_w_abs, 0, 0, 0),                       # A = seccomp_data.nr
        (jeq_k, 3 + denied, 0, userfaultfd_nr),    # userfaultfd: EPERM
        (jeq_k, 0, 1 + denied, ioctl_nr),          # not ioctl: allow
        (ld_w_abs, 0, 0, 24),                      # A = low word of args[1] (the request)
    ]
    for index, request in enumerate(_DENIED_IOCTLS):
        insns.append((jeq_k, denied - index, 0, request))  # a denied request: jump to the EPERM return
    insns += [(ret_k, 0, 0, _SECCOMP_RET_ALLOW), (ret_k, 0, 0, _SECCOMP_RET_ERRNO_EPERM)]
    return b"".join(struct.pack("HBBI", *insn) for insn in insns)


_WORKS: dict[str, str] = {}


def check_bwrap_works(bwrap: str) -> None:
    """Run bwrap once (cached) so a machine that forbids its namespaces gets the reason at open.

    ``--as-pid-1``, as the sessions have it: bubblewrap's own init would be left behind, an orphan for the
    machine's init to reap (a container's often does not)."""
    if bwrap not in _WORKS:
        try:
            out = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--as-pid-1", "--unshare-net",
                                  "--", "true"],
                                 capture_output=True, text=True, timeout=20)
            _WORKS[bwrap] = "" if out.returncode == 0 else (out.stderr.strip() or f"exit status {out.returncode}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            _WORKS[bwrap] = str(exc)
    if _WORKS[bwrap]:
        raise BackendError(f"the sandbox cannot be set up on this machine: bwrap fails ({_WORKS[bwrap]}); "
                           "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 or "
                           "the AppArmor userns restriction) or set sandbox to 'off'")


def sandbox_problem() -> str | None:
    """Why the sandbox cannot be used on this machine (None when it can)."""
    try:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise BackendError("bubblewrap (bwrap) is not installed")
        check_bwrap_works(bwrap)
    except BackendError as exc:
        return str(exc)
    return None
