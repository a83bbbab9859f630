"""Opening off the loop: spawns run in spawner threads, overlap, respect the caps, and leak nothing when the
opener is cancelled or the manager shut down mid-spawn; the probe's kept /proc files end with the session."""
from __future__ import annotations

import asyncio
import os
import threading

import pytest

from dsh_terminal_magics.errors import SessionLimitError
from dsh_terminal_magics.mechanism import SendRequest, SessionManager
from dsh_terminal_magics.mechanism import pty_child
from tests.conftest import wait_for


def kept_proc_files(pid: int) -> list[str]:
    """This process's open fds on ``/proc/PID/...`` (the readiness probe keeps them open between checks)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"/proc/{pid}/"):
            out.append(target)
    return out


def test_the_fork_runs_in_a_spawner_thread_not_on_the_loop(manager, agent, monkeypatch):
    threads: list[str] = []
    real = pty_child.spawn

    def recording_spawn(*args):  # the real spawn, noting which thread ran it
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(pty_child, "spawn", recording_spawn)
    info = manager.sync.open(agent, "shell")
    assert manager.sync.send(agent, info.session_id, SendRequest("echo spawned-$((40+2))")).wait_reason == "stdin_read"
    assert threads and all(name.startswith("dsh-terminal-spawn-") for name in threads), threads
    assert manager.loop_thread.thread.name not in threads


@pytest.mark.parametrize("mode", ["read-only", "off"])
def test_the_sandbox_is_set_up_in_a_spawner_thread_and_a_refusal_leaks_nothing(manager, agent, monkeypatch, mode):
    """A sandbox's set-up reads the host's every bound Unix socket (60 ms of the loop for 3000 of them): it
    runs with the fork, off the loop.  When it refuses, the open fails with its reason, the filter's
    descriptor is not left open, and no session remains."""
    from dsh_terminal_magics.errors import BackendError
    from dsh_terminal_magics.mechanism import sandbox as sandbox_module
    from dsh_terminal_magics.mechanism.sandbox import Sandbox

    if sandbox_module.sandbox_problem() is not None:
        pytest.skip(sandbox_module.sandbox_problem())
    threads: list[str] = []
    real = Sandbox.wrap

    def recording_wrap(self, *args):
        threads.append(threading.current_thread().name)
        return real(self, *args)

    monkeypatch.setattr(Sandbox, "wrap", recording_wrap)
    sandbox = Sandbox(mode=mode, contain=True)  # type: ignore[arg-type]
    info = manager.sync.open(agent, "shell", sandbox=sandbox)
    assert manager.sync.send(agent, info.session_id, SendRequest("echo ok-$((6*7))")).wait_reason == "stdin_read"
    manager.sync.close(agent, info.session_id)
    assert threads and all(name.startswith("dsh-terminal-spawn-") for name in threads), threads
    if mode == "off":
        return  # (containment alone masks no sockets)
    fds = set(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(sandbox_module, "_host_sockets", lambda *a: (_ for _ in ()).throw(BackendError("too many")))
    with pytest.raises(BackendError, match="too many"):
        manager.sync.open(agent, "shell", sandbox=sandbox)
    assert set(os.listdir("/proc/self/fd")) <= fds and manager.sync.list(agent) == []


def test_concurrent_opens_cannot_pass_the_per_agent_cap(agent):
    manager = SessionManager(max_sessions_per_owner=3)
    try:
        async def open_many() -> list:
            return await asyncio.gather(*(manager.aio.open(agent, "shell") for _ in range(6)),
                                        return_exceptions=True)

        results = asyncio.run(open_many())
        refused = [r for r in results if isinstance(r, SessionLimitError)]
        opened = [r for r in results if not isinstance(r, BaseException)]
        assert len(opened) == 3 and len(refused) == 3, results
        assert "the most one agent may have (3)" in str(refused[0])
        assert len(manager.sync.list(agent)) == 3
    finally:
        manager.sync.shutdown()


def test_concurrent_opens_with_one_name_give_one_session(agent, manager):
    async def open_named() -> list:
        return await asyncio.gather(*(manager.aio.open(agent, "shell", name="same") for _ in range(3)),
                                    return_exceptions=True)

    results = asyncio.run(open_named())
    assert sum(1 for r in results if not isinstance(r, BaseException)) == 1, results
    assert all("already have a terminal session named 'same'" in str(r) for r in results if isinstance(r, Exception))


@pytest.mark.parametrize("when", ["cancel the opener", "shut the manager down"])
def test_a_spawn_in_flight_is_ended_when_its_open_is_abandoned(agent, when):
    """The spawn is held after it started the process until the opener was cancelled (or the manager told to
    shut down), so the open cannot finish first.  The no_leaks fixture fails this test if the process
    survives."""
    manager = SessionManager()
    spawned, release = threading.Event(), threading.Event()
    real = pty_child.spawn

    def held_spawn(*args):
        proc = real(*args)
        spawned.set()
        release.wait(30)
        return proc

    pty_child.spawn = held_spawn  # type: ignore[assignment]
    try:
        async def abandon() -> object:
            opening = asyncio.ensure_future(manager.aio.open(agent, "shell"))
            while not spawned.is_set():
                await asyncio.sleep(0.001)  # the process exists; the open is still waiting for it
            if when == "cancel the opener":
                opening.cancel()
                await asyncio.sleep(0.01)
                release.set()
            else:
                shutting = asyncio.ensure_future(manager.aio.shutdown())
                while not manager._closed:  # set as the shutdown starts, in the step that waits for the spawn
                    await asyncio.sleep(0.001)
                release.set()
                await shutting
            return (await asyncio.gather(opening, return_exceptions=True))[0]

        outcome = asyncio.run(abandon())
        assert isinstance(outcome, BaseException), outcome
        wait_for(lambda: manager.sync.list(agent) == [])  # a cancelled opener's close goes on without it
    finally:
        release.set()
        pty_child.spawn = real  # type: ignore[assignment]
        manager.sync.shutdown()


def test_only_the_programs_proc_files_are_kept_and_they_close_with_the_session(manager, agent):
    info = manager.sync.open(agent, "shell")
    r = manager.sync.send(agent, info.session_id, SendRequest("sleep 0.2 | cat; (sleep 0.1; echo sub) | cat"))
    assert r.wait_reason == "stdin_read" and "sub" in r.viewport, r
    kept = kept_proc_files(info.pid)
    assert kept, "the probe keeps the shell's /proc files open between checks"
    assert len(kept) <= 16
    everything = [target for target in map(_target, os.listdir("/proc/self/fd"))
                  if target.startswith("/proc/") and not target.startswith(f"/proc/{os.getpid()}/")]
    assert sorted(everything) == sorted(kept), "a command's processes' files are read by path, not kept"
    manager.sync.close(agent, info.session_id)
    assert kept_proc_files(info.pid) == []


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def test_a_program_that_replaced_the_shell_is_read_afresh(manager, agent):
    """``exec`` gives the process a new memory image: a kept ``/proc/PID/mem`` of the old one reads nothing,
    so the probe must open it again (else the new program's tty wait is never seen)."""
    info = manager.sync.open(agent, "shell")
    sid = info.session_id
    assert manager.sync.send(agent, sid, SendRequest("echo before")).wait_reason == "stdin_read"
    r = manager.sync.send(agent, sid, SendRequest("exec python3 -q -c 'import select, sys; "
                                                  "select.select([sys.stdin], [], []); print(\"got\", input())'",
                                                  timeout=20, idle=10))
    assert r.wait_reason == "stdin_read", r
    r = manager.sync.send(agent, sid, SendRequest("hello", timeout=20, idle=10))
    assert "got hello" in r.viewport and r.wait_reason == "session_exit", r


def test_a_spawn_nobody_takes_is_killed_and_reaped(manager, monkeypatch):
    from dsh_terminal_magics.mechanism.process_tree import read_stat
    from dsh_terminal_magics.mechanism.sandbox import Wrapped

    pids: list[int] = []
    real = pty_child.spawn

    def recording_spawn(*args):
        proc = real(*args)
        pids.append(proc.pid)
        return proc

    monkeypatch.setattr(pty_child, "spawn", recording_spawn)

    async def spawn_and_walk_away() -> None:
        pty_child.spawn_off_loop(manager.loop_thread.loop, lambda: Wrapped(["sleep", "60"], []), "/", dict(os.environ),
                                 24, 80).cancel()

    manager.loop_thread.run(spawn_and_walk_away())
    wait_for(lambda: pids)
    wait_for(lambda: read_stat(pids[0]) is None)  # killed, and reaped: not even a zombie is left


def test_a_leader_is_forked_by_the_fork_server_and_set_up_as_ours_was(manager, agent, tmp_path):
    """Opening forks nothing of this process: the fork server forks the leader (a fork of this process copied
    every page the loop wrote until the child's exec - 2,550 faults and 3-4x the time for the loop's work).  The
    leader is what this process's own fork made it: a session leader on the PTY, the subreaper of its tree,
    first for the out-of-memory killer, with no XON/XOFF; its exit status comes back through the server."""
    from dsh_terminal_magics.mechanism.fork_server import ForkServer
    from dsh_terminal_magics.mechanism.process_tree import read_stat

    info = manager.sync.open(agent, "shell")
    stat = read_stat(info.pid)
    assert ForkServer._proc is not None and stat is not None
    assert stat.ppid == ForkServer._proc.pid != os.getpid()
    assert stat.session == info.pid and stat.tpgid > 0  # (a terminal of its own, in the foreground)
    orphan = tmp_path / "orphan"
    r = manager.sync.send(agent, info.session_id, SendRequest(
        f"(setsid sh -c 'echo $$ > {orphan}; exec sleep 60' &); sleep 0.3; ps -o ppid= -p $(cat {orphan}); "
        "cat /proc/$$/oom_score_adj; stty -a | grep -o -- -ixon"))
    lines = [line.strip() for line in r.viewport.splitlines()[1:4]]
    assert lines == [str(info.pid), "1000", "-ixon"], r.viewport  # (the orphan came home: a subreaper)
    r = manager.sync.send(agent, info.session_id, SendRequest("exit 7", timeout=10))
    assert (r.wait_reason, r.exit_code, manager.sync.list(agent)[0].exit_status) == ("session_exit", 7, 7), r
    manager.sync.close(agent, info.session_id)


def test_a_program_the_fork_server_cannot_start_is_one_clear_error(manager, agent, tmp_path):
    """An exec that fails in the server's child (here a file that is not executable) is an error naming the
    program and why, and leaves nothing: no session, no process, no descriptor."""
    from dsh_terminal_magics.errors import TerminalError
    from dsh_terminal_magics.mechanism.sandbox import Wrapped

    program = tmp_path / "not-executable"
    program.write_text("#!/bin/sh\n")
    with pytest.raises(TerminalError, match=r"could not start .*not-executable: .*Permission denied"):
        pty_child.spawn(lambda: Wrapped([str(program)], []), str(tmp_path), dict(os.environ), 24, 80)
    assert manager.sync.list(agent) == []


def test_a_fork_server_that_died_is_started_again(manager, agent):
    """Killing the server ends the sessions it started (their leaders die with it, as they died with this
    process's spawner thread) - and the next open starts a new server."""
    import signal as signals

    from dsh_terminal_magics.mechanism.fork_server import ForkServer

    first = manager.sync.open(agent, "shell")
    assert ForkServer._proc is not None
    old = ForkServer._proc
    os.kill(old.pid, signals.SIGKILL)
    old.wait(10)
    r = manager.sync.send(agent, first.session_id, SendRequest("echo still", timeout=10))
    assert r.wait_reason == "session_exit", r
    second = manager.sync.open(agent, "shell")
    assert ForkServer._proc is not None and ForkServer._proc.pid != old.pid
    r = manager.sync.send(agent, second.session_id, SendRequest("echo back-$((1+1))"))
    assert "back-2" in r.viewport and r.wait_reason == "stdin_read", r
    manager.sync.close(agent, first.session_id)
    manager.sync.close(agent, second.session_id)


def test_an_environment_larger_than_a_socket_message_reaches_the_program(manager, agent):
    """The request goes to the fork server in a memfd: as one socket message, a 100 KB variable (a long PATH, a
    tool's state) was cut at 64 KiB and the server could not read it - no session opened."""
    from dsh_terminal_magics.mechanism.environment import EnvironmentPolicy

    policy = EnvironmentPolicy(inherit="core", set={"BIG": "x" * 100_000})
    info = manager.sync.open(agent, "shell", environment=policy)
    r = manager.sync.send(agent, info.session_id, SendRequest("echo ${#BIG}"))
    assert r.viewport.splitlines()[1] == "100000", r.viewport
    manager.sync.close(agent, info.session_id)


def test_a_leader_starts_with_this_process_s_limits_and_umask_as_they_are_now(manager, agent):
    """The fork server was started with the process's limits and umask of that moment; a leader it forks takes
    them as they are at the open, as one forked from here would (a notebook that lowered its umask, or changed
    its open-file limit, after its first session)."""
    import resource

    manager.sync.close(agent, manager.sync.open(agent, "shell").session_id)  # (the server runs from here on)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    mask = os.umask(0o077)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 7, hard))
        info = manager.sync.open(agent, "shell")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        os.umask(mask)
    r = manager.sync.send(agent, info.session_id, SendRequest("ulimit -n; umask"))
    assert r.viewport.splitlines()[1:3] == [str(soft - 7), "0077"], r.viewport
    manager.sync.close(agent, info.session_id)


def test_a_contained_session_is_forked_by_the_server_with_its_seccomp_filter(manager, agent):
    """bubblewrap takes its seccomp filter as a descriptor (``--seccomp N``): the server's child gets it under
    that number, so a contained session starts there too, filtered (the filter refuses ``userfaultfd``)."""
    from dsh_terminal_magics.mechanism.fork_server import ForkServer
    from dsh_terminal_magics.mechanism.process_tree import read_stat
    from dsh_terminal_magics.mechanism.sandbox import Sandbox, sandbox_problem

    if sandbox_problem() is not None:
        pytest.skip(sandbox_problem())
    info = manager.sync.open(agent, "shell", sandbox=Sandbox(contain=True))
    stat = read_stat(info.pid)
    wrapper = read_stat(stat.session) if stat is not None else None  # (bubblewrap leads the program's session)
    assert ForkServer._proc is not None and wrapper is not None and wrapper.ppid == ForkServer._proc.pid
    r = manager.sync.send(agent, info.session_id, SendRequest("grep Seccomp_filters /proc/self/status; echo $$"))
    assert r.viewport.splitlines()[1:3] == ["Seccomp_filters:\t1", "2"], r.viewport  # (filtered, in its namespace)
    manager.sync.close(agent, info.session_id)


@pytest.mark.parametrize("served", [True, False], ids=["fork-server", "own-fork"])
def test_a_leader_starts_with_no_signal_ignored(manager, agent, tmp_path, monkeypatch, served):
    """A program in a terminal starts with no signal ignored; Python ignores SIGPIPE and SIGXFSZ, and a notebook
    may ignore more (here SIGUSR2).  Whoever forks the leader - the fork server or this process - sets every one
    of them back, so ``ulimit -f`` stops a program with SIGXFSZ instead of failing its write with EFBIG."""
    import signal as signals

    monkeypatch.setattr(pty_child, "_FORK_SERVED", served and pty_child._FORK_SERVED)
    before = signals.signal(signals.SIGUSR2, signals.SIG_IGN)
    try:
        info = manager.sync.open(agent, "shell", cwd=str(tmp_path))
    finally:
        signals.signal(signals.SIGUSR2, before)
    r = manager.sync.send(agent, info.session_id, SendRequest(
        "grep SigIgn /proc/self/status; (ulimit -f 1; head -c 100000 /dev/zero > big); echo rc=$?"))
    assert r.viewport.splitlines()[1:3] == ["SigIgn:\t0000000000000000", "rc=153"], r.viewport
    manager.sync.close(agent, info.session_id)
