"""The screen features through the tools API and the magics: keys, terminal_resize, terminal_record."""
from __future__ import annotations

import json

import pytest
from IPython.core.error import UsageError

from dsh_terminal_magics import TerminalError


def test_keys_resize_and_record_through_the_tools(agent, tmp_path):
    from dsh_terminal_magics import TerminalTools
    tools = TerminalTools(config={"recordDir": str(tmp_path)})
    try:
        _keys_resize_and_record(tools, agent, tmp_path)
    finally:
        tools.shutdown()


def _keys_resize_and_record(tools, agent, tmp_path):
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    r = tools.call("terminal_send", {"sessionId": sid, "text": "echo abc", "submit": False,
                                     "keys": ["Left", "Left", "X", "Enter"]}, agent=agent)
    assert r.viewport.splitlines()[1] == "aXbc"  # cursor keys edited the line before Enter
    resized = tools.call("terminal_resize", {"sessionId": sid, "rows": 30, "cols": 120}, agent=agent)
    assert resized.model_dump(by_alias=True) == {"sessionId": sid, "rows": 30, "cols": 120}
    assert tools.call_text("terminal_resize", {"sessionId": sid, "rows": 1, "cols": 120},
                           agent=agent).startswith("[error]")
    cast = tmp_path / "t.cast"
    started = tools.call_text("terminal_record", {"sessionId": sid, "action": "start", "path": "t.cast"},
                              agent=agent)
    assert started.startswith(f"sessionId: {sid} recording: start")
    tools.call("terminal_send", {"sessionId": sid, "text": "echo recorded"}, agent=agent)
    stopped = tools.call("terminal_record", {"sessionId": sid, "action": "stop"}, agent=agent)
    assert stopped.events >= 1 and json.loads(cast.read_text().splitlines()[0])["width"] == 120
    with pytest.raises(TerminalError, match="unknown key 'Hyper'"):
        tools.call("terminal_send", {"sessionId": sid, "text": "", "keys": ["Hyper"]}, agent=agent)
    screen = tools.call("terminal_send", {"sessionId": sid, "text": "less /etc/passwd"}, agent=agent)
    text = tools.render(screen)
    assert text.startswith("[wait: stdin_read] [session: running] [screen: 30x120 cursor ")
    assert screen.model_dump(by_alias=True, exclude_none=True)["screen"]["rows"] == 30
    tools.call("terminal_send", {"sessionId": sid, "text": "q", "submit": False}, agent=agent)


# A reader of single keys that reports what it got: the Enter a send adds after its keys would end its read early.
TWO_KEYS = "read -rn2 k; echo \"<$k>\""


def test_named_keys_are_pressed_without_an_enter_unless_asked(agent):
    from dsh_terminal_magics import TerminalTools
    tools = TerminalTools()
    try:
        sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
        for keys, submit, expected in ((["a"], None, None), (["a", "Enter"], None, "<a>"), (["a"], True, "<a>"),
                                       (["a", "b"], None, "<ab>")):
            tools.call("terminal_send", {"sessionId": sid, "text": TWO_KEYS}, agent=agent)
            call = {"sessionId": sid, "text": "", "keys": keys, **({} if submit is None else {"submit": submit})}
            r = tools.call("terminal_send", call, agent=agent)
            assert r.wait_reason == "stdin_read", (keys, submit, r)
            if expected is None:  # (read still waits for its second key: the send pressed no Enter)
                assert "<" not in r.viewport, (keys, r.viewport)
                r = tools.call("terminal_send", {"sessionId": sid, "text": "", "keys": ["b"]}, agent=agent)
                expected = "<ab>"
            assert expected in r.viewport and r.viewport.rstrip().endswith("$"), (keys, submit, r.viewport)
        # Text alone still gets its Enter.
        assert tools.call("terminal_send", {"sessionId": sid, "text": "echo done"}, agent=agent).exit_code == 0
    finally:
        tools.shutdown()


def test_magic_keys_press_no_enter_unless_named(ip):
    ip.run_line_magic("term_open", "")
    ip.run_line_magic("term_send", TWO_KEYS)
    r = ip.run_line_magic("term_send", "--keys x")
    assert r.wait_reason == "stdin_read" and "<" not in r.viewport
    assert "<xy>" in ip.run_line_magic("term_send", "--keys y").viewport
    ip.run_line_magic("term_send", TWO_KEYS)
    assert "<z>" in ip.run_line_magic("term_send", "--keys z,Enter").viewport
    r = ip.run_line_magic("term_send", "echo after")
    assert r.exit_code == 0 and "after" in r.viewport


@pytest.mark.parametrize("what", ["fifo", "/dev/zero", "too big", "a directory"])
def test_replaying_what_is_not_a_recording_file_is_one_clear_error(ip, tmp_path, what):
    """Opening a FIFO waited for a writer and ``/dev/zero`` was read without end: either held the kernel for
    good (pytest-timeout fails this test if it does); a file past the replay's cap is refused unread."""
    import os

    from dsh_terminal_magics.vocabulary import MAX_REPLAY_BYTES

    path = {"/dev/zero": "/dev/zero", "a directory": str(tmp_path)}.get(what, str(tmp_path / "x.cast"))
    if what == "fifo":
        os.mkfifo(path)
    elif what == "too big":
        with open(path, "wb") as f:
            f.truncate(MAX_REPLAY_BYTES + 1)  # (sparse: no disk)
    problem = "it holds .* bytes, more than the .* a replay loads" if what == "too big" else "it is not a regular file"
    with pytest.raises(UsageError, match=f"cannot read recording .*: {problem}; pass a .cast file's path"):
        ip.run_line_magic("term_replay", path)


def test_magics_keys_resize_record_replay(ip, capsys, tmp_path):
    ip.run_line_magic("term_open", "")
    r = ip.run_line_magic("term_send", "--no-submit --keys Left,Left,Y,Enter echo xyz")
    assert "xYyz" in r.viewport
    assert ip.run_line_magic("term_resize", "25 90").text.endswith("to 25x90")
    cast = tmp_path / "m.cast"
    ip.run_line_magic("term_record", f"start {cast}")
    ip.run_line_magic("term_send", "echo in-the-recording")
    assert "events" in ip.run_line_magic("term_record", "stop").text
    capsys.readouterr()
    ip.run_line_magic("term_replay", str(cast))
    assert "in-the-recording" in capsys.readouterr().out
    with pytest.raises(UsageError, match="cannot read recording .*: no such file or directory; pass the path of a "
                                         r"\.cast file \(one %term_record made\)"):
        ip.run_line_magic("term_replay", str(tmp_path / "missing.cast"))
    with pytest.raises(UsageError, match="unknown key"):
        ip.run_line_magic("term_send", "--keys Nope echo")
    r = ip.run_line_magic("term_send", "top -d 5")
    out = capsys.readouterr().out
    assert "[screen 25x90]" in repr(r) and "PID" in out
    ip.run_line_magic("term_send", "--no-submit q")
