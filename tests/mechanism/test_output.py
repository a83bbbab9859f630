"""The output normaliser and scrollback, as pure functions (plus property tests)."""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dsh_terminal_magics.mechanism.output import OutputNormalizer, RawRing, ScrollbackBuffer, render_line


def normalise(*chunks: bytes) -> ScrollbackBuffer:
    n, sb = OutputNormalizer(), ScrollbackBuffer()
    for chunk in chunks:
        text, _ = n.feed(chunk)
        sb.append(text)
    return sb


def lines_of(sb: ScrollbackBuffer) -> list[str]:
    return list(sb.iter_lines(1, sb.total_lines))


def test_crlf_cr_backspace_and_bel():
    sb = normalise(b"one\r\ntwo\r\n10%\r50%\r100%\r\nab\bc\x07\n")
    assert lines_of(sb) == ["one", "two", "100%", "ac"]


def test_escape_split_across_chunks_is_removed():
    sb = normalise(b"red: \x1b[3", b"1mRED\x1b[0m \x1b]0;ti", b"tle\x07done\n")
    assert lines_of(sb) == ["red: RED done"]


def test_utf8_split_across_chunks_and_invalid_bytes():
    data = "héllo ✓\n".encode()
    sb = normalise(data[:2], data[2:8], data[8:], b"bad \xff\xfe\n")
    assert lines_of(sb) == ["héllo ✓", "bad \ufffd\ufffd"]


def test_events_are_reported():
    n = OutputNormalizer()
    _, ev = n.feed(b"\x1b]133;D;7\x07\x1b]133;D;0;4711\x07\x1b[6n\x1b[?1049h\x07")
    assert ev.exit_markers == [(7, ""), (0, "4711")] and ev.cursor_position_requests == 1
    assert ev.alternate_screen is True and ev.bells == 1


def test_progress_without_newline_stays_small():
    sb = ScrollbackBuffer()
    for i in range(100_000):
        sb.append(f"\rprogress {i}")
    assert sb.partial_line == "progress 99999"
    assert sb.completed_lines == 0


def test_bounds_and_numbering():
    sb = ScrollbackBuffer(max_lines=100, max_chars=10_000)
    sb.append("".join(f"line {i}\n" for i in range(1, 1001)))
    assert sb.first_line == 901 and sb.completed_lines == 1000
    lines, begin, end, total = sb.page(0, 5)
    assert (begin, end, total) == (996, 1000, 1000)
    assert lines == [f"line {i}" for i in range(996, 1001)]
    lines, begin, end, total = sb.page(10, 5)
    assert lines[-1] == "line 990" and end == 990
    lines, begin, end, _ = sb.page(0, 5000)
    assert begin == 901 and len(lines) == 100


def test_text_beyond_ascii_keeps_a_quarter_of_the_characters():
    """Python keeps a line with an emoji at four bytes a character: 4 M characters of them held 16 MiB, for
    every session.  Once such text comes, the buffer keeps a quarter of the characters (about the same
    memory); text that is all ASCII keeps them all."""
    import sys
    ascii_only = ScrollbackBuffer(max_lines=10_000, max_chars=40_000)
    ascii_only.append("".join("x" * 99 + "\n" for _ in range(1000)))
    assert 39_000 <= ascii_only._chars <= 40_000
    wide = ScrollbackBuffer(max_lines=10_000, max_chars=40_000)
    wide.append("".join("x" * 99 + "\n" for _ in range(100)))
    assert wide._chars == 9_900  # (under both bounds: all kept)
    wide.append("".join("\U0001F600" * 99 + "\n" for _ in range(1000)))
    kept = list(wide.iter_lines(wide.first_line, wide.completed_lines))
    assert wide._chars == sum(map(len, kept)) <= 10_000 and kept[-1] == "\U0001F600" * 99
    assert sum(map(sys.getsizeof, kept)) <= 10_000 * 4 + 200 * len(kept)
    wide.append("".join("y" * 99 + "\n" for _ in range(1000)))  # (for good: ASCII again keeps a quarter)
    assert wide._chars <= 10_000


def test_long_line_is_cut_and_marked():
    sb = ScrollbackBuffer(max_line_chars=1000)
    for _ in range(100):
        sb.append("x" * 500)
    sb.append("\nnext\n")
    first = next(sb.iter_lines(1, 1))
    assert first.endswith(ScrollbackBuffer.LINE_CUT_MARKER) and len(first) < 1100


@given(st.lists(st.text(alphabet="ab\n", max_size=40), max_size=25), st.integers(1, 12), st.integers(1, 30),
       st.integers(8, 200))
def test_plain_lines_kept_match_a_line_by_line_reference(chunks, max_line_chars, max_lines, max_chars):
    """Lines of plain text in chunks of any size: each longer than ``max_line_chars`` cut and marked, the
    newest kept within both bounds, and the characters counted (which evicts by ``max_chars``) their sum.  The
    chunk-wide checks (a long line found by a stride of searches, the characters counted from the chunk's
    length) agree with measuring line by line."""
    sb = ScrollbackBuffer(max_lines=max_lines, max_chars=max_chars, max_line_chars=max_line_chars)
    for chunk in chunks:
        sb.append(chunk)
    *finished, _unfinished = "".join(chunks).split("\n")
    cut = [line if len(line) <= max_line_chars else line[:max_line_chars] + sb.LINE_CUT_MARKER
           for line in finished]
    kept = list(sb.iter_lines(sb.first_line, sb.completed_lines)) if sb.completed_lines else []
    assert sb.completed_lines == len(cut)
    assert kept == cut[len(cut) - len(kept):] and len(kept) <= max_lines
    assert sb._chars == sum(map(len, kept)) <= max_chars or len(kept) <= 1


def test_completed_since_never_repeats():
    sb = ScrollbackBuffer()
    sb.append("a\nb\npartial")
    lines, nxt, dropped = sb.completed_since(1)
    assert lines == ["a", "b"] and nxt == 3 and dropped == 0
    sb.append(" done\nc\n")
    lines, nxt, _ = sb.completed_since(nxt)
    assert lines == ["partial done", "c"]


def test_raw_ring_keeps_newest():
    ring = RawRing(capacity=10)
    for i in range(100):
        ring.append(bytes([i]))
    assert ring.tail() == bytes(range(90, 100))
    data, lost = ring.since(50)
    assert data == bytes(range(90, 100)) and lost == 40


@given(st.lists(st.binary(max_size=7), max_size=30), st.integers(0, 120), st.integers(0, 120))
def test_raw_ring_since_until_is_a_prefix_of_since(chunks, offset, until):
    """``since(offset, until)`` copies only up to ``until``: the same bytes as ``since(offset)`` cut there."""
    ring = RawRing(capacity=16)
    for chunk in chunks:
        ring.append(chunk)
    data, lost = ring.since(offset)
    cut, cut_lost = ring.since(offset, until)
    start = offset + lost
    assert cut_lost == lost
    assert cut == data[: max(0, min(until, ring.total) - start)]


def test_render_line():
    assert render_line("abc\r") == "abc"
    assert render_line("abc\rxy") == "xy"
    assert render_line("a\b\bb") == "b"
    assert render_line("abc\b \b") == "ab"  # the echo of an erased character
    assert render_line("$ ") == "$ "  # a prompt keeps its blank: the cursor is after it


def marked(*chunks: str) -> list[str]:
    """The lines (the unfinished one last) that chunks of program output leave in the line history."""
    sb = normalise(*(c.encode() for c in chunks))
    return list(sb.iter_lines(1, sb.completed_lines)) + [sb.partial_line]


def test_a_line_editors_cursor_motion_is_played_not_stripped():
    """readline, node and prompt_toolkit redraw a line with cursor motion; the history shows what the
    terminal shows (the motion used to be dropped with the escapes: '> > 6*7', 'echo fistt', 'abcxy')."""
    assert marked("abc\x1b[2Dxy\r\n") == ["axy", ""]
    assert marked("tab\x1b[10Gcol10\r\n") == ["tab      col10", ""]
    assert marked("progress 10%\r\x1b[Kdone\r\n") == ["done", ""]
    # readline: Up recalls 'echo first', Left Left, Backspace deletes the 'r' (CSI P), Enter
    assert marked("$ echo first", "\b\b\b\x1b[1Pst\b\b\r\nfist\r\n$ ") == ["$ echo fist", "fist", "$ "]
    assert marked("$ eho", "\b\b\x1b[1@c", "\x1b[C\x1b[C\r\n") == ["$ echo", ""]  # an insert inside the line
    # node recalls history by clearing the line and redrawing from column 1
    assert marked("> 6*7\r\n42\r\n> ", "\x1b[1G\x1b[0J> 6*7\x1b[6G") == ["> 6*7", "42", "> 6*7"]


def test_the_gap_a_wide_character_leaves_at_a_rows_end_is_no_text():
    """A wide character that does not fit in a row's last column goes to the next row.  readline (captured from
    bash, 160 columns) pads that column with a space and erases it while the cursor waits there to wrap; the
    line read ``中文 中文``.  An erase there blanks the row's last cell, as xterm does: before a narrow
    character the blank stays."""
    sb = ScrollbackBuffer()
    sb.columns = 10
    n = OutputNormalizer()
    for chunk in ("$ 中文中a \x1b[K文中\r\n", "12345678X\x1b[K\x1b[0mab\r\n", "123456789Y\x1b[Kab\r\n$ "):
        sb.append(n.feed(chunk.encode())[0])
    assert list(sb.iter_lines(1, sb.completed_lines)) == ["$ 中文中a文中", "12345678Xab", "123456789 ab"]
    assert sb.partial_line == "$ "


def test_a_line_editor_moves_over_wide_characters_by_columns():
    """A CJK character or an emoji takes two columns, and a line editor moves, deletes and redraws by columns:
    readline's Backspace over '好' in 'echo 你好世界' (captured from bash) left 'ech世界世界', each character
    taken as one column.  Writing over half of a wide character blanks the other half, as a terminal does."""
    edit = "\b\x1b[K\b\b\b\b\b\b\x1b[2P世界\b\b\b\b"  # Backspace (the X), Left, Left, Backspace (好)
    assert marked("$ echo 你好世界X", edit, "\r\n你世界\r\n$ ") == ["$ echo 你世界", "你世界", "$ "]
    assert marked("$ 日本\x1b[4D\x1b[1@x\r\n") == ["$ x日本", ""]
    assert render_line("你好\bX") == "你 X" and render_line("你好\b\b\bX") == " X好"
    assert render_line("👍🏽ok\b\bOK") == "👍🏽OK"


def test_prompt_toolkit_lines_and_the_room_it_reserves():
    """IPython (prompt_toolkit) as captured from a real session: it redraws its prompt, prints 34 blank
    lines for its menus and climbs back over them; none of that is line text."""
    answer = ("\x1b[?25l\x1b[?7l\x1b[8D\x1b[0m\x1b[J\x1b[0mIn [1]: 6*7\x1b[11D\x1b[0m\r\r\n\x1b[J\x1b[?7h"
              "\x1b[0m\x1b[?12l\x1b[?25h\x1b[?2004l\x1b[0m\x1b[?7h\x1b[0mOut[1]: \x1b[0m42\r\n\r\n\x1b[?2004h"
              "\x1b[?25l\x1b[0m\x1b[?7l\x1b[0m\x1b[J\x1b[0mIn [2]:\x1b[7D\x1b[8C\x1b[?7h\x1b[0m\x1b[?12l\x1b[?25h"
              "\x1b[?25l\x1b[?7l\x1b[8D\x1b[0mIn [2]:\x1b[0m" + "\r\r\n" * 34 + "\x1b[0m \x08\x1b[34A\x1b[8C\x1b[?7h"
              "\x1b[0m\x1b[?12l\x1b[?25h")
    assert marked("In [1]:\x1b[7D\x1b[8C", answer) == ["In [1]: 6*7", "Out[1]: 42", "", "In [2]:"]
    # a line with text is not taken out: the cursor climbs to the blank row and comes down to 'b' again
    assert marked("a\r\n\r\nb\x1b[1A\r\n") == ["a", "", "b"]


def test_lines_a_program_climbs_back_over_are_rewritten():
    """Multi-line progress (docker, uv, tqdm's nested bars) climbs back over the lines it printed and
    rewrites them: the history keeps their last state, as the terminal shows it (it kept every update:
    66 lines for 3 bars updated 20 times)."""
    bars = "".join(f"layer{i}: waiting\r\n" for i in range(3))
    for step in range(20):  # docker: up n, then each line erased and drawn again
        bars += "\x1b[3A" + "".join(f"\x1b[2K\rlayer{i}: {step * 5}%\r\n" for i in range(3))
    assert marked(bars, "all done\r\n") == ["layer0: 95%", "layer1: 95%", "layer2: 95%", "all done", ""]
    # indicatif (uv): the last lines cleared one by one (up, erase), then drawn - here fewer than before;
    # the rows cleared below stay blank and the next lines fill them, as on the screen
    drawn = "a 1/2\r\nb 1/2\r\nc 1/2\r\n"
    assert marked(drawn, "\x1b[1A\x1b[2K" * 3, "\rdone 2/2\r\n", "Installed\r\n", "$ ") == \
        ["done 2/2", "Installed", "$ ", ""]
    # tqdm's second bar: down a line, draw, back up (CSI A), the first bar drawn in place over it
    assert marked("outer 0%\r\n\rinner 50%\x1b[A\router 50%", "\r\n\rinner 100%\x1b[A\router 100%") == \
        ["outer 100%", "inner 100%"]
    # rich: the cursor stays on the last bar; each refresh erases it, climbs, erases and draws both again
    # (bars of a non-ASCII glyph, each refresh appended to the unfinished line's raw text)
    bar = "\u2501" * 40
    rich = f"dl a {bar} 0%\r\ndl b {bar} 0%"
    for n in range(1, 31):
        rich += f"\r\x1b[2K\x1b[1A\x1b[2Kdl a {bar} {n}%\r\ndl b {bar} {n}%"
    assert [line[-3:] for line in marked(rich, "\r\nrich done\r\n")] == ["30%", "30%", "one", ""]
    assert marked("y\r\ny\r\n", "\x1b[2A\x1b[2Bend\r\n") == ["y", "y", "end", ""]  # (the column kept: 0)
    # CSI F / E: up and down to column 0; down is bounded by the last line
    assert marked("x1\r\nx2\r\n", "\x1b[2Fy1\x1b[5Ez") == ["y1", "x2", "z"]
    # no further up than the lines there are, and never over a line the screen wraps
    assert marked("only\r\n\x1b[9Aover") == ["over", ""]
    for wide in ("w" * 200, "\u5bbd" * 90):  # (90 double-width characters: 180 columns)
        sb = normalise((wide + "\r\nlast\r\n\x1b[2Anot over the wrapped line").encode())
        assert list(sb.iter_lines(1, 2)) == [wide, "last"] and sb.partial_line == "not over the wrapped line"
    assert marked("\u5bbd" * 70 + "\r\nlast\r\n\x1b[2Anarrow enough") == \
        ["narrow enough " + "\u5bbd" * 63, "last", ""]  # (13 columns: 6 wide characters and half the 7th)


def test_a_move_down_from_the_last_line_goes_to_a_new_line():
    """Ruby's reline (irb) ends an input line by moving the cursor down a row (``CSI B``, it asked the terminal
    where the cursor is and rows are left below) and erasing it, not by a newline.  The move was dropped on
    the last line, and the erase blanked the command: the result of ``x = gets`` was empty, and each result's
    first line (its command) was missing.  A move down from an empty last line changes nothing."""
    enter = "\x1b[1G\x1b[1B\x1b[1G\x1b[K\x1b[1G"
    typed = "\x1b[1Girb(main):001:0> x = gets\x1b[K\x1b[1G\x1b[26G"
    assert marked(typed, typed + enter) == ["irb(main):001:0> x = gets", ""]
    assert marked(typed, enter, "bob\r\n=> 2\r\n\x1b[1Girb(main):002:0> ") == \
        ["irb(main):001:0> x = gets", "bob", "=> 2", "irb(main):002:0> "]
    assert marked("ab\x1b[2Bc") == ["ab", "", "  c"]  # (the column kept)
    assert marked("done\r\n", "\x1b[B\x1b[3Bnext") == ["done", "next"]


def test_a_cr_after_a_line_wrapped_returns_to_the_start_of_its_last_row():
    """zsh and fish end a command's output that has no newline with a mark and spaces to the row's end, then a
    CR, so that the prompt starts on a row of its own (the terminal wrapped the line at its width, and a CR
    returns to the start of the row the cursor is on).  The CR went back to the start of the whole line, and
    the prompt overwrote the output: ``printf 'no newline'`` showed nothing."""
    def played(*chunks: str, columns: int = 40) -> list[str]:
        sb, n = ScrollbackBuffer(), OutputNormalizer()
        sb.columns = columns
        for chunk in chunks:
            sb.append(n.feed(chunk.encode())[0])
        return list(sb.iter_lines(1, sb.completed_lines)) + [sb.partial_line]

    zsh = "no newline\x1b[1m\x1b[7m%\x1b[27m\x1b[1m\x1b[0m" + " " * 39 + "\r \r\r\x1b[0m\x1b[J% \x1b[K"
    assert played("$ printf 'no newline'\r\n", zsh) == ["$ printf 'no newline'", "no newline%", "% "]
    fish = "done\x1b[2m\u23ce\x1b(B\x1b[m" + " " * 39 + "\r\u23ce \r\x1b[K> "
    assert played(fish[:20], fish[20:]) == ["done\u23ce", "> "]  # (cut anywhere)
    # fish sets the title and returns to the line's start first: every CR counts, not only a chunk's first
    assert played("\x1b]0;printf\x07\r" + fish) == played("\r", fish) == ["done\u23ce", "> "]
    assert played("$ x\r\n\r" + zsh) == ["$ x", "no newline%", "% "]
    assert played("0" * 50 + "\rdone\r\n") == ["0" * 40, "done", ""]  # (the row above stays, as on the screen)
    assert played("x" * 40 + "\rover\r\n") == ["over", ""]  # (a full row waits at its end: no wrap yet)
    assert played("50%\r100%\r\n") == ["100%", ""]
    assert played("\u5bbd" * 25 + "\rab\r\n") == ["\u5bbd" * 20, "ab", ""]  # (20 wide characters a row)
    # A segment of at most half the row's columns is passed over without a look (a CR flood took 1.1 us a CR):
    # 20 wide characters fill the row without wrapping it, 21 wrap it.
    assert played("\r" * 1000 + "0" * 50 + "\rdone\r\n") == ["0" * 40, "done", ""]
    assert played("\r" + "\u5bbd" * 20 + "\rab\r\n") == ["ab", ""]
    assert played("\r" + "\u5bbd" * 21 + "\rab\r\n") == ["\u5bbd" * 20, "ab", ""]


def test_an_erase_of_the_line_leaves_no_blanks_at_its_end():
    """A menu (inquirer) erases its rows with ``CSI 2K`` from where its cursor stands, climbs back and prints
    its answer over them: the row it erased last kept a line of spaces, and every result and read after it
    ended in blank lines under the prompt.  Within a line, an erased cell is still a blank before what
    follows it."""
    erase = "\x1b[15G\x1b[2K" + "\x1b[1A\x1b[2K" * 4 + "\x1b[G"
    chunks = ("? Toppings?\r\n ham\r\n cheese\r\n\r\nhelp line here", erase, "done\r\nRESULT\r\n$ ")
    assert marked(*chunks) == ["done", "RESULT", "$ ", "", ""]
    assert normalise(*(c.encode() for c in chunks)).text_since(1, 1000)[0] == "done\nRESULT\n$ "
    assert marked("abcdef\x1b[2K") == [""] and marked("ab  \x1b[2Kcd") == ["    cd"]
    assert marked("$ \x1b[4G") == ["$ "]  # (a space written is text; one moved over at the end is not)


def test_erase_below_on_a_row_the_cursor_climbed_to_blanks_the_rows_under_it():
    """fzf --height draws its list under the command line, then as it leaves climbs back to its first row and
    erases below (``CSI J``): the list stayed in the history under the prompt ('> 42', '1/100 ---' after
    '$ '), and each next command's output was written over it."""
    drawn = "$ seq 100 | fzf\r\n" + "".join(f"  {n}\r\n" for n in range(8)) + "  1/100 ---\r\n> 42"
    assert marked(drawn, "\x1b[9A\r\x1b[J42\r\n$ ") == ["$ seq 100 | fzf", "42", "$ "] + [""] * 8
    assert marked(drawn, "\x1b[9A\r\x1b[J42\r\n$ echo next\r\nnext\r\n$ ")[:5] == \
        ["$ seq 100 | fzf", "42", "$ echo next", "next", "$ "]
    # on the row itself, CSI J erases to the end of the row (nothing is under the last line)
    assert marked("keep\r\nabcdef\x1b[3D\x1b[J") == ["keep", "abc"]
    assert marked("a\r\nbcd\r\ne\x1b[1A\r\x1b[1C\x1b[0J") == ["a", "b", ""]
    sb = normalise((drawn + "\x1b[9A\r\x1b[J42\r\n$ ").encode())
    assert sb._chars == sum(map(len, sb._lines))
    # the viewport of what came after the climb starts where it wrote, without the blank rows under it
    assert sb.cursor_line == 3 and sb.text_since(2, 10_000)[0] == "42\n$ "

    # output is untrusted: CSI J repeated on a climbed row spends the row budget, not a pass over the rows each
    from collections import deque

    from dsh_terminal_magics.ansi import MAX_ROWS, MAX_ROWS_LOOKED, ROW_BUDGET_CHARS

    class CountedRows(deque):
        writes = 0

        def __setitem__(self, index, value):
            CountedRows.writes += 1
            super().__setitem__(index, value)

    n, flood = OutputNormalizer(), ScrollbackBuffer()
    flood.append(n.feed(("x\r\n" * 300 + "\x1b[150A").encode())[0])
    flood._lines = CountedRows(flood._lines, maxlen=flood.max_lines)
    flood.append(n.feed(b"\x1b[J" * 200_000)[0])
    assert flood._chars == sum(map(len, flood._lines)) and list(flood.iter_lines(151, 151)) == [""]
    assert 149 <= CountedRows.writes <= (200_000 // ROW_BUDGET_CHARS + 2) * (MAX_ROWS_LOOKED + MAX_ROWS)


APT = ("Preparing to unpack .../sl_5.02-1+b1_amd64.deb ...\r\n\x1b7\x1b[40;0f\x1b[42m\x1b[30mProgress: [  0%]"
       "\x1b[49m\x1b[39m [....] \x1b8\x1b7\x1b[40;0f\x1b[42m\x1b[30mProgress: [ 20%]\x1b[49m\x1b[39m [#...] \x1b8"
       "Unpacking sl (5.02-1+b1) ...\r\n\x1b[s\x1b[40d\x1b[42mProgress: [ 40%]\x1b[49m [##..] \x1b[u"
       "Setting up sl (5.02-1+b1) ...\r\n")


def test_text_drawn_on_an_excursion_is_not_the_lines():
    """apt draws its progress on the bottom row: cursor saved, moved there, drawn, restored.  That text is
    elsewhere on the screen: it was glued into the lines ('Progress: [ 20%] [#...] Unpacking sl ...'),
    whatever the chunking."""
    want = ["Preparing to unpack .../sl_5.02-1+b1_amd64.deb ...", "Unpacking sl (5.02-1+b1) ...",
            "Setting up sl (5.02-1+b1) ..."]
    data = APT.encode()
    for size in range(1, len(data) + 1):
        chunks = [data[i:i + size] for i in range(0, len(data), size)]
        assert lines_of(normalise(*chunks)) == want, size
    # a save and restore in place (no move to an absolute position) keeps its text: it is on the line
    assert marked("status: \x1b7done\x1b8\r\n") == ["status: done", ""]


def test_an_excursion_without_a_restore_leaves_out_a_bounded_amount():
    """Output is untrusted: with no restore in sight, at most MAX_EXCURSION characters are left out."""
    from dsh_terminal_magics.mechanism.output import MAX_EXCURSION
    count = MAX_EXCURSION // 10 + 200
    tail = "".join(f"line{i:05d}\r\n" for i in range(count))
    lines = lines_of(normalise(b"before\r\n\x1b7\x1b[40;1H" + tail.encode()))
    assert lines[0] == "before" and lines[-1] == f"line{count - 1:05d}"
    assert len(lines) >= 190, len(lines)
    n = OutputNormalizer()
    n.feed(b"\x1b7\x1b[40;1H" + b"x" * (MAX_EXCURSION + 1))
    assert n._away < 0  # (given up: later plain chunks take the fast path again)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["\r\n", "\r", "\x1b[2K", "\x1b[K", "\x1b[J", "\x1b[3C", "\b"]),
                         st.builds(lambda n, f: f"\x1b[{n}{f}", st.integers(0, 12), st.sampled_from("ABEF")),
                         st.text(alphabet="ab\u5bbd ", min_size=1, max_size=90)), max_size=60),
       st.integers(1, 40))
def test_row_motion_keeps_the_history_consistent(pieces, chunk):
    """Any mix of text, newlines and row motion, cut into chunks anywhere: no marks in the lines, the
    character count matches the lines kept, and the cursor's line is one the history has."""
    data = "".join(pieces).encode()
    sb = ScrollbackBuffer(max_lines=20, max_chars=400)
    sb.columns = 40
    n = OutputNormalizer()
    for i in range(0, len(data), chunk):
        sb.append(n.feed(data[i:i + chunk])[0])
    lines = list(sb.iter_lines(1, sb.completed_lines)) + [sb.partial_line]
    assert all(ord(c) >= 0x20 for line in lines for c in line), lines
    assert sb._chars == sum(len(line) for line in sb._lines)
    assert sb.first_line <= sb.cursor_line <= sb.completed_lines + 1


def test_a_climb_is_bounded_and_a_programs_own_row_mark_characters_are_dropped():
    """Output is untrusted: ``CSI 999999A`` climbs at most MAX_ROWS lines, and a DC4/NAK byte of the
    program's own never acts as a row motion."""
    from dsh_terminal_magics.ansi import MAX_ROWS
    lines = "".join(f"l{i}\r\n" for i in range(MAX_ROWS + 10))
    sb = normalise(lines.encode(), b"\x1b[999999Atop")
    assert sb.cursor_line == sb.completed_lines + 1 - MAX_ROWS
    assert list(sb.iter_lines(11, 11)) == ["top"]
    spinner = normalise(b"job 1\r\njob 2\r\n\x1b[2A", *[f"\rjob 1 {c}".encode() for c in "|/-\\" * 5000])
    assert list(spinner.iter_lines(1, 1)) == ["job 1 \\"] and len(spinner._rows._raw) < 2 * 1024
    assert marked("a\r\nb\x14\x14c\x15\r\n") == ["a", "bc", ""]
    assert marked("a\r\n\x1b[1mb\x14c\r\n") == ["a", "bc", ""]


@given(st.text(alphabet="ab \b\r", max_size=30), st.integers(0, 60), st.sampled_from("CDGKP@"))
def test_marked_lines_hold_no_marks_and_a_long_one_compacts_to_the_same(text, number, final):
    raw = f"{text}\x1b[{number}{final}{text}"
    lines = marked(raw * 40)  # long enough to be compacted while unfinished
    assert all(ord(c) >= 0x20 for line in lines for c in line)
    assert lines[-1] == render_line(normalise((raw * 40).encode())._partial)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20))
@example([b"\x08", b"\n"])  # a backspace carried in the unfinished line
def test_any_bytes_never_crash_and_leave_no_escapes(chunks):
    sb = normalise(*chunks)
    for line in lines_of(sb):
        assert "\x1b" not in line and "\n" not in line and "\r" not in line
        assert all(ord(c) >= 0x20 or c == "\t" for c in line)


escape_atoms = st.sampled_from([b"\x1b[", b"\x1b]", b"\x07", b"\x1b\\", b"31m", b"\r", b"\n", b"\b", b"\x9b",
                                b"\x1b]52;c;", b"\x1b]8;;http://e\x07", b"text", b"\xe2\x9c", b"\x93", b";"])


@settings(max_examples=300, deadline=None)
@given(st.lists(escape_atoms, max_size=60), st.integers(min_value=1, max_value=7))
def test_escape_storms_in_any_chunking(atoms, step):
    data = b"".join(atoms)
    whole = normalise(data)
    parts = normalise(*[data[i:i + step] for i in range(0, len(data), step)])
    for line in lines_of(parts):
        assert "\x1b" not in line
    assert whole.completed_lines == parts.completed_lines


def test_cursor_motion_cannot_blow_up_the_text():
    """Output is untrusted: 7 bytes of 'CSI 4096C' must not become 4096 characters without bound (20,000 of
    them kept the loop busy for a minute)."""
    from dsh_terminal_magics.ansi import MAX_MARKS_PER_CHUNK, MAX_MOTION
    data = b"ab\x1b[4096C\x1b[4096D" * 20_000
    text, _ = OutputNormalizer().feed(data)
    assert len(text) <= 2 * 20_000 + MAX_MARKS_PER_CHUNK
    assert render_line("x\x1b[99999C".replace("\x1b[99999C", "\x0f" * 99_999) + "y") == "x" + " " * (MAX_MOTION - 1) + "y"


shell_atoms = st.sampled_from([b"echo hi", b"\r\n", b"$ ", b"\x1b]133;D;0\x07", b"\x1b]133;D;127;98765\x07",
                               b"\x1b]133;D\x07", b"\x1b]133;D;;98765\x07", b"\x07", b"\x0e", b"\t", b"\xc3\xa9", b"\xe2\x9c\x93", b"\b"])


@settings(max_examples=300, deadline=None)
@given(st.lists(shell_atoms, max_size=40), st.integers(min_value=1, max_value=9))
def test_a_shells_output_with_exit_markers_in_any_chunking(atoms, step):
    """Chunks whose only escapes are exit-code markers take a short path: the same text and events as the
    general one (a marker split across chunks goes the general way).  A marker without a status (our shell's
    when it does not know it, or a program's) gives None."""
    import re
    data = b"".join(atoms)
    marker = rb"\x1b\]133;D(?:;(-?\d*))?(?:;(\d+))?\x07"
    codes = [(int(code) if code else None, key.decode()) for code, key in re.findall(marker, data)]
    bare = re.sub(rb"\x1b\]133;D(?:;-?\d*)?(?:;\d+)?\x07", b"", data)
    expected = re.sub(r"[\x00-\x07\x0b-\x0c\x0e-\x1f\x7f]", "", bare.decode("utf-8", "replace"))
    for chunks in ([data], [data[i:i + step] for i in range(0, len(data), step)]):
        n = OutputNormalizer()
        texts, seen, bells = [], [], 0
        for chunk in chunks:
            text, events = n.feed(chunk)
            texts.append(text)
            seen += events.exit_markers
            bells += events.bells
        assert "".join(texts) == expected
        assert seen == codes
        assert bells == atoms.count(b"\x07")


inert_atoms = st.sampled_from([b"ls", b"\r\n", b">>> ", b"\x1b[0m", b"\x1b[01;34m", b"\x1b[m", b"\x1b[?2004h",
                               b"\x1b[?2004l", b"\x1b]133;D;0;98765\x07", b"\x1b]133;D;;98765\x07", b"\x07", b"\xc3\xa9",
                               b"\xe2\x9c\x93", b"\b", b"\x0e",
                               # (and escapes that are not inert: such a chunk goes the general way)
                               b"\x1b[K", b"\x1b[2D", b"\x1b[?1049h", b"\x1b[?1049l", b"\x1b7", b"\x1b8", b"\x1b[5;1H",
                               b"\x1b[6n", b"\x1b["])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(inert_atoms, max_size=6), max_size=12), st.integers(min_value=1, max_value=9))
@example([[b"\x1b7"], [b"\x1b[0m"], [b"\x1b[5;1H", b"ls", b"\x1b8"]], 1)  # (a save ending a chunk is forgotten)
def test_chunks_of_colours_markers_and_paste_switches_read_as_the_general_path_reads_them(atom_chunks, step):
    """A chunk whose only escapes are colours, exit-code markers and bracketed paste switched takes a short
    path (a python REPL's prompt, ``ls --color``): the same text and events, chunk by chunk, as the general
    path gives the same chunks."""
    data = b"".join(b"".join(atoms) for atoms in atom_chunks)
    for chunks in ([b"".join(atoms) for atoms in atom_chunks], [data[i:i + step] for i in range(0, len(data), step)]):
        short, general = OutputNormalizer(), OutputNormalizer()
        for chunk in chunks:
            (text, events), (expected, expected_events) = short.feed(chunk), general._feed_escaped(chunk)
            assert text == expected
            assert events == expected_events


def test_a_reader_gets_a_line_again_when_it_is_rewritten():
    """A reader that streamed lines (a job's output, on_output) gets each line the program rewrites after
    that again, as it reads now, once the cursor has left it - never the same rewrite twice."""
    sb, n = ScrollbackBuffer(), OutputNormalizer()

    def feed(data: bytes) -> None:
        sb.append(n.feed(data)[0])

    feed(b"a 0%\r\nb 0%\r\n")
    lines, cursor, _ = sb.completed_since(1)
    seen = sb.rewrites
    assert lines == ["a 0%", "b 0%"] and sb.rewritten_since(seen, cursor) == ([], seen)
    feed(b"\x1b[2A\x1b[2Ka 50%\r\n\x1b[2Kb 5")  # row a left; row b still being written
    again, seen = sb.rewritten_since(seen, cursor)
    assert again == ["a 50%"]
    feed(b"0%\r\n")
    again, seen = sb.rewritten_since(seen, cursor)
    assert again == ["b 50%"] and sb.rewritten_since(seen, cursor)[0] == []
    assert sb.rewritten_since(0, 2)[0] == ["a 50%"]  # (only lines the reader had: below its cursor)


def test_row_motion_has_a_budget():
    """Output is untrusted: climbing 200 rows and back, 5000 times in one chunk, looks at a bounded number
    of rows (it cost the loop 90-250 ms a 60 KB chunk); motions past the budget are dropped."""
    from dsh_terminal_magics import ansi
    looked: list[int] = []
    real = ansi._screen_width
    try:
        ansi._screen_width = lambda line: looked.append(1) or real(line)  # type: ignore[assignment]
        sb = normalise(b"y\r\n" * 300, b"\x1b[200A\x1b[200B" * 5000 + b"end\r\n")
    finally:
        ansi._screen_width = real  # type: ignore[assignment]
    assert len(looked) <= ansi.MAX_ROWS_LOOKED + ansi.MAX_ROWS, len(looked)
    assert "end" in lines_of(sb)[-3:], lines_of(sb)[-3:]


@pytest.mark.parametrize("pattern", [b"x\x1b[A", b"x\x1b[2A\x1b[B", b"x\x1b[9999D", b"\x1b[A\x1b[9999C\x1b[9999@x",
                                     b"x\x1b[200A\x1b[1000Cx\x1b[200B"])
def test_rewriting_upper_rows_costs_what_the_output_sends(pattern):
    """Output is untrusted, and the history is kept on the kernel's loop: writing on a row the cursor climbed
    to replayed the whole row at every write, a character at a time (``x CSI A`` at the top row: ~10,000
    Python lines run per byte of output, a few seconds of it held the loop for minutes).  Counted here:
    Python lines run per byte fed, over 20 chunks of 4 KiB."""
    import sys
    normalizer, history = OutputNormalizer(), ScrollbackBuffer()
    history.append(normalizer.feed(b"$ a command\r\n" * 5)[0])
    ran = [0]

    def tracer(frame, event, arg):
        ran[0] += 1
        return tracer
    data = pattern * (4096 // len(pattern))
    sys.settrace(tracer)
    try:
        for _ in range(20):
            history.append(normalizer.feed(data)[0])
    finally:
        sys.settrace(None)
    assert ran[0] / (20 * len(data)) < 100, ran[0] / (20 * len(data))  # (before: 65 to 9900)
    assert len(max(lines_of(history), key=len)) <= 64 * 1024 + len(ScrollbackBuffer.LINE_CUT_MARKER)


def test_a_row_the_cursor_climbed_to_is_one_screen_row_wide():
    """Text written on an upper row past :data:`~dsh_terminal_magics.ansi.MAX_ROW_CELLS` would wrap on a
    terminal: it is dropped, and the row is played into its line when the cursor leaves it and at the end
    of each chunk (the history shows the row as it is now)."""
    from dsh_terminal_magics.ansi import MAX_ROW_CELLS
    normalizer, history = OutputNormalizer(), ScrollbackBuffer()
    for chunk in (b"top\r\nbottom\r\n", b"\x1b[2A\rTOP" + b"y" * (2 * MAX_ROW_CELLS)):
        history.append(normalizer.feed(chunk)[0])
    assert lines_of(history)[0] == "TOP" + "y" * (MAX_ROW_CELLS - 3)  # (played at the chunk's end)
    history.append(normalizer.feed(b"\x1b[2B\rdone\r\n")[0])
    assert lines_of(history)[1:] == ["bottom", "done"], lines_of(history)
