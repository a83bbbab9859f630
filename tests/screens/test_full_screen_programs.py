"""Real full-screen programs through named keys; resize; BEL; recordings and replay."""
from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from dsh_terminal_magics.mechanism import SendRequest
from dsh_terminal_magics.notebook.replay import ReplayViewport, replay_text


def send(manager, agent, sid, text="", submit=True, keys=(), **kw):
    return manager.sync.send(agent, sid, SendRequest(text, submit, keys=tuple(keys), **kw))


@pytest.fixture
def shell(manager, agent):
    sid = manager.sync.open(agent, "shell").session_id
    yield sid
    manager.sync.close(agent, sid)


def test_vim_edits_a_file_through_keys(manager, agent, shell, tmp_path):
    if shutil.which("vim") is None:
        if os.environ.get("CI") == "true":
            raise AssertionError("vim is missing: .ci/run installs it")
        pytest.skip("vim is not installed (apt-get install vim)")
    target = tmp_path / "notes.txt"
    r = send(manager, agent, shell, f"vim -u NONE -N -i NONE {target}")
    assert r.wait_reason == "stdin_read" and r.screen is not None and "~" in r.viewport
    r = send(manager, agent, shell, "ihello from keys", submit=False)
    assert "hello from keys" in r.viewport
    r = send(manager, agent, shell, submit=False, keys=["Enter", "s", "e", "c", "o", "n", "d", "Esc", ":", "w",
                                                          "q", "Enter"])
    assert r.wait_reason == "stdin_read" and r.screen is None and r.exit_code == 0
    assert target.read_text() == "hello from keys\nsecond\n"


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_ncurses_line_drawing_shows_as_lines(manager, agent, shell, locale):
    """ncurses draws boxes in DEC line drawing (``ESC ( 0``, then ``lqqk``) on xterm, in a UTF-8 locale too;
    pyte ignores the designation in UTF-8 mode, so every box of ``dialog``, ``mc`` or a ``curses`` program
    came out as ``lqqqk`` and ``x`` in the screen the model reads."""
    program = ("import curses; curses.wrapper(lambda s: (s.box(), s.addstr(1, 2, 'boxed'), s.refresh(), "
               "s.getch()))")
    r = send(manager, agent, shell, f"LC_ALL={locale} python3 -c \"{program}\"")
    assert r.wait_reason == "stdin_read" and r.screen is not None, r
    rows = r.viewport.splitlines()
    assert rows[0].startswith("┌───") and rows[0].endswith("┐"), rows[:2]
    assert rows[1].startswith("│ boxed") and rows[1].endswith("│"), rows[:2]
    assert "lqqq" not in r.viewport
    r = send(manager, agent, shell, "x", submit=False)
    assert r.screen is None and r.exit_code == 0


def test_sgr_sub_parameters_are_attributes_not_text(manager, agent, shell):
    """pyte stops a CSI sequence at a colon: a full-screen program's curly underline (``CSI 4:3 m``) or colon
    colour drew the rest of the sequence (``3m``, ``2::255:0:0m``) on its screen as text."""
    r = send(manager, agent, shell, "printf '\\e[?1049h\\e[H\\e[4:3mcurly\\e[4:0m \\e[38:2::255:0:0mred\\e[m end'; "
                                    "read x; printf '\\e[?1049l'")
    assert r.wait_reason == "stdin_read" and r.screen is not None, r
    assert r.viewport.splitlines()[0] == "curly red end", r.viewport
    send(manager, agent, shell, "")


def test_keyboard_modes_and_graphics_are_not_drawn(manager, agent, shell):
    """kitty's keyboard modes (``CSI > 1 u`` push, ``CSI < u`` pop, ``CSI = 1;1 u`` set: fish 4, neovim, helix)
    and an APC string (kitty's graphics) show nothing on a terminal; pyte drew ``u``, ``1;1u`` and the APC's
    text on the screen."""
    r = send(manager, agent, shell, "printf '\\e[?1049h\\e[HA\\e[>1uB\\e[<uC\\e[=1;1uD\\e_Gf=100;AAAA\\e\\\\E'; "
                                    "read x; printf '\\e[?1049l'")
    assert r.wait_reason == "stdin_read" and r.screen is not None, r
    assert r.viewport.splitlines()[0] == "ABCDE", r.viewport
    send(manager, agent, shell, "")


def test_a_sequence_split_between_reads_reaches_the_screen_whole():
    """The screen model is fed in slices (reads, and catch-up in pieces): a sequence cut between two is held
    until the rest comes, so what is filtered or rewritten before pyte is seen whole."""
    from dsh_terminal_magics.mechanism.screen import ScreenModel
    model = ScreenModel(2, 20, 0)
    for piece in [b"x\x1b_G54", b"4e\x1b", b"\\y\x1b[4:", b"3mz\x1b[<", b"uw"]:
        model.feed(piece)
    assert model.screen.display[0].rstrip() == "xyzw"
    assert model.screen.buffer[0][2].underscore and not model.screen.buffer[0][1].underscore


def test_device_control_strings_and_intermediate_sequences_are_not_drawn():
    """A terminal shows nothing for a DCS string (XTGETTCAP and DECRQSS queries, sixel images, tmux's
    passthrough) or a CSI sequence with an intermediate byte (DECSTR ``CSI ! p``, DECSCL, DECSCA, DECELR, vim's
    ``CSI 0 % m`` probe); pyte drew their text (``+q544e``, ``zz``, ``p``), even cut between two reads."""
    from dsh_terminal_magics.mechanism.screen import ScreenModel
    model = ScreenModel(2, 40, 0)
    pieces = [b"\x1b[?1049hA\x1bP+q544e\x1b\\B\x1bPzz\x1b\\C\x1b[0%mD\x1b[!pE\x1b[4;2\"pF\x1b[1\"qG",
              b"\x1b[3;1'zH\x1b[2 qI\x1bP$qm\x1b\\J\x1bPq#0;2;0;0;0#0~~@@vv", b"@@~~$-\x1b\\K\x1bP+q", b"544e\x1b", b"\\L"]
    for piece in pieces:
        model.feed(piece)
    assert model.screen.display[0].rstrip() == "ABCDEFGHIJKL"
    # An image far longer than a sequence held over between reads, in reads of 1000 bytes.
    image = b"M\x1bPq" + b"#1~~@@vv@@~~@@~~$-" * 2000 + b"\x1b\\N"
    for start in range(0, len(image), 1000):
        model.feed(image[start:start + 1000])
    assert model.screen.display[0].rstrip() == "ABCDEFGHIJKLMN"


def test_marks_stacked_on_one_character_are_capped():
    """Each zero-width character joined to a cell re-forms the cell's text: 32 KB of combining marks on one
    character took 3 s of the kernel's loop, and twice that four times as long.  A cell keeps at most
    :data:`MAX_CELL_CODE_POINTS` code points, as terminals cap the marks they stack; what follows is drawn."""
    from dsh_terminal_magics.mechanism.screen import MAX_CELL_CODE_POINTS, ScreenModel
    model = ScreenModel(2, 20, 0)
    model.feed(("x" + "\u0301" * 5000 + "y\u200d\u0302z").encode())
    row = model.screen.buffer[0]
    assert len(row[0].data) == MAX_CELL_CODE_POINTS and row[0].data.startswith("x\u0301")
    assert (row[1].data, row[2].data) == ("y\u200d\u0302", "z")


def test_ncurses_scrolling_and_tabs_move_the_screen(manager, agent, shell):
    """ncurses scrolls a window with SU (``CSI 3 S``) on xterm, which pyte lacked: the screen the model read
    still showed the lines before the scroll.  (SD, CHT and CBT were missing too.)"""
    program = ("import curses\n"
               "def main(s):\n"
               "    s.scrollok(True)\n"
               "    for i in range(10):\n"
               "        s.addstr(i, 0, f'line {i}')\n"
               "    s.refresh()\n"
               "    s.scroll(3)\n"
               "    s.refresh()\n"
               "    s.getch()\n"
               "curses.wrapper(main)\n")
    r = send(manager, agent, shell, f"python3 -c \"{program}\"")
    assert r.wait_reason == "stdin_read" and r.screen is not None, r
    assert r.viewport.splitlines() == [f"line {i}" for i in range(3, 10)], r.viewport
    send(manager, agent, shell, "x", submit=False)
    tabs_and_scroll_down = "\\e[?1049h\\e[Ha\\e[2Ib\\e[Zc\\e[2;1Hd\\e[1T"
    r = send(manager, agent, shell, f"printf '{tabs_and_scroll_down}'; read x; printf '\\e[?1049l'")
    assert r.viewport.splitlines() == ["", "a               c", "d"], r.viewport
    assert send(manager, agent, shell, "").screen is None


def test_less_pages_and_leaves_a_clean_scrollback(manager, agent, shell, tmp_path):
    long = tmp_path / "long.txt"
    long.write_text("".join(f"row {i}\n" for i in range(1, 301)))
    r = send(manager, agent, shell, f"less {long}")
    assert r.screen is not None and r.viewport.splitlines()[0] == "row 1"
    assert (r.screen.rows, r.screen.cols) == (40, 160)
    r = send(manager, agent, shell, submit=False, keys=["PageDown"])
    assert r.viewport.splitlines()[0] == "row 40"
    r = send(manager, agent, shell, "q", submit=False)
    assert r.screen is None and r.viewport.endswith("$ ")
    lines = manager.sync.read(agent, shell, 0, 10).lines
    assert lines[-2:] == [f"$ less {long}", "$ "]  # nothing less drew leaked into the history


def test_less_shows_lines_with_emoji_whole(manager, agent, shell, tmp_path):
    """A variation selector or a zero-width joiner (``✔️``, ``👨‍👩‍👧``) ended the screen model's drawing of the
    text after it: ``less`` showed ``line one ✔`` and ``line two 👨``."""
    emoji = tmp_path / "emoji.txt"
    emoji.write_text("line one \u2714\ufe0f done and more\nline two \U0001F468\u200d\U0001F469 family here\n")
    r = send(manager, agent, shell, f"less {emoji}")
    assert r.screen is not None, r
    assert "\ufe0f done and more" in r.viewport and "\U0001F469 family here" in r.viewport, r.viewport[:300]
    r = send(manager, agent, shell, "q", submit=False)
    assert r.screen is None and r.viewport.endswith("$ ")


def test_top_batch_and_interactive(manager, agent, shell):
    r = send(manager, agent, shell, "top -b -n 1 | head -5")
    assert r.viewport.splitlines()[1].startswith("top -") and "Tasks:" in r.viewport
    r = send(manager, agent, shell, "top -d 5")
    assert r.screen is not None and r.viewport.startswith("top -") and "PID" in r.viewport
    r = send(manager, agent, shell, "q", submit=False)
    assert r.screen is None and r.wait_reason == "stdin_read"
    lines = manager.sync.read(agent, shell, 0, 10).lines
    assert lines[-2:] == ["$ top -d 5", "$ "]  # top had taken the keys: its frames stay out of the history


def test_cursor_motion_without_taking_the_keys_is_text(manager, agent, shell):
    """`clear`, `tput cup` and a script's own escapes move the cursor, but no program took the keys:
    what follows them is lines like any other, in the result and in the history."""
    r = send(manager, agent, shell, "sh -c 'clear; echo Welcome; tput cup 5 0; printf \"name? \"; read -r n; "
                                    "echo hi $n'")
    assert r.screen is None and r.wait_reason == "stdin_read" and r.viewport.endswith("Welcome\nname? ")
    r = send(manager, agent, shell, "bob")
    assert r.screen is None and "hi bob" in r.viewport
    lines = manager.sync.read(agent, shell, 0, 10).lines
    assert lines[-4:] == ["Welcome", "name? bob", "hi bob", "$ "]


def test_resize_reaches_the_program(manager, agent, shell):
    manager.sync.resize(agent, shell, 50, 100)
    assert send(manager, agent, shell, "stty size").viewport.splitlines()[1] == "50 100"
    r = send(manager, agent, shell, "tput lines; tput cols")
    assert r.viewport.splitlines()[1:3] == ["50", "100"]


def test_bell_is_reported(manager, agent, shell):
    assert send(manager, agent, shell, "printf 'ding\\a\\n'").bell is True
    assert send(manager, agent, shell, "echo quiet").bell is False


def test_recording_is_asciinema_v2_and_replays(manager, agent, shell, tmp_path, monkeypatch):
    cast = tmp_path / "demo.cast"
    manager.sync.record(agent, shell, "start", str(cast))
    send(manager, agent, shell, "printf '\\e[32mgreen\\e[0m ✓\\n'")
    manager.sync.resize(agent, shell, 30, 90)
    send(manager, agent, shell, "echo second")
    path, events, truncated = manager.sync.record(agent, shell, "stop")
    assert path == str(cast) and events >= 2 and not truncated  # (the notebook user's: no size cap)
    lines = cast.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    assert header["version"] == 2 and (header["width"], header["height"]) == (160, 40)
    stamps = []
    for line in lines[1:]:
        stamp, kind, data = json.loads(line)
        assert isinstance(stamp, float) and kind in ("o", "r") and isinstance(data, str)
        stamps.append(stamp)
    assert stamps == sorted(stamps)
    assert any(json.loads(line)[1:] == ["r", "90x30"] for line in lines[1:])
    text = replay_text(str(cast))
    assert "green ✓" in text and "second" in text

    import comm
    monkeypatch.setattr(comm, "create_comm", lambda **kw: type("C", (), {
        "comm_id": "c", "kernel": "k", "open": lambda *a, **k: None, "on_msg": lambda *a, **k: None,
        "close": lambda *a, **k: None, "send": lambda *a, **k: None})())
    view = ReplayViewport(str(cast), speed=50)
    assert view.wait(30)
    assert "second" in view.snapshot() and "green" in view.screen.value


def test_recording_errors(manager, agent, shell, tmp_path):
    from dsh_terminal_magics.errors import InvalidArgumentError
    with pytest.raises(InvalidArgumentError, match="not recording"):
        manager.sync.record(agent, shell, "stop")
    with pytest.raises(InvalidArgumentError, match="directory does not exist"):
        manager.sync.record(agent, shell, "start", "/no/such/dir/x.cast")
    manager.sync.record(agent, shell, "start", str(tmp_path / "a.cast"))
    with pytest.raises(InvalidArgumentError, match="already recording"):
        manager.sync.record(agent, shell, "start", str(tmp_path / "b.cast"))
    manager.sync.record(agent, shell, "stop")


def test_flood_inside_a_full_screen_program_with_a_viewport_open(manager, agent, shell, monkeypatch):
    import comm
    from dsh_terminal_magics.notebook.viewport import TerminalViewport
    monkeypatch.setattr(comm, "create_comm", lambda **kw: type("C", (), {
        "comm_id": "c", "kernel": "k", "open": lambda *a, **k: None, "on_msg": lambda *a, **k: None,
        "close": lambda *a, **k: None, "send": lambda *a, **k: None})())
    from dsh_terminal_magics import TerminalTools
    tools = TerminalTools(manager=manager)
    view = TerminalViewport(tools, agent, shell)
    try:
        r = send(manager, agent, shell, "printf '\\e[?1049h'; head -c 100000000 /dev/zero | tr '\\0' x | "
                 "fold -w 150; printf '\\e[?1049l'; echo done-flood", timeout=300, idle=60)
        assert r.wait_reason == "stdin_read" and "done-flood" in r.viewport
        session = manager.loop_thread.call(manager.session, agent, shell)
        assert session.screen.model.resyncs >= 1  # pyte never replayed it all
        assert sum(len(line) for line in manager.sync.read(agent, shell, 0, 5000).lines) < 10_000  # history clean
    finally:
        view.detach()


def test_a_drawing_right_after_leaving_the_alternate_screen_is_a_screen(manager, agent, shell):
    """``dialog`` starts as curses does - the alternate screen on and off again - then draws its box on the
    main screen by cursor addressing.  When all of it came in one read, the drawing was taken for text: no
    screen for the model, and a line of ``lqqk x pickx`` in the history (and in the next send's viewport)."""
    program = ("import os, termios, tty; old = termios.tcgetattr(0); tty.setcbreak(0); "
               "os.write(1, b'\\x1b[?1049h\\x1b[H\\x1b[2J\\x1b[?1049l\\x1b[?1h\\x1b=\\x1b[H\\x1b[2J"
               "\\x1b[15;64Hmenu\\x1b[16;64Hitem'); os.read(0, 1); "
               "termios.tcsetattr(0, termios.TCSADRAIN, old); os.write(1, b'\\x1b[?1l\\x1b>')")
    for _ in range(3):
        r = send(manager, agent, shell, f"python3 -c \"{program}\"")
        assert r.wait_reason == "stdin_read" and r.screen is not None, r
        rows = r.viewport.splitlines()
        assert rows[14].strip() == "menu" and rows[15].strip() == "item", rows
        r = send(manager, agent, shell, "x", submit=False)
        assert r.screen is None and r.exit_code == 0 and "menu" not in r.viewport, r
        r = send(manager, agent, shell, "echo next")
        assert r.viewport.splitlines()[-2:] == ["next", "$ "] and "menu" not in r.viewport, r.viewport


#: A full-screen app as Textual runs one: an input thread polls the terminal every 0.2 s until told to stop;
#: on 'q' the app stops it, waits for its last poll to end, throws away input typed meanwhile (``tcflush``)
#: and leaves the alternate screen (inline, under a hidden cursor: shows the cursor again).
POLLING_APP = """\
import os, queue, select, sys, termios, threading, tty
fd = sys.stdin.fileno()
saved = termios.tcgetattr(fd)
tty.setraw(fd)
FULL = (b"\\x1b[?1049h\\x1b[H\\x1b[2J", b"\\x1b[?1049l")
ENTER, LEAVE = FULL if sys.argv[1] == "full" else (b"\\x1b[?25l", b"\\r\\n\\x1b[?25h")
os.write(1, ENTER + b"app: press q")
keys, stop = queue.Queue(), threading.Event()
def poll_keys():
    while not stop.is_set():
        if select.select([fd], [], [], 0.2)[0]:
            keys.put(os.read(fd, 16))
reader = threading.Thread(target=poll_keys)
reader.start()
while b"q" not in keys.get():
    pass
stop.set()
reader.join()
termios.tcflush(fd, termios.TCIFLUSH)
os.write(1, LEAVE)
termios.tcsetattr(fd, termios.TCSANOW, saved)
"""


@pytest.mark.parametrize("where", ["full", "inline"])
def test_the_key_that_quits_a_polling_app_waits_for_it_to_leave(manager, agent, shell, tmp_path, where):
    """A program drawing its own display (full-screen, or inline under a hidden cursor) that polls its terminal
    every few tenths of a second may still be acting on the key: after Textual's quit key (or the Enter that
    submits an inline app) the send ended in its input thread's last poll, and the next command, typed while
    the app waited for that poll, was thrown away as it left.  Such a poll is outlasted once."""
    script = tmp_path / "app.py"
    script.write_text(POLLING_APP)
    r = send(manager, agent, shell, f"{sys.executable} {script} {where}", timeout=20)
    assert r.wait_reason == "stdin_read" and "app: press q" in r.viewport, r
    r = send(manager, agent, shell, "q", submit=False, timeout=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("$ ") and r.exit_code == 0, r
    r = send(manager, agent, shell, "echo typed after", timeout=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("typed after\n$ "), r
