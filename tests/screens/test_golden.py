"""Golden tests in pyte's style: captured byte logs of real sessions replayed into expected screens."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_terminal_magics.mechanism.output import RawRing
from dsh_terminal_magics.mechanism.screen import RESYNC_BYTES, ScreenModel

GOLDEN = Path(__file__).resolve().parent / "golden"
CASES = sorted(p.stem for p in GOLDEN.glob("*.bin"))


@pytest.mark.parametrize("name", CASES)
def test_replayed_bytes_give_the_expected_screen(name):
    model = ScreenModel(24, 80, 0)
    model.feed((GOLDEN / f"{name}.bin").read_bytes())
    assert model.snapshot().text() + "\n" == (GOLDEN / f"{name}.screen").read_text()
    assert model.parser_errors == 0


@pytest.mark.parametrize("name", CASES)
def test_any_chunking_gives_the_same_screen(name):
    data = (GOLDEN / f"{name}.bin").read_bytes()
    model = ScreenModel(24, 80, 0)
    for i in range(0, len(data), 7):  # splits escapes and UTF-8 sequences
        model.feed(data[i:i + 7])
    assert model.snapshot().text() + "\n" == (GOLDEN / f"{name}.screen").read_text()


def test_cases_exist():
    assert {"less_pagedown", "vim_insert", "colours_and_cursor", "less_quit", "dialog_box"} <= set(CASES)


def test_colours_and_cursor_details():
    model = ScreenModel(24, 80, 0)
    model.feed((GOLDEN / "colours_and_cursor.bin").read_bytes())
    snap = model.snapshot()
    assert snap.lines[4][9:16] == "at 5,10"
    assert model.screen.buffer[0][0].fg == "red" and model.screen.buffer[0][0].bold
    from dsh_terminal_magics.notebook.ansi_html import screen_html
    assert 'color:#cd3131;font-weight:bold">red</span> plain' in screen_html(model.screen)


def test_far_behind_resyncs_from_the_tail():
    ring = RawRing(capacity=4 * RESYNC_BYTES)
    model = ScreenModel(24, 80, 0)
    ring.append(b"x" * (2 * RESYNC_BYTES) + b"\x1b[2J\x1b[Htail marker")
    # (time enough for the tail: the default half second ran out once under load, and this is not about time)
    assert model.catch_up(ring, budget=None, seconds=60)
    assert model.resyncs == 1 and "tail marker" in model.snapshot().text()
    ring.append(b"y" * 1000)
    assert not model.catch_up(ring, budget=10)  # budgeted slices
    assert model.catch_up(ring, budget=None, seconds=60)


def test_a_repeat_request_costs_what_it_sends_not_what_it_asks_for(monkeypatch):
    """REP (``CSI n b``) repeats the last character up to the end of the line.  Drawn one character at a
    time, 140 KB of ``CSI 9999 b`` held the loop for four minutes (another agent's send waited 233 s): the
    repeat is written into the line in one step, and never past it."""
    from dsh_terminal_magics.mechanism import screen as screen_module

    drawn: list[int] = []
    real_draw = screen_module.pyte.Screen.draw
    monkeypatch.setattr(screen_module.pyte.Screen, "draw", lambda self, data: (drawn.append(len(data)),
                                                                              real_draw(self, data))[1])
    model = ScreenModel(24, 80, 0)
    model.feed(b"\x1b[?1049h\x1b[1;31mx" + b"\x1b[9999b" * 5000 + b"\x1b[2;1Hy\x1b[3b")
    assert sum(drawn) <= 2  # only the x and the y were drawn
    rows = model.snapshot().lines
    assert rows[0] == "x" * 80 and rows[1].rstrip() == "yyyy"
    assert model.screen.buffer[0][79].fg == "red"  # with the drawn character's attributes


def test_costly_sequences_cost_what_they_send(monkeypatch):
    """A program's output feeds the screen model on the kernel's loop, so no sequence may make it work far
    more than the text it could change.  pyte's erase of the display rewrote every cell ever drawn, its
    reverse-video mode every cell, its alignment test filled the screen: 4 KiB of ``ESC#8`` held the loop
    for 12 s.  Counted here: cells written or recoloured while 1000 of each are fed to a full screen."""
    from pyte import screens as pyte_screens

    from dsh_terminal_magics.notebook.ansi_html import screen_html
    work = [0]
    real_set, real_replace = pyte_screens.StaticDefaultDict.__setitem__, pyte_screens.Char._replace
    monkeypatch.setattr(pyte_screens.StaticDefaultDict, "__setitem__",
                        lambda line, x, char: (work.__setitem__(0, work[0] + 1), real_set(line, x, char))[1])
    monkeypatch.setattr(pyte_screens.Char, "_replace",
                        lambda char, **kw: (work.__setitem__(0, work[0] + 1), real_replace(char, **kw))[1])
    for sequence in (b"\x1b#8", b"\x1b[?5h\x1b[?5l", b"\x1b[2J", b"\x1b[3J", b"\x1b[41m\x1b[2J\x1b[m", b"\x1b[H\x1b[J"):
        model = ScreenModel(24, 80, 0)
        model.feed(b"\x1b[?1049h" + b"x" * (24 * 80))
        work[0] = 0
        model.feed(sequence * 1000)
        assert work[0] <= 1000 * 81, (sequence, work[0])  # (a line at most each; pyte: 1920 and more each)
    model = ScreenModel(4, 10, 0)
    model.feed(b"\x1b[?1049hxx\x1b#8")  # the alignment test changes nothing
    assert model.snapshot().lines[:2] == ("xx" + " " * 8, " " * 10)
    model.feed(b"\x1b[2;1H\x1b[44m\x1b[J\x1b[m")  # erased from the cursor (line 2) on, in blue
    html = screen_html(model.screen).splitlines()
    assert html[0] == "xx" and all("background-color:#2472c8" in row for row in html[1:]), html
    model.feed(b"\x1b[?5h")
    assert model.mode_state(5, private=True) and "inverse" not in screen_html(model.screen)
    assert screen_html(model.screen) != html and model.snapshot().lines[0].startswith("xx")
    model.feed(b"\x1b[?5l")
    assert not model.mode_state(5, private=True) and screen_html(model.screen).splitlines() == html


def test_a_catch_up_stops_at_its_time_budget_and_the_next_goes_on(monkeypatch):
    """A catch-up runs on the kernel's loop: however costly the output, it works about
    ``MAX_CATCH_UP_SECONDS`` at most (its first slice small, later ones sized by what the last cost), and
    the next catch-up goes on from where it stopped - to the same screen as feeding everything at once."""
    from dsh_terminal_magics.mechanism import screen as screen_module
    data = b"\x1b[?1049h" + b"".join(b"\x1b[%d;1Hline %d\n\n\x1b[2J" % (i % 24 + 1, i) for i in range(3000))
    data += b"\x1b[5;5Hlast"
    ring = RawRing(capacity=4 * RESYNC_BYTES)
    ring.append(data)
    whole = ScreenModel(24, 80, 0)
    whole.feed(data)
    monkeypatch.setattr(screen_module, "MAX_CATCH_UP_SECONDS", 0.0)  # (every catch-up is past it at once)
    model = ScreenModel(24, 80, 0)
    calls = 0
    while True:
        calls += 1
        done = model.catch_up(ring)
        assert model.offset == min(screen_module.MIN_SLICE * calls, len(data))  # one small slice each
        if done:
            break
    assert calls == -(-len(data) // screen_module.MIN_SLICE)
    assert model.snapshot() == whole.snapshot() and "last" in model.snapshot().lines[4]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["ab", "中文", "é", "e\u0301", "\x1b[2;5H", "\x1b[K", "\x1b[1K", "\x1b[2J",
                                 "\x1b[J", "\x1b[41m", "\x1b[m", "\r\n", "\x1b[3@", "\x1b[2P", "\x1b[5X", "\b",
                                 "\x1b[10C", "\x1b[?5h", "\x1b#8", "\x1b[3b", "🙂", "\t", "x" * 30]), max_size=40),
       st.sampled_from([(5, 12), (3, 7), (24, 80)]))
def test_the_screen_text_is_what_pyte_displays(pieces, size):
    """The model renders rows from the cells drawn (pyte's ``display`` looked up every cell of every row:
    a third of a second for 500x1000, on the loop, at each send that ended on a full screen); the text is
    what pyte's gives, wide characters included - where pyte's does not fail: a wide character's empty
    second half left alone (``中\b中``) made it raise IndexError, and the send with it."""
    from wcwidth import wcwidth
    model = ScreenModel(*size, 0)
    model.feed(("\x1b[?1049h" + "".join(pieces)).encode())
    screen = model.screen

    def pyte_row(y: int) -> str:  # (pyte's Screen.display, with the empty cell it chokes on allowed)
        out, after_wide = [], False
        for x in range(screen.columns):
            if after_wide:
                after_wide = False
                continue
            char = screen.buffer[y][x].data
            after_wide = bool(char) and wcwidth(char[0]) == 2
            out.append(char)
        return "".join(out)
    assert model.snapshot().lines == tuple(pyte_row(y) for y in range(screen.lines))


def test_a_wide_characters_empty_half_does_not_break_the_screen():
    model = ScreenModel(3, 8, 0)
    model.feed("\x1b[?1049h中\b文".encode())
    with pytest.raises(IndexError):
        model.screen.display  # (pyte's own rendering)
    assert model.snapshot().lines[0] == "中" + " " * 5  # (pyte's cells: 中, 文 on its second half, an empty one)


def test_a_sequence_the_screen_cannot_apply_loses_nothing_after_it():
    """pyte passes ``private=True`` to the handler of every ``CSI ?`` sequence and most do not take it: the
    error restarted the parser and lost the rest of the text fed with it.  ``mc`` leaving sent ``CSI ? 1001
    r`` (XTRESTORE) just before ``CSI ? 1049 l``: the model stayed on the alternate screen and the next
    program's screen came out blank.  Each such sequence is ignored, and what follows it is drawn."""
    from dsh_terminal_magics.mechanism.screen import _Stream
    for final in sorted(_Stream.csi):
        model = ScreenModel(10, 40, 0)
        model.feed(f"\x1b[?1049h\x1b[?1001{final}\x1b[?1049l\x1b[Hkept".encode())
        assert model.snapshot().lines[0].startswith("kept"), final
    model = ScreenModel(10, 40, 0)
    model.feed(b"main\x1b[?1049halt\x1b[?1001r\x1b[?1049l\x1b[2;1Hafter")
    assert [line.rstrip() for line in model.snapshot().lines[:2]] == ["main", "after"] and model.parser_errors == 1


@pytest.mark.parametrize("text,shown", [
    ("line one \u2714\ufe0f done", "line one \u2714\ufe0f done"),  # a variation selector (emoji presentation)
    ("\U0001F468\u200d\U0001F469\u200d\U0001F467 family", "\U0001F468\u200d\U0001F469\u200d\U0001F467 family"),
    ("zero\u200bwidth space", "zero\u200bwidth space"),
    ("tag \U000e0001kept", "tag \U000e0001kept"),  # (a language tag, zero-width)
    ("c1 \u0085control", "c1 control"),  # (no width at all, a C1 control: left out)
])
def test_a_character_the_screen_cannot_place_loses_nothing_after_it(text, shown):
    """pyte's draw stopped at the first zero-width character that is not a combining mark, or one of no
    width, and dropped the rest of the text: ``less`` showed ``line one ✔`` for ``line one ✔️ done``, and a
    family emoji cut its line short.  Zero-width ones join the character before them; the rest is drawn."""
    model = ScreenModel(4, 40, 0)
    model.feed(f"\x1b[?1049h\x1b[H{text}\x1b[2;1Hnext".encode())
    assert [line.rstrip() for line in model.snapshot().lines[:2]] == [shown, "next"]


#: Characters the screen's drawing got wrong, mixed into any others: a joiner, variation selectors, a zero-width
#: space, combining marks, wide ones (CJK, emoji), a C1 control.
_TRICKY = st.sampled_from(["\u200d", "\ufe0f", "\ufe0e", "\u200b", "\u0301", "\u0308", "\u05b1", "\u4e2d",
                           "\U0001F468", "\u2714", "\u0085"])


@settings(max_examples=300, deadline=None)
@given(st.text(st.one_of(_TRICKY, st.characters(blacklist_categories=("Cc", "Cs"))), min_size=1, max_size=40))
def test_any_text_on_a_line_is_shown_whole(text):
    """Every character one or two columns wide is shown, in order, and zero-width ones with the character
    before them (pyte put a combining mark after a wide character on its empty second column, where the
    text never showed it, and stopped at the other zero-width ones)."""
    import unicodedata

    from wcwidth import wcwidth
    text = "x" + text  # (something for a zero-width first character to join)
    model = ScreenModel(3, 200, 0)
    model.feed(f"\x1b[?1049h\x1b[H{text}\x1b[2;1Hnext".encode())
    lines = model.snapshot().lines
    shown = "".join(char for char in text if wcwidth(char) != -1)
    assert unicodedata.normalize("NFC", lines[0].rstrip()) == unicodedata.normalize("NFC", shown.rstrip())
    assert lines[1].rstrip() == "next"
