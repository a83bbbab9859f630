"""Program output made safe to show: ANSI colours kept, everything else neutralised.

Pure functions.  Program output is data: :func:`sanitize_stream` keeps only
text, TAB/LF/CR/BS and SGR colour sequences (no OSC 52 clipboard writes, no
OSC 8 hyperlinks, no title changes, no cursor games); :func:`ansi_to_html`
escapes every character of text before it becomes HTML.
"""
from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

from ..mechanism.output import _ESCAPE, _UNFINISHED

if TYPE_CHECKING:
    import pyte

_SGR = re.compile(r"\x1b\[([0-9;:]*)m")
_OTHER_CONTROLS = re.compile(r"[\x00-\x07\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")
_STASH = "\x00"  # never survives sanitising, so safe as a placeholder

BASIC_COLOURS = ["#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
                 "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff"]


def sanitize_stream(text: str) -> str:
    """Keep printable text, TAB, LF, CR, BS and SGR (colour) sequences; drop every other control."""
    sgrs: list[str] = []

    def stash(match: re.Match[str]) -> str:
        sgrs.append(match.group())
        return _STASH

    text = _SGR.sub(stash, text)
    text = _ESCAPE.sub("", text)
    tail = _UNFINISHED.search(text)
    if tail is not None:
        text = text[: tail.start()]
    text = _OTHER_CONTROLS.sub(lambda m: m.group() if m.group() == _STASH else "", text)
    if sgrs:
        parts = text.split(_STASH)
        out = [parts[0]]
        for sgr, part in zip(sgrs, parts[1:]):
            out.append(sgr + part)
        text = "".join(out)
    return text.replace("\r\n", "\n")


def terminal_lines(text: str) -> list[str]:
    """Split sanitised text into lines as a terminal leaves them (CR rewrites, BS deletes), SGR kept."""
    lines = []
    for raw in text.split("\n"):
        raw = raw.rstrip("\r")
        if "\r" in raw:
            head, _, last = raw.rpartition("\r")
            raw = "".join(m.group() for m in _SGR.finditer(head)) + last  # keep the colour state
        if "\b" in raw:
            raw = _apply_backspace(raw)
        lines.append(raw)
    return lines


def _apply_backspace(line: str) -> str:
    out: list[str] = []
    for piece in re.split(r"(\x1b\[[0-9;:]*m)", line):
        if piece.startswith("\x1b"):
            out.append(piece)
            continue
        for ch in piece:
            if ch == "\b":
                for i in range(len(out) - 1, -1, -1):
                    if not out[i].startswith("\x1b"):
                        out.pop(i)
                        break
            else:
                out.append(ch)
    return "".join(out)


def strip_sgr(text: str) -> str:
    return _SGR.sub("", text)


class _Style:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.fg: str | None = None
        self.bg: str | None = None
        self.bold = self.italic = self.underline = self.inverse = self.dim = False

    def apply(self, params: str) -> None:
        codes = [int(p) if p.isdigit() else 0 for p in re.split(r"[;:]", params)] if params else [0]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                self.reset()
            elif c == 1:
                self.bold = True
            elif c == 2:
                self.dim = True
            elif c == 3:
                self.italic = True
            elif c == 4:
                self.underline = True
            elif c == 7:
                self.inverse = True
            elif c == 22:
                self.bold = self.dim = False
            elif c == 23:
                self.italic = False
            elif c == 24:
                self.underline = False
            elif c == 27:
                self.inverse = False
            elif 30 <= c <= 37 or 90 <= c <= 97:
                self.fg = BASIC_COLOURS[c - 30 if c < 90 else c - 82]
            elif 40 <= c <= 47 or 100 <= c <= 107:
                self.bg = BASIC_COLOURS[c - 40 if c < 100 else c - 92]
            elif c == 39:
                self.fg = None
            elif c == 49:
                self.bg = None
            elif c in (38, 48):
                colour, used = _extended_colour(codes[i + 1:])
                if colour is not None:
                    if c == 38:
                        self.fg = colour
                    else:
                        self.bg = colour
                i += used
            i += 1

    def css(self) -> str:
        return css_style(self.fg, self.bg, inverse=self.inverse, bold=self.bold, dim=self.dim,
                         italic=self.italic, underline=self.underline)


def css_style(fg: str | None, bg: str | None, *, inverse: bool = False, bold: bool = False, dim: bool = False,
              italic: bool = False, underline: bool = False) -> str:
    """Inline CSS for one run of terminal text (colours are ``#rrggbb`` or None for the default)."""
    if inverse:
        fg, bg = bg or "#1e1e1e", fg or "#e5e5e5"
    parts = []
    if fg:
        parts.append(f"color:{fg}")
    if bg:
        parts.append(f"background-color:{bg}")
    if bold:
        parts.append("font-weight:bold")
    if dim:
        parts.append("opacity:0.7")
    if italic:
        parts.append("font-style:italic")
    if underline:
        parts.append("text-decoration:underline")
    return ";".join(parts)


def _extended_colour(rest: list[int]) -> tuple[str | None, int]:
    if len(rest) >= 2 and rest[0] == 5:
        return _xterm_256(rest[1]), 2
    if len(rest) >= 4 and rest[0] == 2:
        r, g, b = (max(0, min(255, v)) for v in rest[1:4])
        return f"#{r:02x}{g:02x}{b:02x}", 4
    return None, len(rest)


def _xterm_256(n: int) -> str:
    n = max(0, min(255, n))
    if n < 16:
        return BASIC_COLOURS[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return f"#{steps[n // 36]:02x}{steps[(n // 6) % 6]:02x}{steps[n % 6]:02x}"
    level = 8 + (n - 232) * 10
    return f"#{level:02x}{level:02x}{level:02x}"


def ansi_to_html(text: str) -> str:
    """Sanitised text with SGR sequences to HTML spans; every text character is escaped."""
    style = _Style()
    out: list[str] = []
    pos = 0
    for match in _SGR.finditer(text):
        _emit(out, text[pos:match.start()], style)
        style.apply(match.group(1))
        pos = match.end()
    _emit(out, text[pos:], style)
    return "".join(out)


def _emit(out: list[str], chunk: str, style: _Style) -> None:
    if not chunk:
        return
    safe = html.escape(strip_controls(chunk), quote=True)
    css = style.css()
    out.append(f'<span style="{css}">{safe}</span>' if css else safe)


def strip_controls(text: str) -> str:
    return _OTHER_CONTROLS.sub("", text.replace("\x1b", ""))


def output_html(raw_text: str, max_lines: int) -> str:
    """The newest ``max_lines`` lines of raw terminal text as a safe ``<pre>`` block."""
    lines = terminal_lines(sanitize_stream(raw_text))[-max_lines:]
    return ('<pre class="dsh-terminal" style="margin:0;padding:4px;background:#1e1e1e;color:#e5e5e5;'
            'font-family:monospace;white-space:pre-wrap;overflow-x:auto">' + ansi_to_html("\n".join(lines))
            + "</pre>")


#: pyte's colour names, in the order of :data:`BASIC_COLOURS`.
_PYTE_NAMES = ["black", "red", "green", "brown", "blue", "magenta", "cyan", "white", "brightblack", "brightred",
               "brightgreen", "brightbrown", "brightblue", "brightmagenta", "brightcyan", "brightwhite"]
_PYTE_COLOURS = {**dict(zip(_PYTE_NAMES, BASIC_COLOURS)), "yellow": BASIC_COLOURS[3],
                 "brightyellow": BASIC_COLOURS[11]}


def _pyte_colour(name: str) -> str | None:
    if name in _PYTE_COLOURS:
        return _PYTE_COLOURS[name]
    if len(name) == 6 and all(c in "0123456789abcdefABCDEF" for c in name):
        return "#" + name.lower()
    return None  # "default" and anything unknown


def screen_html(screen: "pyte.Screen") -> str:
    """A pyte screen as escaped HTML rows, colours and the cursor cell kept."""
    rows = []
    for y in range(screen.lines):
        line = screen.buffer[y]
        parts = []
        for x in range(screen.columns):
            char = line[x]
            at_cursor = y == screen.cursor.y and x == screen.cursor.x and not screen.cursor.hidden
            style = css_style(_pyte_colour(char.fg), _pyte_colour(char.bg), inverse=char.reverse != at_cursor,
                              bold=char.bold, italic=char.italics, underline=char.underscore)
            text = html.escape(char.data or " ")
            parts.append(f'<span style="{style}">{text}</span>' if style else text)
        rows.append("".join(parts).rstrip())
    return "\n".join(rows)
