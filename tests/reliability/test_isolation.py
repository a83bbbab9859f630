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
