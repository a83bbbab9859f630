"""Whatever runs in a session, close leaves nothing behind.  Close times are printed for the README."""
from __future__ import annotations

import sys
import time

import pytest

from dsh_terminal_magics.mechanism import SendRequest, SessionOptions
from dsh_terminal_magics.mechanism.process_tree import process_table, with_token
from tests.conftest import start_send, wait_for


def tree_of(manager, agent, sid) -> set[int]:
    """Live processes carrying this session's token (checked independently of close)."""
    session = manager.loop_thread.call(manager.session, agent, sid)
    table = process_table()
    return {p for p in with_token(session.token.encode(), table, set()) if not table[p].gone}


#: A fork chain: each process forks the next and waits for it, and forks another when it dies; bounded (3000
#: deep) so that a close that misses it cannot exhaust the pids.
FORK_CHAIN = ("import os, signal, time\nif os.fork() == 0:\n    os.setsid()\n"
              "    for sig in (signal.SIGTERM, signal.SIGHUP):\n        signal.signal(sig, signal.SIG_IGN)\n"
              "    depth = 0\n    while depth < 3000:\n        if os.fork():\n            os.wait()\n"
              "        else:\n            depth += 1\n    time.sleep(1000)\n")

CASES = {
    "fork storm during close": (
        "n=0; while [ $n -lt 3000 ]; do sleep 100 & n=$((n+1)); done", 51),
    "setsid double-fork daemon ignoring all catchable signals": (
        "setsid bash -c 'trap \"\" TERM HUP INT QUIT USR1 USR2 PIPE ALRM; "
        "(trap \"\" TERM HUP INT; sleep 1000 & exec sleep 1000) & exec sleep 1000' &", 2),
    "stopped process": ("sleep 1000 & kill -STOP $!", 2),
    "parent that leaves zombies": (
        "bash -c 'for i in 1 2 3 4 5; do (exit 0) & done; exec sleep 1000' &", 2),
    "process that changes its process group": (
        f"{sys.executable} -c 'import os, time; os.setpgid(0, 0); time.sleep(1000)' &", 2),
    # Only the newest process runs, and a new one comes every millisecond or so - faster than a scan of
    # /proc; a process whose child is killed starts another (this escaped close: dozens left, adopted by init).
    "fork chain, a setsid daemon ignoring TERM and HUP": (
        f"{sys.executable} -c '{FORK_CHAIN}' &", 200),
}


@pytest.mark.parametrize("case", list(CASES))
def test_close_leaves_nothing(manager, agent, case):
    command, processes = CASES[case]  # (closed once the session has this many)
    sid = manager.sync.open(agent, "shell", options=SessionOptions(close_grace=0.5)).session_id
    background = case == "fork storm during close"
    if background:
        start_send(manager, agent, sid, SendRequest(command), holder="storm")
        wait_for(lambda: len(tree_of(manager, agent, sid)) >= processes)
    else:
        manager.sync.send(agent, sid, SendRequest(command, timeout=10))
        wait_for(lambda: len(tree_of(manager, agent, sid)) >= processes)
    victims = tree_of(manager, agent, sid)
    session = manager.loop_thread.call(manager.session, agent, sid)
    token = session.token.encode()
    started = time.monotonic()
    assert manager.sync.close(agent, sid) is True
    elapsed = time.monotonic() - started
    table = process_table()
    alive = {p for p in with_token(token, table, set()) if not table[p].gone}
    if alive:
        end_leftovers(token)
    assert alive == set(), f"{case}: {len(alive)} alive after close: {sorted(alive)[:20]}"
    print(f"\nclose time [{case}]: {elapsed:.3f}s for {len(victims)}+ processes", file=sys.stderr)


def end_leftovers(token: bytes) -> None:
    """What a failed close left of the test's session (found by its token): stopped, then killed, by pid,
    until none is left - so a failure here does not leave a forking process to the rest of the run."""
    import os
    import signal
    for _ in range(10000):
        table = process_table()
        left = [p for p in with_token(token, table, set()) if not table[p].gone]
        if not left:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in left:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass


def test_process_holding_the_pty_after_the_shell_exits(manager, agent):
    sid = manager.sync.open(agent, "shell").session_id
    manager.sync.send(agent, sid, SendRequest("sleep 1000 & disown"))
    held = tree_of(manager, agent, sid)
    r = manager.sync.send(agent, sid, SendRequest("exit 4"))
    assert (r.wait_reason, r.exit_code) == ("session_exit", 4)
    orphans = tree_of(manager, agent, sid)
    assert orphans and orphans <= held  # the sleep outlived the shell, holding the slave
    token = manager.loop_thread.call(manager.session, agent, sid).token.encode()
    started = time.monotonic()
    manager.sync.close(agent, sid)
    table = process_table()
    assert not {p for p in with_token(token, table, set()) if not table[p].gone}
    print(f"\nclose time [holds the PTY after the shell exited]: {time.monotonic() - started:.3f}s",
          file=sys.stderr)
