"""Each wrong call: one clear TerminalError, nothing changed."""
from __future__ import annotations

import pytest

from dsh_terminal_magics import TerminalError
from dsh_terminal_magics.errors import (BackendError, InvalidArgumentError, SessionBusyError,
                                        SessionNotRunningError)
from dsh_terminal_magics.mechanism import SendRequest
from tests.conftest import start_send, wait_for


def test_unknown_backend_lists_registered_types(manager, agent):
    with pytest.raises(BackendError, match=r"unknown terminal type 'zsh'.*python, shell"):
        manager.sync.open(agent, "zsh")
    assert manager.sync.list(agent) == []


@pytest.mark.parametrize("cwd", ["/definitely/not/here", "/etc/hostname"])
def test_bad_cwd(manager, agent, cwd):
    with pytest.raises(InvalidArgumentError, match="not an existing directory"):
        manager.sync.open(agent, "shell", cwd=cwd)
    assert manager.sync.list(agent) == []


def test_a_cwd_through_a_symlink_is_kept_as_named(manager, agent, tmp_path):
    """A shell keeps the directory as it was named when ``PWD`` says so (as after ``cd link`` in a terminal):
    without it - or with the kernel's own ``PWD`` - bash fell back to the resolved path, and ``cd ..`` went to
    the target's parent."""
    (tmp_path / "elsewhere" / "real").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere" / "real")
    info = manager.sync.open(agent, "shell", cwd=str(tmp_path / "link"))
    try:
        r = manager.sync.send(agent, info.session_id, SendRequest("pwd; cd ..; pwd"))
        assert r.viewport.splitlines()[1:3] == [str(tmp_path / "link"), str(tmp_path)], r.viewport
    finally:
        manager.sync.close(agent, info.session_id)


def test_a_working_directory_that_was_deleted_is_one_clear_error(manager, agent, tmp_path, monkeypatch):
    """A notebook's folder deleted or moved away leaves the kernel in it: opening a session (which starts in
    the kernel's directory) or recording to a relative path said only ``FileNotFoundError: [Errno 2]``."""
    from dsh_terminal_magics.asciicast import open_recording

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    for cwd in (None, "sub", str(tmp_path)):
        with pytest.raises(TerminalError, match=r"working directory \(the kernel's\) no longer exists .*%cd DIR"):
            manager.sync.open(agent, "shell", cwd=cwd)
    with pytest.raises(TerminalError, match="no longer exists"):
        open_recording("demo.cast", 24, 80)
    assert manager.sync.list(agent) == []
    monkeypatch.chdir(tmp_path)
    manager.sync.close(agent, manager.sync.open(agent, "shell").session_id)  # (and all is well again)


@pytest.mark.parametrize("name", ["two\nlines", "tab\there", "osc\x1b]52;c;aGk=\x07", "bidi\u202eevil", "line\u2028sep"])
def test_a_session_name_with_a_control_character_is_refused(manager, agent, name):
    """A name is shown in the lines a model reads (a session list): a line break in one made a line of its own,
    an ESC in one reached the user's terminal from ``%term_list``."""
    with pytest.raises(InvalidArgumentError, match="session name .* holds .*: names are shown in the lines"):
        manager.sync.open(agent, "shell", name=name)
    assert manager.sync.list(agent) == []
    info = manager.sync.open(agent, "shell", name="größe 😀 main")  # (any printable text is a name)
    manager.sync.close(agent, info.session_id)


def test_cwd_is_used(manager, agent, tmp_path):
    info = manager.sync.open(agent, "shell", cwd=str(tmp_path))
    try:
        r = manager.sync.send(agent, info.session_id, SendRequest("pwd"))
        assert str(tmp_path) in r.viewport
    finally:
        manager.sync.close(agent, info.session_id)


def test_send_errors(manager, agent):
    sid = manager.sync.open(agent, "shell").session_id
    try:
        op = start_send(manager, agent, sid, SendRequest("sleep 100"), holder="job j-1234")
        with pytest.raises(SessionBusyError, match="job j-1234 holds its send reservation"):
            manager.sync.send(agent, sid, SendRequest("echo no"))
        with pytest.raises(InvalidArgumentError, match="NUL"):
            manager.sync.send(agent, sid, SendRequest("a\x00b"))
        with pytest.raises(InvalidArgumentError, match="invalid signal 'SIGFOO'"):
            manager.sync.signal(agent, sid, "SIGFOO")
        session = manager.loop_thread.call(manager.session, agent, sid)
        wait_for(lambda: _comm(session.foreground_pgid()) == "sleep")  # sleep has exec'd
        manager.sync.signal(agent, sid, "SIGINT")
        result = manager.loop_thread.run(_await(op.future))
        assert result.wait_reason == "stdin_read", result
        with pytest.raises(InvalidArgumentError, match="use terminal_close"):
            manager.sync.signal(agent, sid, "SIGKILL")
        with pytest.raises(InvalidArgumentError, match="timeout"):
            manager.sync.send(agent, sid, SendRequest("echo", timeout=-1))
        with pytest.raises(InvalidArgumentError, match="larger than"):
            manager.sync.send(agent, sid, SendRequest("x" * (2 * 1024 * 1024)))
        assert manager.sync.send(agent, sid, SendRequest("echo fine")).exit_code == 0
        manager.sync.send(agent, sid, SendRequest("exit 0"))
        with pytest.raises(SessionNotRunningError, match="has exited"):
            manager.sync.send(agent, sid, SendRequest("echo"))
        assert [s.status for s in manager.sync.list(agent)] == ["exited"]
    finally:
        manager.sync.close(agent, sid)
    with pytest.raises(TerminalError, match="unknown terminal session"):
        manager.sync.send(agent, sid, SendRequest("echo"))


async def _await(fut):
    return await fut


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def test_a_line_longer_than_a_line_mode_reader_takes_is_refused(manager, agent, tmp_path):
    """The kernel keeps 4095 bytes of a line for a program reading whole lines and drops the rest: a
    10,000-byte line sent to ``input()`` arrived as 4095 and the send ended as if all went in.  Now it is
    refused, nothing written; the shell's own line editor (a heredoc) takes long lines as before."""
    sid = manager.sync.open(agent, "shell", cwd=str(tmp_path)).session_id
    try:
        r = manager.sync.send(agent, sid, SendRequest("python3 -c \"print('got', len(input()))\""))
        assert r.wait_reason == "stdin_read"
        with pytest.raises(InvalidArgumentError, match=r"line 1 of the text is 10000 bytes.*line mode.*4095"):
            manager.sync.send(agent, sid, SendRequest("x" * 10000))
        r = manager.sync.send(agent, sid, SendRequest("y" * 4095))  # the longest that fits: still taken
        assert "got 4095" in r.viewport, r.viewport[-200:]
        r = manager.sync.send(agent, sid, SendRequest("cat > long.txt <<'EOF'\n" + "z" * 10000 + "\nEOF"))
        assert r.exit_code == 0 and (tmp_path / "long.txt").read_text() == "z" * 10000 + "\n"
    finally:
        manager.sync.close(agent, sid)


def test_an_interrupt_throws_away_input_typed_ahead(manager, agent, tmp_path):
    """An interrupt is the terminal's Ctrl-C: the kernel signals the foreground group and discards input not
    read yet.  A kill() left it: text queued behind the interrupted command ran after it (and an interrupt
    while the shell was still reading 'sleep 100' left 'leep 100' to run as a command)."""
    sid = manager.sync.open(agent, "shell", cwd=str(tmp_path)).session_id
    try:
        session = manager.loop_thread.call(manager.session, agent, sid)
        op = start_send(manager, agent, sid, SendRequest("sleep 30", timeout=30), holder="test")
        wait_for(lambda: manager.loop_thread.call(session.foreground_pgid) not in (0, session.pid))
        manager.loop_thread.call(session.type_input, b"touch queued-behind\r")
        manager.loop_thread.call(op.cancel)
        wait_for(lambda: op.done)
        r = manager.sync.send(agent, sid, SendRequest("ls; echo listed"))
        assert "listed" in r.viewport and not (tmp_path / "queued-behind").exists(), r.viewport
    finally:
        manager.sync.close(agent, sid)
