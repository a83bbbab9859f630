"""Terminal byte grammar and colours: pure facts shared by the mechanism and the displays.

* the escape-sequence grammar (:data:`ESCAPE`, :data:`UNFINISHED`, :data:`SGR`),
* :func:`render_line`: how a terminal leaves one line after CR and BS,
* the palette the viewport shows (:data:`DEFAULT_FG`, :data:`DEFAULT_BG`,
  :data:`BASIC_COLOURS`, :func:`xterm_256`) - the same colours the session
  reports when a program asks the terminal for them.
"""
from __future__ import annotations

import re

#: One complete escape sequence: CSI, OSC (BEL or ST terminated), DCS/SOS/PM/APC, nF/Fp/Fe escapes.
ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|\x1b[PX^_][^\x1b]*\x1b\\"
    r"|\x1b[ -/]*[0-~]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)
#: The start of an escape sequence that has not finished yet (held for the next chunk).
UNFINISHED = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[PX^_][^\x1b]*\x1b?|[ -/]*)\Z")
#: An SGR (colour/attribute) sequence; group 1 is its parameters.
SGR = re.compile(r"\x1b\[([0-9;:]*)m")

DEFAULT_FG = "#e5e5e5"
DEFAULT_BG = "#1e1e1e"
#: The 16 basic colours (0-7 normal, 8-15 bright).
BASIC_COLOURS = ("#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
                 "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff")
_CUBE = (0, 95, 135, 175, 215, 255)


def xterm_256(n: int) -> str:
    """Colour ``n`` of the xterm 256-colour palette as ``#rrggbb`` (clamped to 0-255)."""
    n = max(0, min(255, n))
    if n < 16:
        return BASIC_COLOURS[n]
    if n < 232:
        n -= 16
        return f"#{_CUBE[n // 36]:02x}{_CUBE[(n // 6) % 6]:02x}{_CUBE[n % 6]:02x}"
    level = 8 + (n - 232) * 10
    return f"#{level:02x}{level:02x}{level:02x}"


def render_line(raw: str) -> str:
    """Apply CR and BS to one line as a terminal leaves it; SGR sequences count as zero-width.

    A trailing CR (the CR of CRLF) is dropped; a lone CR starts the line
    again, so only the text after the last one remains (with the colour
    state the overwritten part had set); a backspace deletes the character
    before it.
    """
    if "\r" in raw:
        head, _, last = raw.rstrip("\r").rpartition("\r")
        raw = "".join(m.group() for m in SGR.finditer(head)) + last if "\x1b" in head else last
    if "\b" in raw:
        raw = _apply_backspace(raw)
    return raw


def _apply_backspace(line: str) -> str:
    out: list[str] = []
    pieces = SGR.split(line) if "\x1b" in line else [line]
    for index, piece in enumerate(pieces):
        if index % 2:  # an SGR parameter group: keep the sequence, zero-width
            out.append(f"\x1b[{piece}m")
            continue
        for ch in piece:
            if ch != "\b":
                out.append(ch)
                continue
            for i in range(len(out) - 1, -1, -1):
                if not out[i].startswith("\x1b"):
                    del out[i]
                    break
    return "".join(out)


#: C0/C1 controls other than TAB, LF, CR and BS.
_OTHER_CONTROLS = re.compile(r"[\x00-\x07\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")


def sanitize_stream(text: str) -> str:
    """Keep printable text, TAB, LF, CR, BS and SGR (colour) sequences; drop every other control.

    Program output is data: no OSC 52 clipboard writes, no OSC 8 hyperlinks,
    no title changes, no cursor games survive; an unfinished sequence at the
    end is dropped (callers that stream hold it back first).  CRLF becomes LF.
    """
    out: list[str] = []
    pos = 0
    for match in SGR.finditer(text):
        out.append(_strip_controls(text[pos:match.start()]))
        out.append(match.group())
        pos = match.end()
    rest = text[pos:]
    tail = UNFINISHED.search(rest)
    if tail is not None:
        rest = rest[: tail.start()]
    out.append(_strip_controls(rest))
    return "".join(out).replace("\r\n", "\n")


def _strip_controls(piece: str) -> str:
    if "\x1b" in piece or "\x9b" in piece:
        piece = ESCAPE.sub("", piece)
    return _OTHER_CONTROLS.sub("", piece)
