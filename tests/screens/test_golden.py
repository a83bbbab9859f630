"""Golden tests in pyte's style: captured byte logs of real sessions replayed into expected screens."""
from __future__ import annotations

from pathlib import Path

import pytest

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
    assert model.catch_up(ring, budget=None)
    assert model.resyncs == 1 and "tail marker" in model.snapshot().text()
    ring.append(b"y" * 1000)
    assert not model.catch_up(ring, budget=10)  # budgeted slices
    assert model.catch_up(ring, budget=None)


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
