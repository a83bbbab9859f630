"""The opt-in bubblewrap sandbox: what it confines, and that everything else works inside it as outside."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from dsh_terminal_magics import Agent, TerminalError, TerminalTools
from dsh_terminal_magics.mechanism.process_tree import process_table
from tests.conftest import wait_for

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                reason="bubblewrap is not installed (CI installs it)")


@pytest.fixture
def sandboxed(tmp_path):
    def make(mode: str = "workspace-write", cwd: str | None = None, **config):
        work = tmp_path / mode
        work.mkdir(exist_ok=True)
        tools = TerminalTools(config={"sandbox": mode, **config}, workspace_root=str(work))
        agent = Agent("sandboxed")
        opened = tools.call("terminal_open", {"type": "shell", **({"cwd": cwd} if cwd else {})}, agent=agent)
        made.append(tools)

        def send(text: str, **extra):
            return tools.call("terminal_send", {"sessionId": opened.session_id, "text": text, **extra}, agent=agent)
        return tools, agent, opened, work, send
    made: list[TerminalTools] = []
    yield make
    for tools in made:
        tools.shutdown()


def test_workspace_write_confines_writes_network_and_injection(sandboxed, tmp_path):
    tools, agent, opened, work, send = sandboxed()
    assert "sandbox: workspace-write" in opened.motd
    outside = Path.home() / f".dsh-sandbox-probe-{os.getpid()}"  # writable on the host, outside cwd and /tmp
    r = send(f"echo x > {outside}; echo rc=$?")
    assert "rc=1" in r.viewport and "Read-only file system" in r.viewport and not outside.exists()
    assert send("echo hi > inside.txt && cat inside.txt").exit_code == 0 and (work / "inside.txt").exists()
    assert send("echo t > /tmp/private.txt && cat /tmp/private.txt").exit_code == 0
    assert not os.path.exists("/tmp/private.txt")  # a private /tmp
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        r = send(f"timeout 5 bash -c 'echo > /dev/tcp/127.0.0.1/{port}'; echo rc=$?")
        assert "rc=1" in r.viewport, r.viewport
    finally:
        listener.close()
    r = send("python3 -c 'import fcntl, termios; fcntl.ioctl(0, termios.TIOCSTI, b\"x\")'")
    assert r.exit_code == 1 and "Operation not permitted" in r.viewport
    r = send("ps -e -o pid= | wc -l")  # its own pid namespace: only the session's processes
    assert int(r.viewport.splitlines()[1]) < 10


def test_root_in_the_sandbox_cannot_undo_it(sandboxed):
    """bubblewrap keeps root's capabilities: a root kernel's sandboxed agent remounted the read-only file system
    writable and wrote where it liked, and could unmount /proc or make a raw disk's node.  It has none now."""
    tools, agent, opened, work, send = sandboxed()
    outside = Path.home() / f".dsh-sandbox-remount-{os.getpid()}"
    r = send(f"grep CapEff /proc/self/status; mount -o remount,rw /; echo > {outside}; umount -l /proc; "
             "mknod /tmp/disk b 8 0; echo done")
    assert "CapEff:\t0000000000000000" in r.viewport, r.viewport
    assert not outside.exists() and r.viewport.count("done") == 2, r.viewport
    assert send("ls /proc | grep -c '^[0-9]'").viewport.splitlines()[1] != "0"
    r = send("p=$(cat /proc/sys/kernel/core_pattern); echo \"$p\" > /proc/sys/kernel/core_pattern; echo rc=$?")
    assert "rc=1" in r.viewport, r.viewport  # (see test_containment)


@pytest.mark.parametrize("cwd", ["~", "..", "/"])
def test_a_cwd_outside_the_workspace_does_not_make_it_writable(sandboxed, cwd):
    """The writable directory was the ``cwd`` the model asked for: ``cwd: "~"`` made the user's home
    writable (``~/.bashrc``, ``~/.ssh``), ``"/"`` everything.  It is the workspace root the tools were given;
    a session may start elsewhere, read-only there."""
    tools, agent, opened, work, send = sandboxed(cwd=cwd)
    target = Path(os.path.abspath(os.path.join(work, os.path.expanduser(cwd))))
    probe = target / f"dsh-sandbox-probe-{os.getpid()}"
    r = send(f"pwd; echo x > {probe}; echo rc=$?")
    assert r.viewport.splitlines()[1] == str(target), r.viewport
    assert "rc=1" in r.viewport and not probe.exists(), r.viewport
    assert send(f"echo in > {work}/inside.txt && cat {work}/inside.txt").exit_code == 0
    assert (work / "inside.txt").read_text() == "in\n"


def _listening(paths: list[str]) -> list[socket.socket]:
    """A Unix stream socket listening at each of ``paths`` (none left open when one fails)."""
    listeners: list[socket.socket] = []
    try:
        for path in paths:
            listeners.append(socket.socket(socket.AF_UNIX))
            listeners[-1].bind(path)
            listeners[-1].listen(1)
    except OSError:
        for listener in listeners:
            listener.close()
        raise
    return listeners


def test_the_hosts_daemons_sockets_are_out_of_reach(sandboxed, monkeypatch):
    """A read-only bind leaves a Unix socket open to ``connect``: a sandboxed session could reach the D-Bus
    session bus in ``/run/user/UID`` (``systemd-run --user`` runs anything, outside the sandbox), Docker's
    socket in ``/run``, the ssh and gpg agents in the runtime directory.  ``/run`` and ``XDG_RUNTIME_DIR``
    are empty there."""
    runtime = Path.home() / f".dsh-sandbox-runtime-{os.getpid()}"  # a runtime directory outside /run and /tmp
    runtime.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    paths = [str(runtime / "agent.sock")] + ([f"/run/dsh-sandbox-{os.getpid()}.sock"] if os.access("/run", os.W_OK)
                                               else [])
    listeners = []
    try:
        listeners += _listening(paths)
        tools, agent, opened, work, send = sandboxed()
        connect = "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1]); print('connected')"
        for path in paths:
            r = send(f"python3 -c \"{connect}\" {path}; echo rc=$?")
            assert "rc=1" in r.viewport and "connected" not in r.viewport.replace("print('connected')", ""), r.viewport
        home = TerminalTools(config={"sandbox": "workspace-write"}, workspace_root=str(Path.home()))
        try:  # a workspace above the runtime directory (the home directory) does not bring it back
            sid = home.call("terminal_open", {"type": "shell"}, agent=agent).session_id
            r = home.call("terminal_send", {"sessionId": sid, "text": f"python3 -c \"{connect}\" {paths[0]}; "
                                            "echo rc=$?"}, agent=agent)
            assert "rc=1" in r.viewport, r.viewport
        finally:
            home.shutdown()
        outside = socket.socket(socket.AF_UNIX)  # (the same connect works outside the sandbox)
        outside.connect(paths[0])
        outside.close()
        assert send("ls /run | wc -l").viewport.splitlines()[1] == "0"
    finally:
        for listener in listeners:
            listener.close()
        for path in paths:
            if os.path.exists(path):
                os.unlink(path)
        runtime.rmdir()


def test_kernel_connection_files_are_out_of_reach(sandboxed, monkeypatch):
    """A kernel's connection file holds its ports and signing key: with the network on, a sandboxed session
    that read it could run code in the kernel, outside the sandbox.  Jupyter's runtime directory is empty
    there."""
    runtime = Path.home() / f".dsh-sandbox-jupyter-{os.getpid()}"
    runtime.mkdir()
    (runtime / "kernel-probe.json").write_text('{"key": "secret-signing-key"}')
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    try:
        tools, agent, opened, work, send = sandboxed(sandboxNetwork=True)
        r = send(f"cat {runtime}/kernel-probe.json; echo rc=$?")
        assert "rc=1" in r.viewport and "secret-signing-key" not in r.viewport, r.viewport
    finally:
        (runtime / "kernel-probe.json").unlink()
        runtime.rmdir()


def test_the_workspace_root_must_exist(tmp_path):
    tools = TerminalTools(config={"sandbox": "workspace-write"}, workspace_root=str(tmp_path / "missing"))
    try:
        with pytest.raises(TerminalError, match="workspace root .* not an existing directory"):
            tools.call("terminal_open", {"type": "shell", "cwd": str(tmp_path)}, agent=Agent("a"))
    finally:
        tools.shutdown()


def test_a_sandboxed_session_cannot_reach_another_sessions_terminal(sandboxed):
    """The sandbox's /dev is its own: no other session's pts to write into (spoofing its screen) or read
    from (taking its keystrokes), no raw disks.  Its own terminal is ``/dev/console`` there (``ttyname``
    works), and a program reading it by that name is a prompt like any other."""
    tools, agent, opened, work, send = sandboxed()
    other = Agent("other")
    victim = tools.call("terminal_open", {"type": "shell"}, agent=other).session_id
    victim_tty = tools.manager.loop_thread.call(tools.manager.session, other, victim).child.tty_path
    r = send(f"ls /dev/pts; echo spoofed > {victim_tty}; echo rc=$?; tty")
    assert "rc=1" in r.viewport and r.viewport.splitlines()[1] == "ptmx", r.viewport
    assert r.viewport.splitlines()[-2] == "/dev/console", r.viewport
    assert "spoofed" not in tools.call("terminal_read", {"sessionId": victim}, agent=other).text
    assert "No such file" in send("ls /dev/vda /dev/sda /dev/nvme0n1 2>&1 | head -1").viewport
    r = send("python3 -c \"print('got', open('/dev/console').readline().strip())\"", idle=20)
    assert r.wait_reason == "stdin_read", r
    assert "got abc" in send("abc").viewport


def test_read_only_mode(sandboxed):
    tools, agent, opened, work, send = sandboxed("read-only")
    r = send("echo x > here.txt; echo rc=$?; echo y > /tmp/t && cat /tmp/t")
    assert "rc=1" in r.viewport and "y" in r.viewport.splitlines()[-2] and not (work / "here.txt").exists()


def test_readiness_signals_exit_codes_screens_and_jobs_work_inside(sandboxed):
    tools, agent, opened, work, send = sandboxed()
    started = time.monotonic()
    r = send("read -p 'name? ' x")
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("name? ") and time.monotonic() - started < 1.5
    send("bob")  # the answer to the prompt
    assert send("echo hello $x").viewport.splitlines()[1] == "hello bob"
    assert send("false").exit_code == 1
    send("sleep 100", timeout=0.5, idle=10)
    sig = tools.call("terminal_signal", {"sessionId": opened.session_id, "signal": "INT"}, agent=agent)
    assert sig.target_pgid != opened.pid
    send("", submit=False)  # the prompt the interrupted command leaves
    assert "back-42" in send("echo back-$((6*7))").viewport.splitlines()
    with pytest.raises(TerminalError, match="use terminal_close"):
        tools.call("terminal_signal", {"sessionId": opened.session_id, "signal": "KILL"}, agent=agent)
    if shutil.which("vim") or os.environ.get("CI"):
        r = send("vim -u NONE note.txt")
        assert r.wait_reason == "stdin_read" and r.screen is not None
        send("", submit=False, keys=["i", *"sandboxed", "Esc"])
        send(":wq")
        assert (work / "note.txt").read_text() == "sandboxed\n"
    job = tools.call("terminal_send", {"sessionId": opened.session_id, "text": "for i in 1 2 3; do echo j$i; done",
                                       "run_in_background": True}, agent=agent).job_id
    for _ in range(200):
        out = tools.call("job_output", {"jobId": job}, agent=agent)
        if out.status != "running":
            break
        time.sleep(0.05)
    assert out.status == "completed"


def test_close_leaves_nothing_of_a_sandboxed_session(sandboxed):
    tools, agent, opened, work, send = sandboxed()
    markers = (b"sleep\x001000.4242\x00", b"sleep\x001001.4242\x00")  # unique: found in /proc by argv
    send("setsid sleep 1000.4242 & nohup sleep 1001.4242 >/dev/null 2>&1 &")

    def alive() -> list[int]:
        return [p for p, st in process_table().items() if not st.gone and _cmdline(p) in markers]

    wait_for(lambda: len(alive()) == 2)
    tools.call("terminal_close", {"sessionId": opened.session_id}, agent=agent)
    assert alive() == []


def test_no_bubblewrap_means_no_session(sandboxed, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH
    with pytest.raises(TerminalError, match="apt-get install bubblewrap"):
        sandboxed()
    monkeypatch.undo()


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_unix_sockets_anywhere_on_the_host_are_out_of_reach(sandboxed, tmp_path):
    """Masking the runtime directories left every other socket reachable: a gpg agent in ``~/.gnupg``, ssh's
    shared connections, Docker Desktop's socket in the home directory - and one in the workspace.  Every
    socket bound on the host to a path the sandbox shows is masked; sockets the session binds itself (a
    tmux server in its /tmp, one in its workspace) work."""
    home = Path.home() / f".dsh-sandbox-sockets-{os.getpid()}"
    home.mkdir()
    work = tmp_path / "workspace-write"
    work.mkdir()
    streams = [str(home / "S.gpg-agent"), str(work / "dev-server.sock")]
    listeners = []
    try:
        listeners += _listening(streams)
        datagram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        datagram.bind(str(home / "notify"))
        listeners.append(datagram)
        tools, agent, opened, work, send = sandboxed()
        reach = ("import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1]) if sys.argv[2] == 's' "
                 "else socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'x', sys.argv[1]); print('reached')")
        for path, kind in [(streams[0], "s"), (streams[1], "s"), (str(home / "notify"), "d")]:
            r = send(f"python3 -c \"{reach}\" {path} {kind}; echo rc=$?")
            assert "rc=1" in r.viewport and "reached" not in r.viewport.replace("print('reached')", ""), r.viewport
        own = ("import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1); "
               "socket.socket(socket.AF_UNIX).connect(sys.argv[1]); print('own', 'socket', 'works')")
        for path in ("/tmp/own.sock", f"{work}/own.sock"):
            r = send(f"python3 -c \"{own}\" {path}")
            assert r.exit_code == 0 and "own socket works" in r.viewport, r.viewport
        outside = socket.socket(socket.AF_UNIX)  # (the same connect works outside the sandbox)
        outside.connect(streams[0])
        outside.close()
    finally:
        for listener in listeners:
            listener.close()
        for name in ("S.gpg-agent", "notify"):
            if (home / name).exists():
                (home / name).unlink()
        home.rmdir()


def test_a_workspace_holding_the_home_directory_keeps_its_top_level(sandboxed, tmp_path, monkeypatch):
    """Jupyter started in ``~`` makes the home directory the workspace: a sandboxed agent wrote ``~/.bashrc``
    (run by the user's next shell, outside the sandbox) and an IPython startup file (run by their next kernel).
    The home's top level stays read-only there - its hidden files and directories, ``~/bin``, new entries
    beside them - and its other directories stay writable."""
    home = tmp_path / "workspace-write"
    (home / ".ipython" / "profile_default" / "startup").mkdir(parents=True)
    (home / "projects").mkdir()
    (home / "bin").mkdir()
    (home / ".bashrc").write_text("# the user's\n")
    monkeypatch.setenv("HOME", str(home))
    tools, agent, opened, work, send = sandboxed()
    assert work == home
    for write in ("echo evil >> ~/.bashrc", "echo evil > ~/.bash_login", "mkdir ~/.ssh", "echo x > ~/bin/ls",
                  "echo x > ~/.ipython/profile_default/startup/a.py", "echo x > ~/new.txt"):
        r = send(f"{write}; echo rc=$?")
        assert "rc=1" in r.viewport and "Read-only file system" in r.viewport, (write, r.viewport)
    assert send("echo work > ~/projects/a.txt && cat ~/.bashrc").exit_code == 0
    assert (home / "projects" / "a.txt").read_text() == "work\n"
    assert (home / ".bashrc").read_text() == "# the user's\n"
    assert sorted(p.name for p in home.iterdir()) == [".bashrc", ".ipython", "bin", "projects"]
    assert list((home / ".ipython" / "profile_default" / "startup").iterdir()) == []


def test_the_kernels_own_environment_in_the_workspace_stays_read_only(sandboxed, tmp_path, monkeypatch):
    """Jupyter run from a project's ``.venv``: a sandboxed agent wrote a ``.pth`` file into the kernel's
    site-packages, which every Python started from it runs - the user's next kernel, outside the sandbox."""
    import site
    import sys
    venv = tmp_path / "workspace-write" / ".venv"
    packages = venv / "lib" / "python3" / "site-packages"
    packages.mkdir(parents=True)
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(sys, "exec_prefix", str(venv))
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(packages)])
    tools, agent, opened, work, send = sandboxed()
    r = send(f"echo 'import os' > {packages}/evil.pth; echo rc=$?; echo x > {venv}/pyvenv.cfg; echo rc=$?")
    assert r.viewport.count("rc=1") == 2 and "Read-only file system" in r.viewport, r.viewport
    assert list(packages.iterdir()) == [] and not (venv / "pyvenv.cfg").exists()
    assert send("echo fine > notes.txt").exit_code == 0 and (work / "notes.txt").exists()


def test_the_workspaces_git_repositories_stay_read_only(sandboxed, tmp_path):
    """git runs what a repository holds outside the sandbox: a hook a sandboxed session wrote ran at the
    user's next commit, a ``core.fsmonitor`` command at their next ``git status`` (Mercurial's hooks alike).
    The repositories of the workspace (its own, those of its directories a few levels down - an organisation's
    folder of them -, one a ``.git`` file names, a ``.hg``) are read-only there; the rest of the workspace
    stays writable and git still reads them."""
    work = tmp_path / "workspace-write"
    for repo in (work, work / "app", work / "org" / "team" / "service"):
        repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (work / "modules" / "lib.git").mkdir(parents=True)
    (work / "lib").mkdir()
    (work / "lib" / ".git").write_text("gitdir: ../modules/lib.git\n")
    (work / "hg" / ".hg").mkdir(parents=True)
    tools, agent, opened, work, send = sandboxed()
    for write in ("echo 'touch ~/pwned' > .git/hooks/pre-commit", "git config core.fsmonitor 'touch ~/pwned'",
                  "echo x > app/.git/hooks/post-checkout", "echo x > org/team/service/.git/hooks/pre-commit",
                  "echo x > modules/lib.git/config",
                  "echo 'gitdir: /elsewhere' > lib/.git", "rm -rf app/.git",
                  "printf '[hooks]\\npre-status = touch ~/pwned\\n' > hg/.hg/hgrc"):
        r = send(f"{write}; echo rc=$?")
        assert "rc=0" not in r.viewport and "Read-only file system" in r.viewport, r.viewport
    assert not (work / ".git" / "hooks" / "pre-commit").exists() and (work / "app" / ".git").is_dir()
    assert "fsmonitor" not in (work / ".git" / "config").read_text()
    assert send("echo hi > notes.txt && git status --short").exit_code == 0 and (work / "notes.txt").exists()


def test_with_the_network_on_the_hosts_abstract_sockets_are_out_of_reach(sandboxed):
    """Sharing the host's network namespace (sandboxNetwork), a session shared its abstract Unix sockets too: it
    read what a host server on one sent (an X server's, a D-Bus bus's are such: where `systemd-run --user`
    starts anything outside the sandbox).  Now a Landlock scope refuses the connect; the session's own
    abstract sockets still work, and so does TCP.  The fork server starts such a session too (its child enters
    the scope before it execs bubblewrap): none forks the kernel."""
    import socket
    import threading

    from dsh_terminal_magics.mechanism import sandbox as sandbox_module
    from dsh_terminal_magics.mechanism.fork_server import ForkServer
    from dsh_terminal_magics.mechanism.process_tree import read_stat

    if not sandbox_module.abstract_socket_scope_works(shutil.which("bwrap") or "/nonexistent"):
        pytest.skip("this kernel has no Landlock scope for abstract Unix sockets (Linux 6.12+)")
    name = f"dsh-host-only-{os.getpid()}"
    host, tcp = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), socket.socket()
    host.bind("\0" + name)
    tcp.bind(("127.0.0.1", 0))

    def serve(server: socket.socket) -> None:
        try:
            while True:
                server.accept()[0].sendall(b"host-secret")
        except OSError:
            return  # (closed)

    for server in (host, tcp):
        server.listen(4)
        threading.Thread(target=serve, args=(server,), daemon=True).start()
    try:
        tools, agent, opened, work, send = sandboxed(sandboxNetwork=True)
        stat = read_stat(opened.pid)
        wrapper = read_stat(stat.session) if stat is not None else None  # (bubblewrap leads the session)
        assert ForkServer._proc is not None and wrapper is not None and wrapper.ppid == ForkServer._proc.pid
        connect = ("import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(chr(0) + sys.argv[1]); "
                   "print(s.recv(20))")
        r = send(f"python3 -c '{connect}' {name} 2>&1 | tail -1")
        assert "PermissionError" in r.viewport and "host-secret" not in r.viewport, r.viewport
        own = ("import socket; a = socket.socket(socket.AF_UNIX); a.bind('\\0own'); a.listen(1); "
               "b = socket.socket(socket.AF_UNIX); b.connect('\\0own'); a.accept()[0].sendall(b'own-ok'); "
               "print(b.recv(10))")
        assert "b'own-ok'" in send(f'python3 -c "{own}"').viewport
        port = tcp.getsockname()[1]
        assert "host-secret" in send(f"python3 -c \"import socket; print(socket.create_connection(('127.0.0.1', "
                                     f"{port})).recv(20))\"").viewport
    finally:
        host.close()
        tcp.close()
