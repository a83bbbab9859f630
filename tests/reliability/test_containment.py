"""Escapes: nothing an agent's session starts outlives it - whatever it does to its parent links, its
environment or the watchdog.  The checker looks for each process by a unique marker in its argv, in
/proc, independently of the mechanism under test."""
from __future__ import annotations

import ctypes
import glob
import json
import os
import platform
import secrets
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from dsh_terminal_magics import Agent, TerminalError, TerminalTools
from dsh_terminal_magics.tools import sandbox_problem
from tests.conftest import wait_for

pytestmark = pytest.mark.skipif(sandbox_problem() is not None and not os.environ.get("CI"),
                                reason="namespace containment needs bubblewrap (CI installs it)")


def running_with(marker: str) -> list[int]:
    """Pids with a thread that still runs code (not a zombie) and whose argv holds ``marker``.

    Read per thread: a thread-group leader that called ``pthread_exit`` shows an empty cmdline of its own
    while its other threads (sharing the argv) run on."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            tids = os.listdir(f"/proc/{name}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{name}/task/{tid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                with open(f"/proc/{name}/task/{tid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if state not in "ZX" and marker.encode() in cmdline:
                found.append(int(name))
                break
    return found


@pytest.fixture
def contained():
    tools = TerminalTools()
    agent = Agent("escape-artist")
    opened = tools.call("terminal_open", {"type": "shell"}, agent=agent)
    assert "containment: pid namespace" in opened.motd
    yield tools, agent, opened.session_id
    tools.shutdown()


def send(tools, agent, sid, text, **extra):
    return tools.call("terminal_send", {"sessionId": sid, "text": text, **extra}, agent=agent)


ZOMBIE_LEADER = textwrap.dedent("""
    import ctypes, signal, sys, threading, time
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    def work():
        while True:
            time.sleep(0.05)
    threading.Thread(target=work).start()
    ctypes.CDLL(None).pthread_exit(None)
""")

CLONE_PARENT = textwrap.dedent("""
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    nr = {"x86_64": 56, "aarch64": 220}[__import__("platform").machine()]
    pid = libc.syscall(nr, 0x8000 | 17, 0, 0, 0, 0)  # clone(CLONE_PARENT | SIGCHLD)
    if pid == 0:
        for sig in (1, 2, 15):  # SIGHUP, SIGINT, SIGTERM stay ignored across exec
            __import__("signal").signal(sig, __import__("signal").SIG_IGN)
        os.execv("/bin/sleep", ["sleep", sys.argv[1]])
    time.sleep(1000)
""")


def test_a_zombie_leader_with_a_live_thread_is_ended(contained, tmp_path):
    tools, agent, sid = contained
    marker = f"zombie-{secrets.token_hex(4)}"
    script = tmp_path / "zombie.py"
    script.write_text(ZOMBIE_LEADER)
    send(tools, agent, sid, f"{sys.executable} {script} {marker} &")
    wait_for(lambda: running_with(marker))
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)
    assert running_with(marker) == []


def test_an_orphan_without_the_token_after_the_shell_exited(contained):
    tools, agent, sid = contained
    marker = f"{1000 + secrets.randbelow(1000)}.{secrets.randbelow(10**6)}"
    r = send(tools, agent, sid, f"setsid -f env -i sleep {marker} >/dev/null 2>&1; exit")
    assert r.wait_reason == "session_exit"
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)
    assert running_with(f"sleep\0{marker}") == []


def test_root_cannot_reach_past_the_namespace(contained):
    """A root kernel's contained session kept all of root's capabilities: ``umount -l /proc`` showed the host's
    /proc under the namespace's, and with it every process's environment (the kernel's secrets); root read
    raw disks by their mode.  Now mounts, unmounts and device nodes are refused, and no block device is
    there (its /dev is its own)."""
    tools, agent, sid = contained
    secret = f"dsh-secret-{secrets.token_hex(8)}"
    holder = subprocess.Popen(["sleep", "60"], env={**os.environ, "PLANTED_TOKEN": secret})
    try:
        r = send(tools, agent, sid, f"umount -l /proc; mount -t proc proc /mnt; mknod /tmp/disk b 8 0; "
                                    f"grep -l -a {secret} /proc/*/environ /mnt/*/environ 2>/dev/null; echo done")
        assert r.wait_reason == "stdin_read" and r.viewport.rstrip().endswith("done\n$"), r.viewport
        assert not any(line.endswith("/environ") for line in r.viewport.splitlines()), r.viewport
        disks = [path for path in glob.glob("/dev/*") + glob.glob("/dev/mapper/*")
                 if stat.S_ISBLK(os.stat(path, follow_symlinks=False).st_mode)]
        for path in disks[:8]:
            r = send(tools, agent, sid, f"head -c 16 {path} 2>/dev/null | wc -c")
            assert r.viewport.splitlines()[1].strip() == "0", (path, r.viewport)
    finally:
        holder.kill()
        holder.wait()
    r = send(tools, agent, sid, "cat /etc/hostname > /dev/null && echo fine")  # root still reads and writes
    assert "fine" in r.viewport.splitlines()[1]
    # kernel.core_pattern names a program the kernel runs as root outside every namespace when a process
    # crashes: root wrote it from a contained session (and from the sandbox).  The same value is written back,
    # so a failing check changes nothing.
    r = send(tools, agent, sid, "p=$(cat /proc/sys/kernel/core_pattern); echo \"$p\" > /proc/sys/kernel/core_pattern; "
                                "echo rc=$?; cat /proc/sys/kernel/ostype")
    assert "rc=1" in r.viewport and "Linux" in r.viewport, r.viewport
    assert "Read-only file system" in r.viewport or os.getuid() != 0, r.viewport
    # sysfs too (/sys/kernel/uevent_helper names a program the kernel runs as root on a device event).
    r = send(tools, agent, sid, "awk '$5 == \"/sys\" {print $6}' /proc/self/mountinfo | tail -1")  # (the top one)
    assert r.viewport.splitlines()[1].startswith("ro,") or os.getuid() != 0, r.viewport



def test_a_contained_session_cannot_reach_other_terminals():
    """A contained session had the host's /dev: an agent's `cat /dev/pts/0` took the notebook user's next
    command (a password typed for ssh as readily), and `echo > /dev/pts/N` wrote into another agent's screen.
    Its /dev is now its own: its terminal is /dev/console there, a devpts of its own serves the ptys it opens,
    and of the host's devices only accelerators, KVM and FUSE are there (no terminal, disk or input device)."""
    user, agent, other = Agent("notebook user"), Agent("intruder"), Agent("other")
    tools = TerminalTools(user=user)
    try:
        _intrude(tools, user, agent, other)
    finally:
        tools.shutdown()


def _intrude(tools, user, agent, other):
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    mine = tools.call("terminal_open", {"type": "shell"}, agent=user).session_id
    theirs = tools.call("terminal_open", {"type": "shell"}, agent=other).session_id
    paths = [tools.manager.loop_thread.call(tools.manager.session, owner, victim).child.tty_path
             for owner, victim in ((user, mine), (other, theirs))]
    r = send(tools, agent, sid, "ls /dev/pts; tty")
    assert r.viewport.splitlines()[1:3] == ["ptmx", "/dev/console"], r.viewport
    for path in paths:
        r = send(tools, agent, sid, f"(timeout 5 cat {path} > /tmp/taken 2>&1 &); echo spoofed > {path}; echo rc=$?")
        assert "rc=1" in r.viewport, r.viewport
    for owner, victim in ((user, mine), (other, theirs)):
        r = tools.call("terminal_send", {"sessionId": victim, "text": "echo still-mine"}, agent=owner)
        assert r.viewport.splitlines()[1:2] == ["still-mine"], r.viewport
        assert "spoofed" not in tools.call("terminal_read", {"sessionId": victim}, agent=owner).text
    shared = [name for name in ("kvm",) if os.path.exists(f"/dev/{name}")]
    disks = [path for path in glob.glob("/dev/*") if stat.S_ISBLK(os.stat(path, follow_symlinks=False).st_mode)]
    looked = [f"/dev/{name}" for name in shared + ["tty1", "input", "mem", "fuse", "userfaultfd"]] + disks[:4]
    r = send(tools, agent, sid, f"for p in {' '.join(looked)}; do [ -e $p ] && echo found-$p; done; echo end")
    assert [line for line in r.viewport.splitlines() if line.startswith("found-")] == \
        [f"found-/dev/{name}" for name in shared], r.viewport
    r = send(tools, agent, sid, "python3 -c \"print('got', open('/dev/console').readline().strip())\"", idle=20)
    assert r.wait_reason == "stdin_read", r
    assert "got abc" in send(tools, agent, sid, "abc").viewport


def test_a_contained_session_has_ipc_of_its_own(contained):
    """System V shared memory of the user's other programs (a desktop's X clients share their windows' pixels
    that way) was there for an agent's contained session to attach; its IPC namespace is now its own."""
    tools, agent, sid = contained
    libc = ctypes.CDLL(None, use_errno=True)
    segment = libc.shmget(0, 4096, 0o600 | 0o1000)  # IPC_PRIVATE, IPC_CREAT
    assert segment >= 0, ctypes.get_errno()
    try:
        assert f" {segment} " in open("/proc/sysvipc/shm").read()
        r = send(tools, agent, sid, "wc -l < /proc/sysvipc/shm")
        assert r.viewport.splitlines()[1].strip() == "1", r.viewport  # (the header line only)
    finally:
        libc.shmctl(segment, 0, None)  # IPC_RMID


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="raw clone syscall numbers")
def test_clone_parent_from_the_session_leader(contained, tmp_path):
    tools, agent, sid = contained
    marker = f"{1000 + secrets.randbelow(1000)}.{secrets.randbelow(10**6)}"
    script = tmp_path / "clone_parent.py"
    script.write_text(CLONE_PARENT)
    send(tools, agent, sid, f"exec env -i {sys.executable} {script} {marker}", timeout=3, idle=1)
    wait_for(lambda: running_with(f"sleep\0{marker}"))
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)
    assert running_with(f"sleep\0{marker}") == []


def test_shutdown_ends_every_escape(tmp_path):
    """Escapes 1-3 planted in three sessions at once; shutdown() ends all of them."""
    tools = TerminalTools()
    agent = Agent("escapes")
    tag = secrets.randbelow(10**6)
    zombie, orphan, cloned = f"zombie-{tag}", f"1000.{tag}", f"1001.{tag}"
    (tmp_path / "zombie.py").write_text(ZOMBIE_LEADER)
    (tmp_path / "clone_parent.py").write_text(CLONE_PARENT)
    sids = [tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id for _ in range(3)]
    send(tools, agent, sids[0], f"{sys.executable} {tmp_path / 'zombie.py'} {zombie} &")
    send(tools, agent, sids[1], f"setsid -f env -i sleep {orphan} >/dev/null 2>&1; exit")
    send(tools, agent, sids[2], f"exec env -i {sys.executable} {tmp_path / 'clone_parent.py'} {cloned}",
         timeout=3, idle=1)
    wait_for(lambda: running_with(zombie) and running_with(f"sleep\0{cloned}"))
    tools.shutdown()
    assert running_with(zombie) == [] and running_with(f"sleep\0{orphan}") == []
    assert running_with(f"sleep\0{cloned}") == []


def test_killing_the_watchdog_then_the_kernel_leaves_nothing(tmp_path):
    """A kernel whose agent's session kills the watchdog and then the kernel itself is SIGKILLed."""
    from tests.notebook.test_kernel import Kernel

    marker = f"{1000 + secrets.randbelow(1000)}.{secrets.randbelow(10**6)}"
    kernel = Kernel()
    try:
        status, out = kernel.run(textwrap.dedent(f"""
            from dsh_terminal_magics import Agent, TerminalTools
            from dsh_terminal_magics.mechanism.watchdog import Watchdog
            tools, agent = TerminalTools(), Agent("a")
            sid = tools.call("terminal_open", {{"type": "shell"}}, agent=agent).session_id
            wd = Watchdog._proc.pid
            print(tools.call_text("terminal_send", {{"sessionId": sid,
                  "text": f"kill -9 {{wd}}; setsid -f env -i sleep {marker} >/dev/null 2>&1; echo planted"}},
                  agent=agent))
        """))
        assert status == "ok" and "planted" in out, out
        wait_for(lambda: running_with(f"sleep\0{marker}"))
        os.kill(kernel.km.provisioner.process.pid, signal.SIGKILL)
        started = time.monotonic()
        wait_for(lambda: running_with(f"sleep\0{marker}") == [], timeout=10)
        print(f"\nkernel SIGKILLed with its watchdog dead: escapes gone in {time.monotonic() - started:.2f}s",
              file=sys.stderr)
    finally:
        try:
            kernel.stop()
        except Exception:
            pass


def test_only_accelerators_and_kvm_are_shared_into_the_private_dev(tmp_path):
    """What of the host's /dev a contained session sees, from a made-up /dev: the accelerators and KVM (not
    FUSE: see test_loop_never_waits); a dangling symlink among them is left out (bubblewrap refuses to bind
    one, and the session would not open)."""
    from dsh_terminal_magics.mechanism.sandbox import _shared_devices
    for name in ("nvidia0", "nvidiactl", "accel0", "kvm", "fuse", "userfaultfd", "tty1", "sda", "mem", "uinput"):
        (tmp_path / name).write_text("")
    for name in ("dri", "input", "pts"):
        (tmp_path / name).mkdir()
    (tmp_path / "nvidia-gone").symlink_to(tmp_path / "missing")
    args = _shared_devices(str(tmp_path))
    names = ("nvidia0", "nvidiactl", "dri", "accel0", "kvm")
    assert args[0::3] == ["--dev-bind"] * len(names)
    assert args[2::3] == [f"/dev/{name}" for name in names]
    assert args[1::3] == [str(tmp_path / name) for name in names]


def test_a_contained_session_cannot_start_in_the_hosts_dev():
    """Its /dev is its own: a cwd in the host's (``/dev/net``) made bubblewrap fail to start the session, which
    then showed as exited with bubblewrap's message.  Now such a cwd is refused at open, and nothing is left;
    the notebook user's own sessions (not contained) still start there."""
    user, agent = Agent("notebook user"), Agent("contained")
    tools = TerminalTools(user=user)
    try:
        with pytest.raises(TerminalError, match="cwd '/dev' is in /dev, and this session's /dev is its own"):
            tools.call("terminal_open", {"type": "shell", "cwd": "/dev"}, agent=agent)
        assert tools.call("terminal_list", {}, agent=agent).root == []
        opened = tools.call("terminal_open", {"type": "shell", "cwd": "/dev"}, agent=user)
        assert opened.status == "running"
    finally:
        tools.shutdown()


def test_a_wrapper_that_cannot_start_the_session_is_an_error(monkeypatch):
    """bubblewrap that fails to set a session up (a bind whose source is gone, a directory it cannot enter)
    exits at once with ``bwrap: ...``: the open returned a session already exited, its message in the motd.
    Now the open fails with that message, and no session is left."""
    from dsh_terminal_magics.mechanism import sandbox as sandbox_module
    monkeypatch.setattr(sandbox_module, "_shared_devices",
                        lambda top: ["--dev-bind", "/nonexistent-dsh-device", "/dev/gone"])
    tools, agent = TerminalTools(), Agent("contained")
    try:
        with pytest.raises(TerminalError, match=r"bubblewrap could not start the session \(bwrap: .*"
                                                r"nonexistent-dsh-device.*\): .* open it in another cwd"):
            tools.call("terminal_open", {"type": "shell"}, agent=agent)
        assert tools.call("terminal_list", {}, agent=agent).root == []
    finally:
        tools.shutdown()


ORPHANS_COME_HOME = textwrap.dedent("""
    import ctypes, json, os, sys, time
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come here
    from dsh_terminal_magics import Agent, TerminalTools
    from dsh_terminal_magics.mechanism.fork_server import ForkServer
    from dsh_terminal_magics.mechanism.watchdog import Watchdog
    tools, agent = TerminalTools(config=json.loads(sys.argv[1])), Agent("a")
    sid = tools.call("terminal_open", {"type": sys.argv[2]}, agent=agent).session_id
    print(tools.call_text("terminal_send", {"sessionId": sid, "text": sys.argv[3]}, agent=agent), flush=True)
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)
    tools.shutdown()
    def read(path):
        try:
            with open(path) as f:
                return f.read()
        except OSError:  # (a thread or process that ended meanwhile)
            return ""
    def strays():
        me = os.getpid()
        kids = [int(p) for t in os.listdir(f"/proc/{me}/task")
                for p in read(f"/proc/{me}/task/{t}/children").split()]
        helpers = {Watchdog._proc.pid, ForkServer._proc.pid if ForkServer._proc else 0}  # (for the process's life)
        return [stat.split(")")[0] for p in kids if p not in helpers and (stat := read(f"/proc/{p}/stat"))]
    deadline = time.monotonic() + 10
    while strays() and time.monotonic() < deadline:
        time.sleep(0.05)
    print("strays:", strays())
""")


@pytest.mark.parametrize("config, kind", [({}, "shell"), ({"sandbox": "workspace-write"}, "python"),
                                          ({"containment": "tracking"}, "shell")])
def test_a_session_leaves_no_orphan_for_init(config, kind):
    """Everything bubblewrap starts - for the session and for the check that it works at all - is reaped by
    its own parent: an orphan is re-parented to the machine's init, and a container's init (often the
    notebook server itself) that does not reap keeps it as a zombie for ever.  The kernel here is a child
    subreaper, so an orphan comes to it instead and is seen."""
    text = "echo ran" if kind == "shell" else "print('ran')"
    out = subprocess.run([sys.executable, "-c", ORPHANS_COME_HOME, json.dumps(config), kind, text],
                         capture_output=True, text=True, timeout=60)
    assert "ran" in out.stdout and "strays: []" in out.stdout, out.stdout + out.stderr
