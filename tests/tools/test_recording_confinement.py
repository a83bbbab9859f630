"""Recordings a model asks for stay inside recordDir; the notebook user may name any path."""
from __future__ import annotations

import json
import os

import pytest

from dsh_terminal_magics import Agent, TerminalError, TerminalTools


@pytest.fixture
def confined(tmp_path):
    root = tmp_path / "recordings"
    tools = TerminalTools(config={"recordDir": str(root)})
    agent = Agent("recorder")
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    yield tools, agent, sid, root
    tools.shutdown()


def outside_files(tmp_path, root):
    return sorted(str(p) for p in tmp_path.rglob("*") if root not in p.parents and p != root)


@pytest.mark.parametrize("path, message", [
    ("/tmp/evil.cast", "plain relative path"),
    ("../evil.cast", "plain relative path"),
    ("sub/../../evil.cast", "plain relative path"),
    ("", "needs a path"),
])
def test_paths_outside_are_refused(confined, tmp_path, path, message):
    tools, agent, sid, root = confined
    before = outside_files(tmp_path, root)
    with pytest.raises(TerminalError, match=message):
        tools.call("terminal_record", {"sessionId": sid, "action": "start", "path": path} if path else
                   {"sessionId": sid, "action": "start"}, agent=agent)
    assert outside_files(tmp_path, root) == before and not os.path.exists("/tmp/evil.cast")


def test_existing_files_fifos_and_symlinks_are_refused(confined, tmp_path):
    tools, agent, sid, root = confined
    root.mkdir()
    (root / "old.cast").write_text("keep me")
    os.mkfifo(root / "pipe.cast")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", root / "link")
    os.symlink(tmp_path / "elsewhere" / "x.cast", root / "dangling.cast")
    for path in ("old.cast", "pipe.cast", "dangling.cast"):
        with pytest.raises(TerminalError, match="already exists"):
            tools.call("terminal_record", {"sessionId": sid, "action": "start", "path": path}, agent=agent)
    with pytest.raises(TerminalError, match="symlinks are not followed"):
        tools.call("terminal_record", {"sessionId": sid, "action": "start", "path": "link/x.cast"}, agent=agent)
    assert (root / "old.cast").read_text() == "keep me"
    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize("target", ["elsewhere", "missing"])
def test_a_symlink_as_the_recordings_directory_is_refused(confined, tmp_path, target):
    """A session's program can put a symlink where the recordings directory goes (the workspace is writable
    to it): a model's recording went wherever it pointed (or a raw FileExistsError came back, dangling)."""
    tools, agent, sid, root = confined
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / target, root)
    with pytest.raises(TerminalError, match="recordings directory .* symlink, which is not followed"):
        tools.call("terminal_record", {"sessionId": sid, "action": "start", "path": "x.cast"}, agent=agent)
    assert list((tmp_path / "elsewhere").iterdir()) == [] and not (tmp_path / "missing").exists()


def test_a_new_file_inside_is_written(confined):
    tools, agent, sid, root = confined
    started = tools.call("terminal_record", {"sessionId": sid, "action": "start", "path": "demo.cast"}, agent=agent)
    assert started.path == str(root / "demo.cast")
    tools.call("terminal_send", {"sessionId": sid, "text": "echo inside"}, agent=agent)
    stopped = tools.call("terminal_record", {"sessionId": sid, "action": "stop"}, agent=agent)
    lines = (root / "demo.cast").read_text().splitlines()
    assert json.loads(lines[0])["version"] == 2 and stopped.events >= 1 and "inside" in "".join(lines[1:])


def test_a_models_recording_stops_growing_at_its_cap(confined, monkeypatch):
    """A model's recording is capped (``MAX_CONFINED_RECORDING_BYTES``, 64 MiB): a program's flood must not
    fill the disk under recordDir (300 MB of output made a 306 MB file).  The event that reaches the cap is
    cut to fit and later ones are dropped; the file stays valid, and the stop result says it was cut."""
    from dsh_terminal_magics import asciicast
    tools, agent, sid, root = confined
    monkeypatch.setattr(asciicast, "MAX_CONFINED_RECORDING_BYTES", 64 * 1024)  # (the same rule, smaller)
    tools.call("terminal_record", {"sessionId": sid, "action": "start", "path": "flood.cast"}, agent=agent)
    tools.call("terminal_send", {"sessionId": sid, "text": "head -c 2000000 /dev/zero | tr '\\0' x | fold -w 100",
                                 "timeout": 60}, agent=agent)
    stopped = tools.call_text("terminal_record", {"sessionId": sid, "action": "stop"}, agent=agent)
    data = (root / "flood.cast").read_bytes()
    assert "[truncated: the recording stopped growing at its size cap]" in stopped, stopped
    assert 48 * 1024 < len(data) <= 64 * 1024, len(data)  # (the event reaching the cap cut to fit)
    assert all(json.loads(line) for line in data.decode().splitlines())
    tools.call("terminal_record", {"sessionId": sid, "action": "start", "path": "small.cast"}, agent=agent)
    tools.call("terminal_send", {"sessionId": sid, "text": "echo small"}, agent=agent)
    assert not tools.call("terminal_record", {"sessionId": sid, "action": "stop"}, agent=agent).truncated


def test_a_fifo_nobody_reads_never_stalls_the_loop(tmp_path):
    """The notebook user may record to a FIFO: with no reader it is refused at once; with a reader that
    never reads, the session and other agents go on and close returns."""
    user = Agent("notebook")
    tools = TerminalTools(user=user)
    other = Agent("other")
    try:
        sid = tools.call("terminal_open", {"type": "shell"}, agent=user).session_id
        osid = tools.call("terminal_open", {"type": "shell"}, agent=other).session_id
        fifo = tmp_path / "slow.cast"
        os.mkfifo(fifo)
        with pytest.raises(TerminalError, match="cannot record to .*: it is a FIFO no process is reading .*; pick "
                                                 "a regular file's path"):
            tools.call("terminal_record", {"sessionId": sid, "action": "start", "path": str(fifo)}, agent=user)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader that never reads
        try:
            tools.call("terminal_record", {"sessionId": sid, "action": "start", "path": str(fifo)}, agent=user)
            r = tools.call("terminal_send", {"sessionId": sid, "text": "head -c 3000000 /dev/zero | tr '\\\\0' x",
                                             "timeout": 60}, agent=user)
            assert r.wait_reason == "stdin_read"
            r = tools.call("terminal_send", {"sessionId": osid, "text": "echo free", "timeout": 5}, agent=other)
            assert r.wait_reason == "stdin_read" and "free" in r.viewport
            stopped = tools.call("terminal_record", {"sessionId": sid, "action": "stop"}, agent=user)
            assert stopped.path == str(fifo)
        finally:
            os.close(reader)
    finally:
        tools.shutdown()
