"""Fuzzing the pure parts: paging maths, the ANSI -> HTML renderer, stream sanitising."""
from __future__ import annotations

import html
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_terminal_magics.mechanism.output import ScrollbackBuffer
from dsh_terminal_magics.notebook.ansi_html import _OTHER_CONTROLS, ansi_to_html, output_html, sanitize_stream, strip_sgr

lines_strategy = st.lists(st.text(alphabet=st.characters(blacklist_characters="\n\r\b\x1b",
                                                         blacklist_categories=("Cc", "Cs")), max_size=20),
                          max_size=120)


@settings(max_examples=300, deadline=None)
@given(lines_strategy, st.text(alphabet="abc", max_size=5), st.integers(1, 60), st.integers(10, 400),
       st.integers(0, 200), st.integers(1, 300))
def test_paging_matches_a_reference_model(lines, partial, max_lines, max_chars, offset, count):
    sb = ScrollbackBuffer(max_lines=max_lines, max_chars=max_chars)
    sb.append("".join(line + "\n" for line in lines) + partial)
    # reference: every line numbered from 1, the unfinished one last when not empty
    numbered = list(enumerate(lines, 1)) + ([(len(lines) + 1, partial)] if partial else [])
    retained = {n: text for n, text in numbered if n >= sb.first_line}
    assert sb.total_lines == len(numbered)
    got, begin, end, total = sb.page(offset, count)
    assert total == len(numbered)
    if got:
        assert end == total - offset
    else:  # nothing there: an empty page says so with begin == end + 1
        assert end == begin - 1 and (total - offset < sb.first_line or count == 0)
    assert got == [retained[n] for n in range(begin, end + 1)]
    assert len(got) <= count
    assert begin >= sb.first_line or not got
    assert sb.completed_lines - sb.first_line + 1 <= max_lines


adversarial = st.lists(st.sampled_from([
    "<script>alert(1)</script>", "&amp;", "\"'", "\x1b[31m", "\x1b[0m", "\x1b[38;5;200m", "\x1b[48;2;1;2;3m",
    "\x1b]52;c;SGVsbG8=\x07", "\x1b]8;;javascript:alert(1)\x1b\\", "click", "\x1b]8;;\x1b\\", "\x1b]0;title\x07",
    "\x1bP1$r\x1b\\", "\x1b[2J", "\x1b[?1049h", "\r", "\n", "\b", "\x07", "\x9b31m", "<", ">", "&", "✓", "\x00",
]), max_size=80)


@settings(max_examples=500, deadline=None)
@given(adversarial)
def test_html_never_carries_program_markup(parts):
    raw = "".join(parts)
    rendered = output_html(raw, 40)
    body = rendered[rendered.index(">") + 1: rendered.rindex("<")]
    text_only = re.sub(r'<span style="[^"<>]*">|</span>', "", body)
    assert "<" not in text_only and ">" not in text_only
    assert "&" not in re.sub(r"&(amp|lt|gt|quot|#x27);", "", text_only)
    assert "javascript" not in body and "SGVsbG8" not in body and "title" not in body.replace("&", "")
    assert "\x1b" not in body


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_ansi_to_html_escapes_any_text(text):
    out = ansi_to_html(sanitize_stream(text))
    stripped = re.sub(r'<span style="[^"<>]*">|</span>', "", out)
    visible = _OTHER_CONTROLS.sub("", strip_sgr(sanitize_stream(text)).replace("\x1b", ""))
    assert html.unescape(stripped) == visible  # every visible character shown, nothing added
    assert "<" not in stripped and ">" not in stripped


# What a program prints is untrusted and all of it is taken in on the kernel's loop: no output may cost the
# square of its length there.  Each stream below is 64-128 KB of one pattern that did, or of a neighbour of one
# (a regex trying a private marker at every place of a long parameter run: 64 KB took ~40 s; combining marks
# each re-forming their cell's text on the screen: 64 K of them ~50 s), taken in whole by every stage that
# takes output in.  Done in well under a second; the timeout only catches the square coming back.
QUADRATIC_SUSPECTS = {
    "CSI then a run of private markers": "\x1b[" + "<" * 65536 + "\n",
    "CSI then a run of parameters": "\x1b[" + "1;" * 32768 + "\n",
    "CSI then markers and intermediates": "\x1b[=" + "= " * 32768 + "\n",
    "combining marks on one character": "a" + "\u0301" * 65536,
    "joiners on one character": "a" + "\u200d" * 43690,
    "an unfinished string": "\x1bP" + "q" * 65536,
    "an unfinished OSC": "\x1b]0;" + "t" * 65536,
    "carriage returns and backspaces": "x" * 16384 + "\r\b" * 24576,
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", list(QUADRATIC_SUSPECTS))
def test_no_output_costs_the_square_of_its_length(name):
    from dsh_terminal_magics.mechanism.output import OutputNormalizer
    from dsh_terminal_magics.mechanism.screen import ScreenModel
    data = QUADRATIC_SUSPECTS[name].encode("utf-8")
    model = ScreenModel(40, 160, 0)
    model.feed(b"\x1b[?1049h")
    model.feed(data)
    normalizer, scrollback = OutputNormalizer(), ScrollbackBuffer()
    scrollback.append(normalizer.feed(data)[0])
    rendered = output_html(data.decode("utf-8"), 40)  # (the viewport's and the cards' rendering)
    assert rendered.startswith("<pre") and "<script" not in rendered
    assert len(model.snapshot().text()) <= 40 * 161 * 32  # (a cell holds a bounded number of code points)
