"""Displays cannot be fooled: NUL bytes, giant SGR parameters, huge screens and escape-laden names."""
from __future__ import annotations

import time

import pyte
import pytest
from IPython.core.error import UsageError

from dsh_terminal_magics.notebook.ansi_html import MAX_SCREEN_CELLS, ansi_to_html, sanitize_stream, screen_html
from dsh_terminal_magics.notebook.cards import show_cards


def test_nul_never_hides_what_follows():
    html = ansi_to_html(sanitize_stream("shown\x00hidden \x1b[31mred\x00more\x1b[0m"))
    assert "shownhidden" in html and "redmore" in html


def test_giant_and_repeated_sgr_parameters_are_bounded():
    giant = "\x1b[" + "9" * 5000 + "mtext"
    assert "text" in ansi_to_html(sanitize_stream(giant))
    many = "\x1b[" + ";".join(["1"] * 200_000) + "mbold"
    started = time.monotonic()
    assert "bold" in ansi_to_html(sanitize_stream(many))
    assert time.monotonic() - started < 5  # linear, not quadratic (a 200k-parameter sequence)


def test_sgr_sub_parameters_say_what_they_mean():
    """ITU T.416 sub-parameters (kitty's underline styles, colon colours) were read one number at a time:
    ``4:0`` (no underline) reset every attribute, ``4:3`` (curly underline) made text italic."""
    html = ansi_to_html("\x1b[1;4:3mcurly\x1b[4:0mbold only\x1b[38:2::255:0:0mred\x1b[58:2::1:2:3mstill"
                        "\x1b[48:5:21mblue bg")
    assert '<span style="font-weight:bold;text-decoration:underline">curly</span>' in html
    assert '<span style="font-weight:bold">bold only</span>' in html
    assert '<span style="color:#ff0000;font-weight:bold">red</span>' in html
    assert '<span style="color:#ff0000;font-weight:bold">still</span>' in html  # (an underline colour: no reset)
    assert '<span style="color:#ff0000;background-color:#0000ff;font-weight:bold">blue bg</span>' in html
    assert "italic" not in html
    giant = "\x1b[" + ":".join(["4"] * 200_000) + "mtext"
    assert ansi_to_html(giant).endswith("text</span>")


def test_a_huge_coloured_screen_renders_within_its_budget():
    screen = pyte.Screen(1000, 500)
    stream = pyte.Stream(screen)
    stream.feed("".join(f"\x1b[3{i % 8}mX" for i in range(1000 * 500)))
    html = screen_html(screen)
    assert html.count("\n") + 1 <= MAX_SCREEN_CELLS // 1000
    assert len(html) < 8 * 1024 * 1024


def test_magics_show_nul_giant_sgr_and_escaped_names(ip, magics, capsys):
    cards = show_cards(magics.tools, display=False)
    try:
        with pytest.raises(UsageError, match=r"holds '\\x1b', a control character"):  # (refused: never shown)
            ip.run_line_magic("term_open", "--name evil\x1b]0;pwned\x07\x1b[2J")
        ip.run_line_magic("term_open", "--name plain")
        capsys.readouterr()
        ip.run_line_magic("term_send", r"printf 'shown\0hidden\n'")
        assert "shownhidden" in capsys.readouterr().out
        giant = "9" * 5000
        r = ip.run_line_magic("term_send", f"printf '\\e[{giant}mafter-giant\\e[0m\\n'")
        assert r.wait_reason == "stdin_read" and "after-giant" in capsys.readouterr().out
        assert any("after-giant" in card for card in cards.cards)  # the card was not dropped
        listing = ip.run_line_magic("term_list", "").text
        assert "\x1b" not in listing and "name=plain" in listing and "pwned" not in listing
        ip.run_line_magic("term_send", "--bg sleep 0.1 # \x1b[2J label")
        ip.run_line_magic("jobs", "")
        jobs = capsys.readouterr().out
        assert "\x1b" not in jobs and "\\x1b[2J" in jobs
    finally:
        cards.close()
