"""Terminal queries are answered like xterm does, from the session's real screen state."""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

from dsh_terminal_magics.mechanism import SendRequest
from dsh_terminal_magics.mechanism.output import OutputNormalizer, RawRing
from dsh_terminal_magics.mechanism.screen_tracker import ScreenTracker
from dsh_terminal_magics.mechanism.terminal_replies import (HOLD_ANSWERS, MAX_ANSWERS, MAX_HELD_BYTES, PRIMARY_DA,
                                                           SECONDARY_DA, HeldAnswers, TerminalReplies, WorkBudget,
                                                           parse_colour)
from tests.conftest import wait_for

#: A program that puts the terminal in raw mode, writes each query and saves the answers as JSON.
ASKER = textwrap.dedent(r"""
    import json, os, select, sys, termios, tty
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    answers = []
    try:
        for query in json.loads(sys.argv[1]):
            os.write(1, query.encode("latin-1"))
            reply = b""
            while select.select([fd], [], [], 1.0)[0]:
                reply += os.read(fd, 64)
                if reply[-1:] in (b"R", b"c", b"t", b"\x07", b"\\", b"y"):
                    break
            answers.append(reply.decode("latin-1"))
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    with open(sys.argv[2], "w") as out:
        json.dump(answers, out)
""")


@pytest.fixture
def ask(manager, agent, tmp_path):
    script = tmp_path / "ask.py"
    script.write_text(ASKER)
    sid = manager.sync.open(agent, "shell").session_id

    def run(*queries: str) -> list[str]:
        answers = tmp_path / "answers.json"
        answers.unlink(missing_ok=True)
        r = manager.sync.send(agent, sid, SendRequest(
            f"{sys.executable} {script} '{json.dumps(list(queries))}' {answers}", timeout=20))
        assert r.wait_reason == "stdin_read" and r.exit_code == 0, r.viewport
        return json.loads(answers.read_text())

    run.sid = sid
    yield run
    manager.sync.close(agent, sid)


def test_cursor_position_follows_the_screen(ask):
    answers = ask("\x1b[5;10H\x1b[6n", "\x1b[12;3H\x1b[6n", "\x1b[3B\x1b[4C\x1b[6n", "\x1b[?6n")
    assert answers[:3] == ["\x1b[5;10R", "\x1b[12;3R", "\x1b[15;7R"]
    assert answers[3] == "\x1b[?15;7R"


def test_device_attributes(ask):
    assert ask("\x1b[c", "\x1b[0c", "\x1b[>c", "\x1b[>0c") == [PRIMARY_DA.decode(), PRIMARY_DA.decode(),
                                                               SECONDARY_DA.decode(), SECONDARY_DA.decode()]


def test_sizes_follow_a_resize(ask, manager, agent):
    assert ask("\x1b[18t") == ["\x1b[8;40;160t"]
    manager.sync.resize(agent, ask.sid, 30, 100)
    assert ask("\x1b[18t", "\x1b[14t", "\x1b[16t") == ["\x1b[8;30;100t", "\x1b[4;480;800t", "\x1b[6;16;8t"]
    assert ask("\x1b[30;100H\x1b[6n") == ["\x1b[30;100R"]


def test_colours_are_the_viewports_and_follow_changes(ask):
    fg, bg = ask("\x1b]10;?\x07", "\x1b]11;?\x1b\\")
    assert fg == "\x1b]10;rgb:e5e5/e5e5/e5e5\x07" and bg == "\x1b]11;rgb:1e1e/1e1e/1e1e\x1b\\"
    assert ask("\x1b]11;#102030\x07\x1b]11;?\x07") == ["\x1b]11;rgb:1010/2020/3030\x07"]
    assert ask("\x1b]4;1;?\x07", "\x1b]4;196;?\x07") == ["\x1b]4;1;rgb:cdcd/3131/3131\x07",
                                                         "\x1b]4;196;rgb:ffff/0000/0000\x07"]
    assert ask("\x1b]111\x07\x1b]11;?\x07") == ["\x1b]11;rgb:1e1e/1e1e/1e1e\x07"]


def test_modes_and_unsupported_requests(ask):
    assert ask("\x1b[?25l\x1b[?25$p", "\x1b[?25h\x1b[?25$p", "\x1b[?1049$p", "\x1b[?2026$p") == [
        "\x1b[?25;2$y", "\x1b[?25;1$y", "\x1b[?1049;2$y", "\x1b[?2026;0$y"]
    assert ask("\x1bP$q q\x1b\\", "\x1bP+q544e\x1b\\") == ["\x1bP0$r\x1b\\", "\x1bP0+r\x1b\\"]


def test_parse_colour():
    assert parse_colour("rgb:ff/80/00") == "#ff8000"
    assert parse_colour("rgb:ffff/8080/0000") == "#ff8000"
    assert parse_colour("#abc") == "#aabbcc" and parse_colour("#A0B0C0") == "#a0b0c0"
    assert parse_colour("red") is None and parse_colour("rgb:zz/00/00") is None


def _replies_for_a_bare_screen(work: WorkBudget | None = None) -> tuple[TerminalReplies, RawRing, list[int]]:
    """Replies wired to a real screen model and raw ring, as a session wires them; ``catch_ups`` lists the
    offsets the screen was asked to reach.  The screen work is drawn from ``work`` (by default a budget of
    their own, so that no other test's work counts)."""
    work = WorkBudget(60.0, 0.0) if work is None else work
    raw = RawRing()
    screen = ScreenTracker(24, 80, raw, OutputNormalizer())
    catch_ups: list[int] = []

    def catch_up(until: int, seconds: float | None) -> bool:
        catch_ups.append(until)
        return screen.catch_up(until, seconds)

    return (TerminalReplies(screen.model, catch_up, lambda: (24, 80), lambda: False, lambda: False, work),
            raw, catch_ups)


def test_a_flood_of_queries_gets_a_bounded_number_of_answers(monkeypatch):
    """Output is untrusted: 20,000 cursor-position queries in one chunk must not cost the loop 20,000 screen
    catch-ups (that stalled the kernel's loop for over a second) - the first MAX_ANSWERS are answered."""
    from dsh_terminal_magics.mechanism import terminal_replies
    monkeypatch.setattr(terminal_replies, "FIRST_ANSWER_SECONDS", 60.0)  # (see the next test for its bound)
    replies, raw, catch_ups = _replies_for_a_bare_screen()
    chunk = b"ab\x1b[6n" * 20_000
    raw.append(chunk)
    answers = replies.scan(chunk, 0)
    assert answers.count(b"R") == MAX_ANSWERS
    assert answers.startswith(b"\x1b[1;3R\x1b[1;5R")  # still answered from the screen, in stream order
    assert len(catch_ups) <= MAX_ANSWERS
    assert replies.unanswered == 20_000 - MAX_ANSWERS
    raw.append(b"\x1b[6n")  # the next chunk is answered again, from the whole 40,000 characters (500 full rows)
    assert replies.scan(b"\x1b[6n", len(chunk)) == b"\x1b[24;80R"



def test_a_first_query_the_screen_cannot_reach_in_time_is_not_answered(monkeypatch):
    """Bringing the screen model up to a chunk's first query is bounded too (``FIRST_ANSWER_SECONDS``): past
    it the query is left unanswered - an answer from a screen behind the output would be wrong - and the
    next chunk's query, with the screen caught up, is answered again."""
    from dsh_terminal_magics.mechanism import terminal_replies
    replies, raw, _ = _replies_for_a_bare_screen()
    monkeypatch.setattr(terminal_replies, "FIRST_ANSWER_SECONDS", 0.0)
    chunk = b"ab\r\n" * 5000 + b"xyz\x1b[6n"
    raw.append(chunk)
    assert replies.scan(chunk, 0) == b"" and replies.unanswered == 1
    monkeypatch.setattr(terminal_replies, "FIRST_ANSWER_SECONDS", 60.0)
    raw.append(b"\x1b[6n")
    assert replies.scan(b"\x1b[6n", len(chunk)) == b"\x1b[24;4R"


def test_sessions_draw_their_screen_work_from_one_budget():
    """Per-chunk bounds alone let each of many sessions flooding queries take its bound in turn (64 sessions
    printing ``yes $'\\e[6n'`` held a close for 18 s): the screen work of all of them comes from one budget.
    With it spent, a position query that needs the screen caught up goes unanswered in every session; one
    that needs no screen work (device attributes), or whose screen is already there, is still answered; as
    the budget refills, answers come back."""
    work = WorkBudget(1.0, 0.0)
    sessions = [_replies_for_a_bare_screen(work) for _ in range(2)]
    for replies, raw, _ in sessions:
        raw.append(b"ab\x1b[6n")
        assert replies.scan(b"ab\x1b[6n", 0) == b"\x1b[1;3R"
    work.spend(work.left())
    for replies, raw, _ in sessions:
        raw.append(b"c\x1b[6n\x1b[c")
        assert replies.scan(b"c\x1b[6n\x1b[c", 6) == PRIMARY_DA and replies.unanswered == 1
        raw.append(b"\x1b[6n")
        assert replies.scan(b"\x1b[6n", 12) == b""
    work.rate = 1e9  # (refilled at once)
    for replies, raw, _ in sessions:
        raw.append(b"\x1b[6n")
        assert replies.scan(b"\x1b[6n", 16) == b"\x1b[1;4R"


def test_a_query_beside_an_exit_marker_is_answered():
    """A chunk of only exit-code markers asks nothing and is not scanned; one with a query beside a marker is."""
    replies, raw, _ = _replies_for_a_bare_screen()
    for chunk in (b"hi\r\n\x1b]133;D;0\x07$ ", b"\x1b]133;D;0\x07\x1b]133;D;1\x07"):
        raw.append(chunk)
        assert replies.scan(chunk, raw.total - len(chunk)) == b""
    for chunk in (b"\x1b]133;D;0\x07\x1b[c", b"\x1b[c\x1b]133;D;0\x07"):
        raw.append(chunk)
        assert replies.scan(chunk, raw.total - len(chunk)) == PRIMARY_DA


def test_a_query_among_colours_and_paste_switches_is_answered():
    """Colours and bracketed paste switched ask nothing (a REPL's prompt is not scanned); a query among them -
    bracketed paste's own mode asked for included - is answered."""
    replies, raw, _ = _replies_for_a_bare_screen()
    inert = b"\x1b[01;34mls\x1b[0m\x1b[?2004h\x1b]133;D;;42\x07\x1b[?2004l>>> "
    raw.append(inert)
    assert replies.scan(inert, raw.total - len(inert)) == b""
    for query in (b"\x1b[c", b"\x1b[?2004$p"):
        chunk = inert + query + b"\x1b[m"
        raw.append(chunk)
        assert replies.scan(chunk, raw.total - len(chunk)) != b""


QUERIES = [b"\x1b[c", b"\x1b[>c", b"\x1b[6n", b"\x1b]11;?\x07", b"\x1b[18t", b"\x1b[?1049$p", b"\x1bP+q544e\x1b\\",
           b"\x1b[>q"]


def printf_format(query: bytes) -> str:
    """``query`` as a single-quoted printf format."""
    return query.decode().replace("\\", "\\\\").replace("\x1b", "\\e").replace("\x07", "\\a")


@pytest.fixture
def shell(manager, agent):
    sid = manager.sync.open(agent, "shell").session_id
    yield sid
    manager.sync.close(agent, sid)


def sent(manager, agent, sid, text, **kw):
    return manager.sync.send(agent, sid, SendRequest(text, **kw))


@pytest.mark.parametrize("query", QUERIES)
def test_an_answer_nobody_reads_never_reaches_the_next_command(manager, agent, shell, tmp_path, query):
    """A command that prints a query and ends without reading the answer (a builtin, ``cat`` of a file
    holding one): the answer must not be typed into the shell's line, where it garbled or swallowed the
    caller's next command (``62;22cecho hi: command not found``)."""
    (tmp_path / "q.txt").write_bytes(b"text\n" + query)
    for command in (f"printf '{printf_format(query)}'", f"cat {tmp_path / 'q.txt'}", f"cat {tmp_path / 'q.txt'}; sleep 0.1"):
        first = sent(manager, agent, shell, command)
        assert first.wait_reason == "stdin_read" and first.viewport.endswith("\n$ "), (command, first)
        r = sent(manager, agent, shell, "echo hi")
        assert r.viewport.splitlines() == ["$ echo hi", "hi", "$ "] and r.exit_code == 0, (command, r)


def test_a_background_jobs_query_at_the_prompt_is_not_typed_into_it(manager, agent, shell):
    """A job asks the terminal while the shell sits at its prompt (no send running): the answer is dropped,
    not typed into the prompt's line."""
    session = manager.loop_thread.call(manager.session, agent, shell)
    r = sent(manager, agent, shell, "(sleep 0.3; printf '\\e[c') &")
    assert r.wait_reason == "stdin_read", r
    wait_for(lambda: manager.loop_thread.call(lambda: session.held_answers.dropped) >= 1, timeout=20)
    sent(manager, agent, shell, "wait")
    r = sent(manager, agent, shell, "echo hi")
    assert r.viewport.splitlines() == ["$ echo hi", "hi", "$ "] and r.exit_code == 0, r


def test_the_shells_own_read_of_an_answer_still_gets_it(manager, agent, shell):
    """The shell asking and reading the answer itself (the usual way to get the cursor position in bash)."""
    r = sent(manager, agent, shell, "IFS='[;' read -p $'\\e[5;9H\\e[6n' -d R -rs _ row col; echo \"at $row,$col\"")
    assert r.wait_reason == "stdin_read" and "at 5,9" in r.viewport, r


def test_a_prompt_toolkit_repl_inside_the_python_repl_gets_its_answers(manager, agent):
    """``IPython.embed()`` in the python session: prompt_toolkit runs in the session's own program, asks for
    the cursor position at every prompt and prints more before it reads the answer - it must get it (an
    answer dropped there left IPython waiting for it, and every later line came back empty)."""
    sid = manager.sync.open(agent, "python").session_id
    try:
        r = sent(manager, agent, sid, "import IPython; IPython.embed(colors='NoColor')", timeout=30)
        assert r.wait_reason == "stdin_read" and "In [1]:" in r.viewport, r
        r = sent(manager, agent, sid, "6 * 7")
        assert "Out[1]: 42" in r.viewport and "In [2]:" in r.viewport, r
        r = sent(manager, agent, sid, "exit")
        assert r.wait_reason == "stdin_read" and r.viewport.endswith(">>> "), r
    finally:
        manager.sync.close(agent, sid)


def test_a_program_a_repl_runs_in_its_own_group_gets_its_answers(manager, agent, tmp_path):
    """A REPL does no job control: ``subprocess.run`` runs a program in the REPL's own group.  One that asks,
    draws, then reads (as vim does) still gets its answer."""
    script = tmp_path / "draws.py"
    answer = tmp_path / "answer.txt"
    script.write_text(textwrap.dedent(f"""
        import os, select, termios, tty
        saved = termios.tcgetattr(0)
        tty.setraw(0)
        os.write(1, b"\\x1b[c" + b"drawing the screen\\r\\n")
        reply = b""
        while not reply.endswith(b"c") and select.select([0], [], [], 5)[0]:
            reply += os.read(0, 64)
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
        open({str(answer)!r}, "wb").write(reply)
    """))
    sid = manager.sync.open(agent, "python").session_id
    try:
        argv = [sys.executable, str(script)]
        r = sent(manager, agent, sid, f"import subprocess; subprocess.run({argv!r})", timeout=20)
        assert r.wait_reason == "stdin_read" and r.viewport.endswith(">>> "), r
        assert answer.read_bytes() == PRIMARY_DA
    finally:
        manager.sync.close(agent, sid)


def test_an_answer_read_after_the_send_ended_is_still_delivered(manager, agent, shell, tmp_path):
    """The program asks, then reads only later, after the send that started it has ended (here on its
    timeout): the answer waits for its read, with no send looking at the program."""
    script = tmp_path / "late.py"
    answer = tmp_path / "answer.txt"
    script.write_text(textwrap.dedent(f"""
        import os, select, termios, time, tty
        saved = termios.tcgetattr(0)
        tty.setraw(0)
        os.write(1, b"\\x1b[c")
        time.sleep(1.0)
        reply = b""
        while not reply.endswith(b"c") and select.select([0], [], [], 5)[0]:
            reply += os.read(0, 64)
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
        open({str(answer)!r}, "wb").write(reply)
    """))
    r = sent(manager, agent, shell, f"{sys.executable} {script}", timeout=0.5)
    assert r.wait_reason == "timeout", r
    wait_for(answer.exists, timeout=20)
    wait_for(lambda: answer.read_bytes() != b"", timeout=5)
    assert answer.read_bytes() == PRIMARY_DA
    assert sent(manager, agent, shell, "", submit=False).wait_reason == "stdin_read"  # (the shell's prompt)
    r = sent(manager, agent, shell, "echo hi")
    assert r.viewport.splitlines()[-2:] == ["hi", "$ "], r


def test_held_answers_go_to_the_group_that_asked_or_nowhere():
    held = HeldAnswers()
    held.hold(asker=50, answers=b"A", now=0.0)
    held.hold(asker=60, answers=b"B", now=1.0)
    assert held.take(reader=50, shell_at_prompt=False) == b"A"  # B's group lost the terminal
    assert not held and held.dropped == 1
    held.hold(asker=7, answers=b"C", now=2.0)
    assert held.take(reader=7, shell_at_prompt=False) == b"C"  # the shell asked and reads (read -p)
    held.hold(asker=7, answers=b"D", now=3.0)
    assert held.take(reader=7, shell_at_prompt=True) == b""  # the command that asked has ended
    assert held.dropped == 2
    held.hold(asker=9, answers=b"E", now=4.0)
    assert not held.expired(4.0 + HOLD_ANSWERS - 0.1) and held.expired(4.0 + HOLD_ANSWERS)
    held.drop()
    for _ in range(2 * MAX_HELD_BYTES // 8):  # a program asking without end, never reading
        held.hold(asker=9, answers=b"\x1b[1;1R" + b"x", now=5.0)
    assert len(held.take(reader=9, shell_at_prompt=False)) <= MAX_HELD_BYTES
