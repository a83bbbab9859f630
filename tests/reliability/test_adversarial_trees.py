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


CASES = {
    "fork storm during close": (
        "n=0; while [ $n -lt 3000 ]; do sleep 100 & n=$((n+1)); done", 0.2),
    "setsid double-fork daemon ignoring all catchable signals": (
        "setsid bash -c 'trap \"\" TERM HUP INT QUIT USR1 USR2 PIPE ALRM; "
        "(trap \"\" TERM HUP INT; sleep 1000 & exec sleep 1000) & exec sleep 1000' &", 0),
    "stopped process": ("sleep 1000 & kill -STOP $!", 0),
    "parent that leaves zombies": (
        "bash -c 'for i in 1 2 3 4 5; do (exit 0) & done; exec sleep 1000' &", 0),
    "process that changes its process group": (
        f"{sys.executable} -c 'import os, time; os.setpgid(0, 0); time.sleep(1000)' &", 0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_close_leaves_nothing(manager, agent, case):
    command, settle = CASES[case]
    sid = manager.sync.open(agent, "shell", options=SessionOptions(close_grace=0.5)).session_id
    background = case == "fork storm during close"
    if background:
        start_send(manager, agent, sid, SendRequest(command), holder="storm")
        wait_for(lambda: len(tree_of(manager, agent, sid)) > 50)
    else:
        manager.sync.send(agent, sid, SendRequest(command, timeout=10))
        wait_for(lambda: len(tree_of(manager, agent, sid)) >= 2)
    victims = tree_of(manager, agent, sid)
    session = manager.loop_thread.call(manager.session, agent, sid)
    token = session.token.encode()
    started = time.monotonic()
    assert manager.sync.close(agent, sid) is True
    elapsed = time.monotonic() - started
    table = process_table()
    alive = {p for p in with_token(token, table, set()) if not table[p].gone}
    assert alive == set(), f"{case}: alive after close: {sorted(alive)}"
    print(f"\nclose time [{case}]: {elapsed:.3f}s for {len(victims)}+ processes", file=sys.stderr)


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
