"""The viewport widget against a recording comm: what it sends, how often, and what reaches the session."""
from __future__ import annotations

import gc
import html as html_module
import re
import threading
import time
from typing import Iterator

import comm
import pytest
from ipywidgets import Widget

from dsh_terminal_magics.mechanism import SendRequest
from dsh_terminal_magics.notebook.ansi_html import strip_sgr
from dsh_terminal_magics.notebook.viewport import TerminalViewport
from tests.conftest import wait_for
from tests.tools.test_tools import SLOW_READER, files_made, job_final, start_long_text


class RecordingComm:
    comm_id = "recording"
    kernel = "present"

    def __init__(self, *args, **kwargs) -> None:
        self.messages: list[dict] = []

    def open(self, *args, **kwargs) -> None:
        pass

    def on_msg(self, *args, **kwargs) -> None:
        pass

    def send(self, data=None, metadata=None, buffers=None) -> None:
        self.messages.append(data)

    def close(self, *args, **kwargs) -> None:
        pass


@pytest.fixture
def recording_comm(monkeypatch) -> Iterator[None]:
    monkeypatch.setattr(comm, "create_comm", lambda **kwargs: RecordingComm())
    yield


def updates(widget: Widget, key: str) -> list[str]:
    return [m["state"][key] for m in widget.comm.messages
            if m and m.get("method") == "update" and key in m.get("state", {})]


@pytest.fixture
def view(recording_comm, tools, agent) -> Iterator[TerminalViewport]:
    sid = tools.manager.sync.open(agent, "shell").session_id
    v = TerminalViewport(tools, agent, sid)
    yield v
    v.detach()
    try:
        tools.manager.sync.close(agent, sid)
    except Exception:
        pass


def test_repr_is_stable(view):
    assert repr(view) == f"TerminalViewport(session={view.session_id}, 160x40)"


def test_flood_is_coalesced_and_never_resends_history(view, tools, agent):
    started = time.monotonic()
    r = tools.manager.sync.send(agent, view.session_id, SendRequest("seq 1 1500000", timeout=120))  # ~10 MB
    assert r.wait_reason == "stdin_read"
    elapsed = time.monotonic() - started
    view.flush()
    screens = updates(view.screen, "value")
    assert 1 <= len(screens) <= elapsed * 20 + 5
    assert max(len(s) for s in screens) < 64 * 1024  # the screen, not the history
    assert "1500000" in screens[-1]


def test_input_and_buttons_reach_the_session_from_other_threads(view, tools, agent):
    t = threading.Thread(target=lambda: setattr(view.input, "value", "echo typed-$((6*7))"))
    t.start()
    t.join()
    wait_for(lambda: "typed-42" in view.snapshot())
    assert view.input.value == ""
    tools.manager.sync.send(agent, view.session_id, SendRequest("sleep 100", timeout=0.3, idle=10))
    clicker = threading.Thread(target=lambda: view.buttons[0].click())  # Ctrl-C
    clicker.start()
    clicker.join()
    r = tools.manager.sync.send(agent, view.session_id, SendRequest("echo after", timeout=10))
    assert r.wait_reason == "stdin_read" and r.elapsed < 5
    wait_for(lambda: "after" in view.snapshot())


def test_ctrl_c_stops_a_long_text_still_being_typed(view, tools, agent, tmp_path):
    """Ctrl-C after a long text typed into a program that reads it slowly: the key waited behind the text, and
    the typing went on after it - the shell ran the rest of the text's lines as commands."""
    reader = tmp_path / "reader.py"
    reader.write_text("import sys, time\nfor line in sys.stdin:\n    print('took', flush=True)\n    time.sleep(0.01)\n")
    ran = tmp_path / "ran"
    ran.mkdir()
    tools.manager.sync.send(agent, view.session_id, SendRequest(f"python3 {reader}", timeout=10))
    view.type_text("\n".join(f"touch {ran}/{i}" for i in range(3000)))
    wait_for(lambda: "took" in view.snapshot())
    view.press("Ctrl-C")
    r = tools.manager.sync.send(agent, view.session_id, SendRequest(f"ls {ran} | wc -l", timeout=20))
    assert r.wait_reason == "stdin_read" and r.viewport.splitlines()[-2:] == ["0", "$ "], r
    assert not any(ran.iterdir())


def test_ctrl_c_typed_stops_an_agents_long_text_too(view, tools, agent, tmp_path):
    """The viewport's Ctrl-C while an agent's send is writing a long text to a slow reader: the key threw away
    what was typed, but the send went on writing its text, and the shell ran its lines once the reader was
    interrupted."""
    job, ran = start_long_text(tools, agent, view.session_id, tmp_path, SLOW_READER)
    view.press("Ctrl-C")
    assert job_final(tools, agent, job).status != "running"
    assert files_made(tools, agent, view.session_id, ran) == 0
    assert "input cut by the interrupt or signal" in tools.call("job_output", {"jobId": job}, agent=agent).detail


def test_program_output_is_escaped_and_neutralised(view, tools, agent):
    tools.manager.sync.send(agent, view.session_id, SendRequest(
        r"printf '<script>alert(1)</script> \e]52;c;SGVsbG8=\a\e]8;;javascript:alert(2)\e\\link\e]8;;\e\\ "
        r"\e[1;31m&red\e[0m\n'"))
    view.flush()
    html = updates(view.screen, "value")[-1]
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "javascript:" not in html.split("printf", 1)[-1].split("\n", 1)[-1]
    assert "SGVsbG8" not in html.split("\n")[-2]
    assert 'style="color:#cd3131;font-weight:bold">&amp;red</span>' in html


def test_lines_a_program_rewrites_show_their_last_state(view, tools, agent):
    """Multi-line progress climbs back over its lines (``CSI 2A``) and draws them again: the viewport shows
    the last drawing, as the terminal does, not every update; a DC4 byte of the program's own moves
    nothing."""
    draw = "".join(f"\\e[2A\\e[2Kbar1 {n}%%\\n\\e[2Kbar2 {n}%%\\n" for n in (10, 50, 90))
    tools.manager.sync.send(agent, view.session_id, SendRequest(
        f"printf 'bar1 0%%\\nbar2 0%%\\n{draw}over\\x14ten\\n'"))
    view.flush()
    text = strip_sgr(html_module.unescape(re.sub("<[^>]+>", "", updates(view.screen, "value")[-1])))
    assert text.split("\n", 1)[1] == "bar1 90%\nbar2 90%\noverten\n$ ", text


def test_closed_session_leaves_its_final_view(recording_comm, tools, agent):
    sid = tools.manager.sync.open(agent, "shell").session_id
    view = TerminalViewport(tools, agent, sid)
    tools.manager.sync.send(agent, sid, SendRequest("echo last words"))
    tools.manager.sync.close(agent, sid)
    view.flush()
    assert "last words" in view.screen.value and "status: closed" in view.status.value


def test_a_failing_viewer_never_breaks_ingest(view, tools, agent):
    """Listener exceptions are isolated: the session keeps reading and answering."""
    def broken(_view):
        raise RuntimeError("viewer bug")
    follower = tools.follow(view.session_id, agent=agent, on_change=broken)
    try:
        r = tools.manager.sync.send(agent, view.session_id, SendRequest("echo still-$((6*7))"))
        assert r.wait_reason == "stdin_read" and "still-42" in r.viewport
    finally:
        follower.close()


def test_follow_is_owner_fenced(tools, agent):
    from dsh_terminal_magics import Agent, TerminalError
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    with pytest.raises(TerminalError, match="unknown terminal session"):
        tools.follow(sid, agent=Agent("intruder"))
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_viewport_of_a_session_it_may_not_see_leaves_no_widget_behind(monkeypatch, tools, agent):
    """Refused (a foreign or unknown session), the viewport had built its widgets already: seven stayed open
    in the kernel, and each, collected, raised AttributeError from its close."""
    from dsh_terminal_magics import Agent, TerminalError

    opened: list[RecordingComm] = []

    class CountedComm(RecordingComm):
        closed = False

        def __init__(self, *args, **kwargs) -> None:
            super().__init__()
            self.comm_id = f"counted-{len(opened)}"
            opened.append(self)

        def close(self, *args, **kwargs) -> None:
            self.closed = True

    monkeypatch.setattr(comm, "create_comm", lambda **kwargs: CountedComm())
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    with pytest.raises(TerminalError, match="unknown terminal session"):
        TerminalViewport(tools, Agent("intruder"), sid)
    gc.collect()  # (the refused viewport, collected, closes without an error)
    assert all(c.closed for c in opened), [c.closed for c in opened]  # (none is opened now)
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)
