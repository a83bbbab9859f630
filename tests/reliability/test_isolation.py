"""Two agents and the notebook owner in one kernel: zero crossings."""
from __future__ import annotations

import re

import pytest

from dsh_terminal_magics import Agent, TerminalError
from dsh_terminal_magics.errors import UnknownSessionError
from dsh_terminal_magics.owners import new_id


def test_owners_never_reach_each_other(ip, magics):
    from dsh_terminal_magics.notebook.viewport import TerminalViewport

    tools = magics.tools
    alice, bob = Agent("agent"), Agent("agent")
    ip.user_ns.update(alice=alice, bob=bob)
    mine = ip.run_line_magic("term_open", "--name nb").session_id
    a_sid = ip.run_line_magic("term_open", "--agent alice --name shared-name").session_id
    b_sid = tools.call("terminal_open", {"type": "shell", "name": "shared-name"}, agent=bob).session_id
    a_job = tools.call("terminal_send", {"sessionId": a_sid, "text": "sleep 100", "run_in_background": True},
                       agent=alice).job_id
    owners = {magics.owner: (mine, None), alice: (a_sid, a_job), bob: (b_sid, None)}
    for caller in owners:
        listed = {s.session_id for s in tools.call("terminal_list", {}, agent=caller).root}
        assert listed == {owners[caller][0]}
        for owner, (sid, job) in owners.items():
            if owner is caller:
                continue
            for name, args in [("terminal_send", {"sessionId": sid, "text": "echo x"}),
                               ("terminal_read", {"sessionId": sid}),
                               ("terminal_signal", {"sessionId": sid, "signal": "SIGINT"}),
                               ("terminal_close", {"sessionId": sid})]:
                with pytest.raises(UnknownSessionError):
                    tools.call(name, args, agent=caller)
            if job:
                for name in ("job_output", "job_kill"):
                    with pytest.raises(TerminalError, match="unknown job"):
                        tools.call(name, {"jobId": job}, agent=caller)
            with pytest.raises(UnknownSessionError):
                TerminalViewport(tools, caller, sid)
    # by name, too: -s resolves only among the caller's own sessions
    with pytest.raises(Exception, match="no terminal session"):
        ip.run_line_magic("term_send", "-s shared-name echo")
    # guessed ids
    for _ in range(300):
        guess = new_id("t")
        with pytest.raises(UnknownSessionError):
            tools.call("terminal_read", {"sessionId": guess}, agent=alice)
    assert tools.call("job_kill", {"jobId": a_job}, agent=alice).status == "killed"
    tools.close_owner(alice)
    tools.close_owner(bob)


def test_ids_carry_64_random_bits():
    ids = {new_id("t") for _ in range(20_000)}
    assert len(ids) == 20_000
    assert all(re.fullmatch(r"t-[0-9a-f]{16}", i) for i in ids)
    # every one of the 64 bits is set in about half of the ids (a counter or a clock would fail this)
    values = [int(i[2:], 16) for i in ids]
    for bit in range(64):
        ones = sum((v >> bit) & 1 for v in values)
        assert 9_000 < ones < 11_000, (bit, ones)


def _in_a_fork(work) -> dict:
    """``work()``'s JSON-able answer (or its error), run in a child forked from this process - threads, loop,
    sessions and all, as ``os.fork`` or multiprocessing's 'fork' start method copies them."""
    import json
    import os
    import time

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # (never returns into pytest)
        try:
            os.close(read_end)
            try:
                answer = work()
            except BaseException as exc:
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            os.write(write_end, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + 60
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            os.close(read_end)
            raise AssertionError("the forked child did not finish in 60 s")
        time.sleep(0.02)
    with os.fdopen(read_end, "rb") as answer:
        return json.loads(answer.read() or b'{"error": "no answer"}')


def test_a_forked_child_works_with_sessions_of_its_own_and_leaves_the_parents_alone(tools, agent):
    """A fork of a process with sessions (``os.fork``, multiprocessing's 'fork' start method): the parent's
    sessions are refused there with an error saying why; a ``TerminalTools`` made in the child opens, sends
    and shuts down sessions of its own; and the parent's go on.  Before, the child's open waited for spawner
    threads that stayed in the parent, and its shutdown ended the parent's sessions (the child's watchdog
    swept with the parent's token)."""
    import os

    from dsh_terminal_magics import TerminalTools
    from dsh_terminal_magics.mechanism.fork_server import ForkServer
    from dsh_terminal_magics.mechanism.watchdog import Watchdog

    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    tools.call("terminal_send", {"sessionId": sid, "text": "echo before"}, agent=agent)
    parents_ends = {_identity(ForkServer._requests.fileno()), _identity(Watchdog._proc.stdin.fileno())}

    def child() -> dict:
        answer: dict = {"inherited": len(parents_ends & _open_files())}
        try:
            tools.call("terminal_list", {}, agent=agent)
        except TerminalError as exc:
            answer["parents"] = str(exc)
        own, mine = TerminalTools(), Agent("child")
        try:
            opened = own.call("terminal_open", {"type": "shell"}, agent=mine).session_id
            answer["viewport"] = own.call("terminal_send", {"sessionId": opened, "text": "echo $((6*7))"},
                                          agent=mine).viewport
        finally:
            own.shutdown()
        return answer

    answer = _in_a_fork(child)
    assert "error" not in answer, answer["error"]
    assert "fork" in answer["parents"] and "TerminalTools made in this process" in answer["parents"]
    assert "\n42\n" in answer["viewport"]
    assert answer["inherited"] == 0  # (the server and watchdog see this process go even while a fork lives)
    after = tools.call("terminal_send", {"sessionId": sid, "text": "echo after"}, agent=agent)
    assert after.session_status == "running" and "\nafter\n" in after.viewport
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)



def _identity(fd: int) -> tuple[int, int]:
    import os
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _open_files() -> set[tuple[int, int]]:
    """What this process's descriptors refer to (device, inode)."""
    import os
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(_identity(int(fd)))
        except OSError:  # (listdir's own descriptor, closed by now)
            pass
    return found
