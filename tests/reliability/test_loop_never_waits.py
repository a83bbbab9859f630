"""Nothing a session's program does makes the loop wait on it: a program that serves a FUSE file system itself
(in a user namespace of its own) and leaves its requests unanswered makes whatever touches that file wait.

A look at such a program hung the loop - every session, and every cell waiting on one - uninterruptibly and
for good: a read of its memory (a sleep's timeout in a page of such a file), an epoll's ``fdinfo`` (its lock
held by a thread adding such a file to it), a ``stat`` of the file it reads under a private ``/dev``; and a
program reading the terminal into such a page holds the terminal's locks, which the next look (its unread
input) waited for.  A contained session can make no page wait so (no ``/dev/fuse``, no ``userfaultfd``);
under process tracking the looks that can wait are done by a worker and given up on.
"""
from __future__ import annotations

import os
import platform
import sys
import time
from typing import Iterator

import pytest

from dsh_terminal_magics import TerminalTools
from tests.reliability.test_containment import send

HOSTILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hostile_fuse.py")


@pytest.fixture
def tracked() -> Iterator[TerminalTools]:
    """Tools whose sessions are contained by tracking their processes (as the user's own are): the host's /dev."""
    tools = TerminalTools(config={"containment": "tracking"})
    yield tools
    tools.shutdown()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["mem", "epoll"])
def test_a_look_never_waits_on_a_programs_own_hung_fuse_mount(tracked, agent, mode, tmp_path):
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse here: no program can mount a FUSE file system")
    hostile = tracked.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    other = tracked.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    try:
        started = time.monotonic()
        r = send(tracked, agent, hostile, f"unshare -Urm {sys.executable} {HOSTILE} {mode} {tmp_path}/fz", timeout=3)
        if "ready" not in r.viewport.splitlines():
            pytest.skip(f"the program could not mount its FUSE file system here: {r.viewport[-300:]}")
        assert r.wait_reason in ("timeout", "idle"), r
        assert time.monotonic() - started < 20
        assert send(tracked, agent, other, "echo other-$((6*7))", timeout=10).viewport.splitlines()[-2] == "other-42"
        assert send(tracked, agent, hostile, "", timeout=1).session_status == "running"
    finally:
        closed = tracked.call("terminal_close", {"sessionId": hostile}, agent=agent)
        tracked.call("terminal_close", {"sessionId": other}, agent=agent)
    assert closed.outcome == "closed", closed


def test_a_contained_session_can_make_no_page_of_its_wait(tools, agent, tmp_path):
    """The program that reads the terminal into a page of its own hung FUSE file (``hostile_fuse.py tty``) cannot
    start in a contained session, nor can it handle its page faults itself (``userfaultfd``, which a root
    kernel's contained session could: it keeps ``CAP_SYS_PTRACE``); text sent after it is taken as ever."""
    opened = tools.call("terminal_open", {"type": "shell"}, agent=agent)
    sid = opened.session_id
    try:
        if "containment: pid namespace" not in opened.motd:
            pytest.skip("no bubblewrap here: sessions are contained by tracking their processes")
        r = send(tools, agent, sid, f"unshare -Urm {sys.executable} {HOSTILE} tty {tmp_path}/fz", timeout=10)
        assert "No such file or directory: '/dev/fuse'" in r.viewport and r.exit_code == 1, r
        number = {"x86_64": 323, "aarch64": 282}[platform.machine()]
        r = send(tools, agent, sid, f"python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                                    f"print(libc.syscall({number}, 0), ctypes.get_errno())'", timeout=10)
        assert r.viewport.splitlines()[-2] == "-1 1", r  # EPERM
        r = send(tools, agent, sid, "x" * 200 + "; echo next-$((6*7))", timeout=10)
        assert r.wait_reason == "stdin_read" and "next-42" in r.viewport.splitlines(), r
    finally:
        tools.call("terminal_close", {"sessionId": sid}, agent=agent)


def test_a_read_that_waits_is_given_up_on_and_its_pid_left_alone_until_it_comes_back(tmp_path):
    """GuardedReads with reads that wait for real: opening a FIFO no one writes waits as a read of a hung FUSE
    page does.  The read is given up on, that pid is not read again until the read comes back, and past
    MAX_STUCK_READS such reads nothing is tried; once they come back all is read again."""
    from dsh_terminal_magics.mechanism.process_tree import MAX_STUCK_READS, GuardedReads
    reads = GuardedReads()
    plain = tmp_path / "plain"
    plain.write_bytes(b"answer")
    fifos = []
    for index in range(MAX_STUCK_READS):
        fifo = tmp_path / f"fifo{index}"
        os.mkfifo(fifo)
        fifos.append(fifo)
        started = time.monotonic()
        assert reads.read(str(fifo), 1000 + index) is None
        assert time.monotonic() - started < 10
    assert reads.read(str(plain), 1000) is None  # (its pid's read has not come back)
    assert reads.read(str(plain), 2000) is None  # (as many stuck as allowed: nothing is tried)
    for fifo in fifos:  # (a writer lets each open, and its read, come back)
        fd = os.open(fifo, os.O_WRONLY)
        os.close(fd)
    deadline = time.monotonic() + 30
    while reads.read(str(plain), 1000) != b"answer":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert reads.read(str(plain), 2000) == b"answer"


def test_the_reads_worker_ends_when_idle_and_the_next_read_starts_another(tmp_path):
    """No thread outlives its use: the guarded reads' worker ends once idle, and a read after that is served."""
    from dsh_terminal_magics.mechanism.process_tree import GuardedReads
    reads = GuardedReads(idle_seconds=0.1)
    plain = tmp_path / "plain"
    plain.write_bytes(b"answer")
    for _ in range(3):
        assert reads.read(str(plain), 1000) == b"answer"
        worker = reads._worker
        assert worker is not None and worker.thread.is_alive(), "a read runs in a worker thread"
        worker.thread.join(timeout=30)
        assert not worker.thread.is_alive() and reads._worker is None, "an idle worker ends"


def test_a_flooding_sessions_turn_shrinks_while_another_sessions_send_waits(tools, agent):
    """A session printing flat out reads a turn's worth of output at a time; while another session's send
    waits - it needs several turns, each behind one such batch - the batch is cut to the waited budget, and
    it is whole again once that send has ended.  (Another agent's ``echo hi`` beside a flooding session took
    14 ms, against 7.8 ms so: ``bench/run.py``'s hostile flood.)"""
    from dsh_terminal_magics.mechanism import pty_child
    from tests.conftest import wait_for
    flood = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    other = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    child = tools.manager.session(agent, flood).child
    busy = pty_child._BUSY
    batch = 64 * pty_child.MIN_BATCH
    whole = tools.manager.loop_thread.call(busy.share, child, batch, time.monotonic())
    job = tools.call("terminal_send", {"sessionId": other, "text": "sleep 30", "run_in_background": True},
                     agent=agent).job_id
    waited = tools.manager.loop_thread.call(busy.share, child, batch, time.monotonic())
    assert waited == int(whole * pty_child.WAITED_TURN_BUDGET / pty_child.TURN_BUDGET) < whole, (waited, whole)
    # Its own send waiting does not cut its own batch.
    tools.call("terminal_send", {"sessionId": flood, "text": "sleep 30", "run_in_background": True}, agent=agent)
    tools.call("job_kill", {"jobId": job}, agent=agent)
    wait_for(lambda: tools.manager.session(agent, other).operation is None)
    assert tools.manager.loop_thread.call(busy.share, child, batch, time.monotonic()) == whole
