"""The cap on an agent's session's tasks (``maxProcesses``): a fork bomb stops at it, the machine and the kernel
keep forking, and close ends it at once.  Real bash, real forks, the real cgroup file system."""
from __future__ import annotations

import os
import re
import resource
import secrets
import signal
import subprocess
import sys
import textwrap
from typing import Callable

import pytest

from dsh_terminal_magics import Agent, TerminalTools
from dsh_terminal_magics.errors import BackendError, ConfigError
from dsh_terminal_magics.mechanism import process_cap
from dsh_terminal_magics.mechanism.process_tree import join_cap
from dsh_terminal_magics.mechanism import sandbox as sandbox_module
from dsh_terminal_magics.mechanism.sandbox import Sandbox
from dsh_terminal_magics.tools import sandbox_problem
from tests.conftest import wait_for
from tests.reliability.test_containment import running_with

CONTAINMENTS = ["tracking", *(["namespace"] if sandbox_problem() is None else [])]

FORK_UNTIL_REFUSED = textwrap.dedent("""
    import os, sys, time
    forked = 0
    try:
        while forked < 256:  # (4 times the cap: without one, it stops there)
            if os.fork() == 0:
                time.sleep(300)
                os._exit(0)
            forked += 1
        print("never-refused", forked, flush=True)
    except OSError as exc:
        print("refused-after", forked, exc.errno, flush=True)
    input()
""")


def enforcement(motd: str) -> str:
    """How the session's cap is enforced, from its motd: cgroup, rlimit or none."""
    line = next(line for line in motd.splitlines() if line.startswith("processes: "))
    return "cgroup" if "pids cgroup" in line else "rlimit" if "RLIMIT_NPROC" in line else "none"


def session_cgroup(sid: str) -> str | None:
    """The session's own pids cgroup directory (None where the cap is not a cgroup)."""
    kernel = process_cap._kernel_cgroup()
    return None if kernel is None else os.path.join(kernel, sid)


@pytest.fixture
def capped(request):
    tools = TerminalTools(config={"maxProcesses": 64, "containment": request.param})
    agent = Agent("forker")
    opened = tools.call("terminal_open", {"type": "shell"}, agent=agent)
    if enforcement(opened.motd) == "none":
        tools.shutdown()
        pytest.skip("root with no pids cgroup this process may make: the cap cannot be enforced here")
    yield tools, agent, opened.session_id, enforcement(opened.motd)
    tools.shutdown()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("capped", CONTAINMENTS, indirect=True)
def test_forks_past_the_cap_are_refused_and_close_ends_them_all(capped, tmp_path):
    tools, agent, sid, how = capped
    marker = f"cap-{secrets.token_hex(6)}"
    script = tmp_path / "fork_until_refused.py"
    script.write_text(FORK_UNTIL_REFUSED)
    reply = tools.call("terminal_send", {"sessionId": sid, "text": f"python3 {script} {marker}", "timeout": 60,
                                         "idle": 60}, agent=agent)
    refusal = next((line for line in reply.viewport.splitlines() if line.startswith("refused-after")), None)
    assert refusal is not None, reply.viewport
    _, forked, code = refusal.split()
    assert int(code) == 11, refusal  # EAGAIN: the cap, not memory
    assert 64 - 16 <= int(forked) < 64, refusal  # (the shell, bubblewrap and our init count too)
    assert len(running_with(marker)) == int(forked) + 1
    cgroup = session_cgroup(sid)
    assert (how == "cgroup") == (cgroup is not None and os.path.isdir(cgroup))
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)
    assert running_with(marker) == []
    if cgroup is not None:
        wait_for(lambda: not os.path.exists(cgroup), timeout=30)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("capped", CONTAINMENTS, indirect=True)
def test_a_fork_bomb_stays_inside_its_cap_and_the_kernel_keeps_working(capped):
    tools, agent, sid, how = capped
    other = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    tools.call("terminal_send", {"sessionId": sid, "text": ":(){ :|:& };:", "timeout": 2}, agent=agent)
    cgroup = session_cgroup(sid)
    if how == "cgroup":
        current = os.path.join(cgroup, "pids.current")
        wait_for(lambda: int(open(current).read()) >= 60, timeout=30)
        assert int(open(current).read()) <= 64
        wait_for(lambda: int(open(os.path.join(cgroup, "pids.events")).read().split()[1]) > 0, timeout=30)
    reply = tools.call("terminal_send", {"sessionId": other, "text": "echo still-here", "timeout": 30}, agent=agent)
    assert "still-here" in reply.viewport.split("\n", 1)[1], reply.viewport
    pid = os.fork()  # the kernel itself still forks
    if pid == 0:
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)
    if cgroup is not None:
        wait_for(lambda: not os.path.exists(cgroup), timeout=30)


@pytest.mark.parametrize("value", [0, 15, -1, "2048", 1.5, True])
def test_a_bad_max_processes_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match="maxProcesses"):
        TerminalTools(config={"maxProcesses": value})


def test_the_cap_is_for_agents_sessions_by_default_and_can_be_turned_off():
    assert TerminalTools().config.max_processes == 2048
    user = Agent("notebook user")
    tools = TerminalTools(config={"maxProcesses": None}, user=user)
    try:
        agents = tools.call("terminal_open", {"type": "shell"}, agent=Agent("uncapped"))
        users = tools.call("terminal_open", {"type": "shell"}, agent=tools.user)
        assert "processes:" not in agents.motd and "processes:" not in users.motd
    finally:
        tools.shutdown()
    tools = TerminalTools(user=user)
    try:
        assert "processes: " in tools.call("terminal_open", {"type": "shell"}, agent=Agent("capped")).motd
        users = tools.call("terminal_open", {"type": "shell"}, agent=user)
        assert "processes:" not in users.motd  # (the notebook user's own terminal, as any other)
    finally:
        tools.shutdown()


@pytest.mark.skipif(process_cap._own_pids_cgroup() is None, reason="needs a pids cgroup this process may make")
def test_what_a_killed_kernel_left_in_the_cgroup_file_system_is_removed():
    hierarchy = process_cap._own_pids_cgroup().directory
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # a pid that is gone
    left = os.path.join(hierarchy, f"{process_cap.KERNEL_CGROUP_PREFIX}{pid}")
    live = os.path.join(hierarchy, f"{process_cap.KERNEL_CGROUP_PREFIX}{os.getppid()}")
    assert not os.path.exists(live)
    made = [os.path.join(left, "t-0123456789abcdef"), left, live]
    os.makedirs(made[0])
    os.mkdir(live)
    try:
        process_cap._remove_left_behind(hierarchy)
        assert not os.path.exists(left)
        assert os.path.isdir(live)  # (a live process's stays)
    finally:
        for directory in made:
            if os.path.isdir(directory):
                os.rmdir(directory)


def as_a_user_who_is_not_root(work: Callable[[], str]) -> str:
    """``work()`` in a forked child that is a kernel not root and with no cgroup to make (``nobody`` when the tests
    run as root), where a leader's cap is ``RLIMIT_NPROC``; what it returned (an error's name and text when it
    raised, after ``error|``)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            if os.getuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            process_cap._kernel_cgroup = lambda: None
            process_cap._kernel_cpu_cgroup = lambda: None
            try:
                said = work()
            except Exception as exc:  # (handed to the test)
                said = f"error|{type(exc).__name__}: {exc}|"
            os.write(write, said.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        said = answer.read()
    os.waitpid(pid, 0)
    return said


def test_a_user_that_is_not_root_is_capped_by_rlimit_nproc_where_no_cgroup_can_be_made():
    def fork_past_the_cap() -> str:  # (prepare the cap, take it as a leader does, fork)
        cap = process_cap.ProcessCap(20, "t-rlimit")
        join_cap(*cap.make())
        children: list[int] = []
        try:
            while len(children) < 100:
                child = os.fork()
                if child == 0:
                    signal.pause()
                    os._exit(0)
                children.append(child)
            said = f"{cap.describe()}|{cap.nproc}|{len(children)}|never refused"
        except OSError as exc:
            said = f"{cap.describe()}|{cap.nproc}|{len(children)}|{exc.errno}"
        for child in children:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
        return said

    said = as_a_user_who_is_not_root(fork_past_the_cap)
    describe, nproc, forked, code = said.split("|")
    assert "RLIMIT_NPROC" in describe, said
    assert code == "11" and int(forked) <= 20 <= int(nproc), said


#: Forks until refused, each fork's count on a line of its own, then says "filled" and waits (the forks live on:
#: the inner shell that failed is gone, the outer one reads).  dash ends a script at a refused fork.
FILL_THE_CAP = ("sh -c 'n=0; while [ $n -lt 100 ]; do sleep 60 & n=$((n+1)); echo $n; done' 2>/dev/null; "
                "echo filled; read x")
#: Waits for a line, then forks ten times and says so (a refused fork ends it before it says anything).
FORK_TEN_LATER = "read go; n=0; while [ $n -lt 10 ]; do sleep 60 & n=$((n+1)); done; echo forked $n; read x"


def start_capped(command: str, limit: int) -> tuple[subprocess.Popen, str]:
    """``command`` started as a capped, contained session's program is (bubblewrap, the namespace's init, the
    leader's cap); returns the process and its motd line."""
    wrapping = Sandbox(contain=True, max_processes=limit)
    wrapped = wrapping.wrap(["/bin/sh", "-c", command], "/", "/")
    cap = process_cap.ProcessCap(limit, f"t-{secrets.token_hex(4)}")
    leader = cap.make(wrapped.caps_in_namespace)
    proc = subprocess.Popen(wrapped.argv, pass_fds=wrapped.fds, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                            preexec_fn=None if leader is None else lambda: join_cap(*leader))
    for fd in wrapped.fds:
        os.close(fd)
    return proc, cap.describe()


def neighbours_fork(limit: int) -> str:
    """B opens, then A fills its cap, then B forks ten times: what each said, as one line."""
    late, _ = start_capped(FORK_TEN_LATER, limit)
    filler, motd = start_capped(FILL_THE_CAP, limit)
    try:
        forks = [line.strip() for line in iter(filler.stdout.readline, "filled\n")]
        late.stdin.write("go\n")
        late.stdin.flush()
        answer = late.stdout.readline().strip() or "nothing (its fork was refused)"
        return f"{motd}|{forks[-1] if forks else 0}|{answer}"
    finally:
        for proc in (late, filler):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.timeout(120)
def test_a_session_that_fills_its_cap_leaves_the_users_other_sessions_forking():
    """For a kernel that is not root (here a child as ``nobody`` when the tests run as root) with no pids cgroup:
    the cap was ``RLIMIT_NPROC`` over all the user's tasks together, so a session that filled it left each
    session opened before it unable to fork.  In the session's own user namespace it counts that session's
    tasks alone: the one opened first still forks."""
    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap cannot contain a session here: {sandbox_problem()}")
    said = as_a_user_who_is_not_root(lambda: neighbours_fork(20))
    if said.startswith("error|") and "bwrap" in said:
        pytest.skip(f"bubblewrap does not run for a user who is not root here: {said}")
    motd, filled, answer = said.split("|")
    assert "in the session's user namespace" in motd, said
    assert 10 <= int(filled) < 20, said  # (the init and the two shells count too)
    assert answer == "forked 10", said


@pytest.mark.timeout(120)
def test_a_hard_limit_of_the_users_below_what_the_cap_asks_is_the_cap_not_a_failed_open():
    """A user who is not root whose hard ``RLIMIT_NPROC`` is below what the cap asks for (the user's tasks plus
    the kernel's share for the leader, the cap in the namespace) got no session at all: a leader may not raise
    it (``not allowed to raise maximum limit``).  That hard limit is the cap then."""
    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap cannot contain a session here: {sandbox_problem()}")

    def open_under_a_low_hard_limit() -> str:
        hard = process_cap._user_tasks(os.getuid()) + 40
        resource.setrlimit(resource.RLIMIT_NPROC, (hard, hard))
        proc, motd = start_capped("grep '^Max processes' /proc/self/limits; read x", 100)
        try:
            return f"{hard}|{motd}|{proc.stdout.readline().split()}"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    said = as_a_user_who_is_not_root(open_under_a_low_hard_limit)
    if said.startswith("error|") and "bwrap" in said:
        pytest.skip(f"bubblewrap does not run for a user who is not root here: {said}")
    hard, motd, limits = said.split("|")
    assert f"at most {hard} processes and threads at once" in motd, said
    assert limits == str(["Max", "processes", hard, hard, "processes"]), said


@pytest.mark.timeout(120)
def test_the_namespaces_init_sets_the_cap_or_the_open_fails_saying_what_to_do(monkeypatch):
    """The init of a capped session's own user namespace sets ``RLIMIT_NPROC`` to the cap, as it does for a kernel
    that is not root (forced here: root ignores the limit, but it is set all the same); a ``/bin/sh`` that can
    set it by no name fails the open with what to do, and leaves no session and no process behind."""
    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap cannot contain a session here: {sandbox_problem()}")
    monkeypatch.setattr(Sandbox, "caps_in_namespace", property(lambda self: self.wrapped and self.max_processes))
    tools = TerminalTools(config={"maxProcesses": 64, "containment": "namespace"})
    agent = Agent("init-cap")
    try:
        sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
        reply = tools.call("terminal_send", {"sessionId": sid, "text": "ulimit -u"}, agent=agent)
        assert reply.viewport.splitlines()[1] == "64", reply.viewport
        monkeypatch.setattr(sandbox_module, "NPROC_FLAGS", ("-Z",))
        with pytest.raises(BackendError, match="could not set the cap on the session's processes") as refused:
            tools.call("terminal_open", {"type": "shell"}, agent=agent)
        assert "maxProcesses null" in str(refused.value)
        assert [s.session_id for s in tools.call("terminal_list", {}, agent=agent).root] == [sid]
    finally:
        tools.shutdown()


@pytest.mark.skipif(process_cap._own_v1_cgroup("cpu") is None, reason="needs cgroup v1's cpu hierarchy, writable")
@pytest.mark.parametrize("capped", CONTAINMENTS, indirect=True)
def test_all_agents_sessions_share_one_cpu_cgroup_whatever_their_processes_do(capped):
    """Each process its own ``setsid`` (its own autogroup): 100 such spinners slowed the kernel's own Python
    48-fold.  In the kernel's cpu cgroup they weigh as one program against the kernel."""
    tools, agent, sid, how = capped
    reply = tools.call("terminal_send", {"sessionId": sid, "text": "setsid -w sh -c 'cat /proc/self/cgroup'"},
                       agent=agent)
    kernel = f"/{process_cap.KERNEL_CGROUP_PREFIX}{os.getpid()}"
    groups = re.findall(r"^\d+:([^:\n]*):(.*)$", reply.viewport, re.M)
    assert [path for controllers, path in groups if "cpu" in controllers.split(",")] == [kernel], reply.viewport
    if how == "cgroup":
        assert f":pids:{kernel}/{sid}" in reply.viewport, reply.viewport


FORKED_CHILD_LEAVES = textwrap.dedent("""
    import os, sys
    from dsh_terminal_magics import Agent, TerminalTools
    from dsh_terminal_magics.mechanism import process_cap
    tools = TerminalTools(config={"containment": "tracking"})
    agent = Agent("kernel")
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)
    kernel = process_cap._kernel_cgroup()
    while os.path.isdir(os.path.join(kernel, sid)):  # (its removal may be retried a moment)
        os.sched_yield()
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # a worker leaving as multiprocessing's do: the exit handlers run
    os.waitpid(pid, 0)
    print("kernel cgroup kept:", os.path.isdir(kernel))
    print(tools.call("terminal_open", {"type": "shell"}, agent=agent).motd.splitlines()[2])
    tools.shutdown()
""")


@pytest.mark.skipif(process_cap._own_pids_cgroup() is None, reason="needs a pids cgroup this process may make")
def test_a_forked_child_of_the_kernel_leaves_the_kernels_cgroups_alone():
    """A ``multiprocessing`` worker forked from the kernel ran the kernel's exit handlers when it left: the
    kernel's cgroup went with them (when no session held it), and the kernel's next capped open failed."""
    done = subprocess.run([sys.executable, "-c", FORKED_CHILD_LEAVES], capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["kernel cgroup kept: True",
                                        "processes: at most 2048 processes and threads at once (a pids cgroup)"]
