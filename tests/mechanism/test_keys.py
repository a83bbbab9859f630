"""Named keys: what each sends, as xterm sends it, checked against the bytes a real program reads."""
from __future__ import annotations

import pytest

from dsh_terminal_magics.errors import InvalidArgumentError
from dsh_terminal_magics.mechanism.keys import encode_keys, holds_an_escape_key

XTERM = {
    "Enter": b"\r", "Tab": b"\t", "S-Tab": b"\x1b[Z", "BTab": b"\x1b[Z", "Esc": b"\x1b", "Backspace": b"\x7f",
    "BSpace": b"\x7f", "C-Space": b"\x00", "C-@": b"\x00", "C-_": b"\x1f", "C-\\": b"\x1c", "C-]": b"\x1d",
    "C-^": b"\x1e", "C-?": b"\x7f", "C-c": b"\x03", "C-M-a": b"\x1b\x01", "M-x": b"\x1bx", "M-Enter": b"\x1b\r",
    "Up": b"\x1b[A", "C-Left": b"\x1b[1;5D", "C-Right": b"\x1b[1;5C", "S-Up": b"\x1b[1;2A", "M-Left": b"\x1b[1;3D",
    "C-S-End": b"\x1b[1;6F", "Delete": b"\x1b[3~", "C-Delete": b"\x1b[3;5~", "PPage": b"\x1b[5~",
    "PgDn": b"\x1b[6~", "F1": b"\x1bOP", "S-F1": b"\x1b[1;2P", "F5": b"\x1b[15~", "C-F12": b"\x1b[24;5~",
    "enter": b"\r", "ESC": b"\x1b", "ctrl+c": b"\x03", "Ctrl-Shift-Left": b"\x1b[1;6D", "alt+x": b"\x1bx",
    "shift+tab": b"\x1b[Z", "^C": b"\x03", "^[": b"\x1b", "^": b"^", "S-a": b"A", "a": b"a", "-": b"-", "M--": b"\x1b-", "\u65e5": "\u65e5".encode(),
}


def test_each_key_sends_what_xterm_sends():
    """Back-tab (form fields backwards), C-Space (emacs' mark), C-_ (undo in readline, emacs, nano), C-\\,
    C-] and modified cursor keys (C-Left: a word back) had no name; an agent could not send them."""
    assert {key: encode_keys([key]) for key in XTERM} == XTERM
    assert encode_keys(["Up", "Home", "C-Up"], application_cursor=True) == b"\x1bOA\x1bOH\x1b[1;5A"


@pytest.mark.parametrize("key, problem", [
    ("Hyper", "unknown key 'Hyper'"), ("C-C-a", "repeats the modifier C-"), ("S-BTab", "repeats the modifier"),
    ("C-1", "no control character for '1'"), ("S-1", "send the shifted character itself"),
    ("C-Enter", "as Enter alone"), ("", "is not a key name"), ("F13", "unknown key 'F13'")])
def test_a_key_no_terminal_sends_is_refused_with_what_to_send(key, problem):
    with pytest.raises(InvalidArgumentError, match=problem) as caught:
        encode_keys([key])
    assert " use " in str(caught.value) or " send " in str(caught.value)  # (and says what to do)


def test_a_program_reads_the_keys_as_sent(tools, agent):
    """Through a real PTY to a program reading raw bytes: the keys arrive as encoded (NUL included)."""
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    script = ("import os, tty; tty.setraw(0); data = b''\n"
              "while not data.endswith(b'.'): data += os.read(0, 64)\n"
              "tty.setcbreak(0); print('read', data.hex())")
    r = tools.call("terminal_send", {"sessionId": sid, "text": f"python3 -c \"{script}\""}, agent=agent)
    assert r.wait_reason == "stdin_read", r.viewport
    keys = ["S-Tab", "C-Space", "C-_", "C-Left", "S-F1", "M-x", "."]
    r = tools.call("terminal_send", {"sessionId": sid, "text": "", "keys": keys, "submit": False}, agent=agent)
    assert f"read {encode_keys(keys).hex()}" in r.viewport and r.viewport.endswith("$ "), r.viewport
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)


@pytest.mark.parametrize(("typed", "holds"), [
    (b"\x1b", True), (b"i hi\x1b:wq\r", True), (b"\x1bx", True), (b"\x1b[B\x1b", True), (b"\x1b[", True),
    (b"\x1b[B", False), (b"\x1bOB", False), (b"\x1b[1;5A\x1bOQ\x1b[15~", False), (b"echo hi\r", False)])
def test_an_escape_key_is_an_esc_that_starts_no_whole_key_code(typed, holds):
    assert holds_an_escape_key(typed) is holds


def test_key_events_cut_the_text_each_key_and_the_enter_apart():
    from dsh_terminal_magics.mechanism import SendRequest

    request = SendRequest("hi", keys=("Down", "C-c"))
    assert request.key_events(request.payload()) == [b"hi", b"\x1b[B", b"\x03", b"\r"]
    assert request.key_events(b"hi\x1b[B\r") == [b"hi\x1b[B\r"]  # (not made of those parts: one piece)
    assert SendRequest("", keys=("Up",), submit=False).key_events(b"\x1b[A") == [b"\x1b[A"]
