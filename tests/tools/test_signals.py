"""Signal names: SIGINT and INT alike, in the tools and the magics; nothing else."""
from __future__ import annotations

import pytest

from dsh_terminal_magics import TerminalError
from dsh_terminal_magics.vocabulary import signal_name
from tests.conftest import wait_for


@pytest.mark.parametrize("given", ["SIGINT", "INT", "int", "SigInt", " INT "])
def test_names_with_and_without_the_prefix(given):
    assert signal_name(given) == "SIGINT"


@pytest.mark.parametrize("given", ["SIGSEGV", "KILLALL", "", 2, None])
def test_other_names_are_refused(given):
    with pytest.raises(TerminalError, match="invalid signal"):
        signal_name(given)


def test_the_tool_accepts_the_short_name(tools, agent):
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    tools.call("terminal_send", {"sessionId": sid, "text": "sleep 100", "timeout": 0.5, "idle": 10}, agent=agent)
    result = tools.call("terminal_signal", {"sessionId": sid, "signal": "INT"}, agent=agent)
    assert result.delivered is True
    # wait for the prompt the interrupted command leaves (typing while it is still being printed races it)
    tools.call("terminal_send", {"sessionId": sid, "text": "", "submit": False}, agent=agent)
    r = tools.call("terminal_send", {"sessionId": sid, "text": "echo back-$((6*7))"}, agent=agent)
    assert "back-42" in r.viewport.splitlines()
    with pytest.raises(TerminalError, match="argument 'signal'"):
        tools.call("terminal_signal", {"sessionId": sid, "signal": "SEGV"}, agent=agent)
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.parametrize("signal", ["SIGINT", "SIGTERM"])
def test_a_stopped_foreground_is_continued_to_act_on_the_signal(tools, agent, signal):
    """A shell that stopped itself (``kill -STOP $$``) keeps the terminal, and a stopped process acts on no
    signal but SIGKILL until continued: every signal after it waited for nothing.  SIGINT, SIGTERM and
    SIGHUP continue a stopped group, as kill(1) does for jobs.  (A send continues the session's program
    itself: here the shell stops after its send has ended.)"""
    opened = tools.call("terminal_open", {"type": "shell"}, agent=agent)
    sid = opened.session_id
    r = tools.call("terminal_send", {"sessionId": sid, "text": "(sleep 0.3; kill -STOP $$) &"}, agent=agent)
    assert r.wait_reason == "stdin_read", r
    wait_for(lambda: _state(opened.pid) == "T", timeout=10)
    assert tools.call("terminal_signal", {"sessionId": sid, "signal": signal}, agent=agent).delivered
    wait_for(lambda: _state(opened.pid) != "T", timeout=10)
    r = tools.call("terminal_send", {"sessionId": sid, "text": "echo going-$((6*7))", "idle": 20, "timeout": 30},
                   agent=agent)
    assert r.wait_reason == "stdin_read" and "going-42" in r.viewport.splitlines(), r
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)


def test_the_magic_accepts_both(ip):
    ip.run_line_magic("term_open", "")
    ip.run_line_magic("term_send", "--timeout 0.5 --idle 10 sleep 100")
    assert "delivered SIGINT" in ip.run_line_magic("term_signal", "INT").text
    ip.run_line_magic("term_send", "--no-submit --")
    ip.run_line_magic("term_send", "--timeout 0.5 --idle 10 sleep 100")
    assert "delivered SIGINT" in ip.run_line_magic("term_signal", "SIGINT").text
    ip.run_line_magic("term_send", "--no-submit --")
    assert "back-42" in ip.run_line_magic("term_send", "echo back-$((6*7))").viewport


def _busy_with_input_queued(tools, agent) -> str:
    """A shell running ``sleep 300`` with more text sent to it than the terminal queues.  The send ends at
    its timeout with the rest unsent; what was written waits in the kernel."""
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    r = tools.call("terminal_send", {"sessionId": sid, "text": "sleep 300", "timeout": 0.5, "idle": 10},
                   agent=agent)
    assert r.wait_reason == "timeout", r
    lines = ("y" * 1000 + "\n") * 200
    r = tools.call("terminal_send", {"sessionId": sid, "text": lines, "timeout": 1, "idle": 10}, agent=agent)
    assert r.wait_reason == "timeout" and r.unsent > 0, r
    return sid


def _ends_cleanly(tools, agent, sid: str) -> None:
    r = tools.call("terminal_send", {"sessionId": sid, "text": "echo back-$((6*7))", "timeout": 20, "idle": 10},
                   agent=agent)
    assert r.wait_reason == "stdin_read" and "back-42" in r.viewport.splitlines(), r
    page = tools.call("terminal_read", {"sessionId": sid, "offset": 0, "count": 1000}, agent=agent)
    assert "command not found" not in page.text and "back-42" in page.text
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)


def test_the_interrupt_key_gets_through_input_the_program_does_not_read(tools, agent):
    """Input a busy program does not read queues in the kernel, and a key written after it waits there too:
    C-c after a large text never reached the line discipline, and the command ran on.  The terminal throws
    away unread input at its interrupt key; we do that before the key is written, so it gets there."""
    sid = _busy_with_input_queued(tools, agent)
    r = tools.call("terminal_send", {"sessionId": sid, "text": "", "keys": ["C-c"], "submit": False, "timeout": 20,
                                     "idle": 10}, agent=agent)
    assert r.wait_reason == "stdin_read", r
    _ends_cleanly(tools, agent, sid)


def test_sigint_throws_away_queued_input_as_the_interrupt_key_does(tools, agent):
    """terminal_signal SIGINT stops the command, and the text queued behind it does not then run as
    commands (it did: a screen of ``yyy…: command not found``)."""
    sid = _busy_with_input_queued(tools, agent)
    assert tools.call("terminal_signal", {"sessionId": sid, "signal": "SIGINT"}, agent=agent).delivered
    _ends_cleanly(tools, agent, sid)
