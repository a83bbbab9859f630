"""Nothing a session's program does makes the loop wait on it: a look at a program that serves a FUSE file
system itself (a user namespace of its own, as any session can make) and leaves its requests unanswered.

Each case hung the loop - every session, and every cell waiting on one - uninterruptibly and for good: a
``stat`` of the file a program reads under a private ``/dev``, a read of its memory (a sleep's timeout in a
page of such a file) and an epoll's ``fdinfo`` (its lock held by a thread adding such a file to it).
"""
from __future__ import annotations

import os
import sys
import time

import pytest

HOSTILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hostile_fuse.py")


def send(tools, agent, sid: str, text: str, timeout: float):
    return tools.call("terminal_send", {"sessionId": sid, "text": text, "timeout": timeout}, agent=agent)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["stat", "mem", "epoll"])
def test_a_program_serving_its_own_hung_fuse_mount_never_holds_the_loop(tools, agent, mode):
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse here: no program can mount a FUSE file system")
    hostile = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    other = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    try:
        where = "/tmp/fz"
        if mode == "stat":  # (a device path is matched by its node only under a /dev of the session's own)
            if send(tools, agent, hostile, "tty", 10).viewport.splitlines()[-2] != "/dev/console":
                pytest.skip("the session has the host's /dev here (no bubblewrap): no path of its is matched so")
            where = "/dev/fz"
        started = time.monotonic()
        r = send(tools, agent, hostile, f"unshare -Urm {sys.executable} {HOSTILE} {mode} {where}", 3)
        if "ready" not in r.viewport.splitlines():
            pytest.skip(f"the program could not mount its FUSE file system here: {r.viewport[-300:]}")
        assert r.wait_reason in ("timeout", "idle"), r
        assert time.monotonic() - started < 20
        assert send(tools, agent, other, "echo other-$((6*7))", 10).viewport.splitlines()[-2] == "other-42"
        assert send(tools, agent, hostile, "", 1).session_status == "running"
    finally:
        closed = tools.call("terminal_close", {"sessionId": hostile}, agent=agent)
        tools.call("terminal_close", {"sessionId": other}, agent=agent)
    assert closed.outcome == "closed", closed
