"""Program output made safe to show: ANSI colours kept, everything else neutralised.

Pure functions.  Program output is data: :func:`sanitize_stream` keeps only
text, TAB/LF/CR/BS and SGR colour sequences (no OSC 52 clipboard writes, no
OSC 8 hyperlinks, no title changes, no cursor games); :func:`ansi_to_html`
escapes every character of text before it becomes HTML.
"""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

from ..ansi import BASIC_COLOURS, DEFAULT_BG, DEFAULT_FG, OTHER_CONTROLS as _OTHER_CONTROLS, SGR as _SGR, \
    has_row_marks, play_rows, render_line, sanitize_stream, sgr_without_subparameters, xterm_256

if TYPE_CHECKING:
    import pyte

#: Most parameters of one SGR sequence that are applied, and most digits of one parameter.
MAX_SGR_PARAMS = 32
MAX_SGR_DIGITS = 8
#: Most screen cells one HTML rendering of a full screen covers (larger screens are cut to their top rows).
MAX_SCREEN_CELLS = 250 * 500


def terminal_pre(body_html: str, extra_class: str = "", fg: str = DEFAULT_FG, bg: str = DEFAULT_BG,
                 wrap: bool = True) -> str:
    """The one dark ``<pre>`` every terminal rendering uses (viewport, cards, replays)."""
    classes = "dsh-terminal" + (f" {extra_class}" if extra_class else "")
    style = (f"margin:0;padding:4px;background:{bg};color:{fg};font-family:monospace;"
             + ("white-space:pre-wrap;overflow-x:auto" if wrap else "white-space:pre"))
    return f'<pre class="{classes}" style="{style}">{body_html}</pre>'


def terminal_lines(text: str) -> list[str]:
    """Split sanitised text into lines as a terminal leaves them (CR and BS played, and a line editor's
    cursor motion when it was sanitised with ``line_motion``: lines a program climbed back over are
    rewritten), SGR kept."""
    if has_row_marks(text):
        return play_rows(text)
    return [render_line(raw) for raw in text.split("\n")]


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
        if ":" in params:
            params = sgr_without_subparameters(params[:MAX_SGR_PARAMS * (MAX_SGR_DIGITS + 1)])
            if not params:
                return  # (only what is not shown: an underline's colour)
        parts = params.split(";", MAX_SGR_PARAMS)[:MAX_SGR_PARAMS] if params else ["0"]
        codes = [int(p[:MAX_SGR_DIGITS]) if p.isdigit() else 0 for p in parts]
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
        fg, bg = bg or DEFAULT_BG, fg or DEFAULT_FG
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
        return xterm_256(rest[1]), 2
    if len(rest) >= 4 and rest[0] == 2:
        r, g, b = (max(0, min(255, v)) for v in rest[1:4])
        return f"#{r:02x}{g:02x}{b:02x}", 4
    return None, len(rest)


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
    lines = terminal_lines(sanitize_stream(raw_text, line_motion=True))[-max_lines:]
    return terminal_pre(ansi_to_html("\n".join(lines)))


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
    """A pyte screen as escaped HTML rows, colours and the cursor cell kept.

    Runs of cells with the same style share one ``<span>``; a screen larger
    than :data:`MAX_SCREEN_CELLS` cells shows its top rows only, so one
    refresh stays small whatever size a program asks for.
    """
    rows = []
    visible = max(1, min(screen.lines, MAX_SCREEN_CELLS // max(screen.columns, 1)))
    screen_reversed = getattr(screen, "reverse_video", False)  # (our model's ``ESC[?5h``)
    for y in range(visible):
        # Read rows without creating them: pyte's resize shifts whatever rows exist in its buffer.
        line = screen.buffer[y] if y in screen.buffer else {}
        blank = getattr(line, "default", screen.default_char)  # (an erased line's colours)
        parts: list[str] = []
        run: list[str] = []
        run_style = ""
        for x in range(screen.columns):
            char = line[x] if x in line else blank
            at_cursor = y == screen.cursor.y and x == screen.cursor.x and not screen.cursor.hidden
            inverse = (char.reverse != at_cursor) != screen_reversed
            style = css_style(_pyte_colour(char.fg), _pyte_colour(char.bg), inverse=inverse,
                              bold=char.bold, italic=char.italics, underline=char.underscore)
            if style != run_style and run:
                parts.append(_span(run_style, "".join(run)))
                run = []
            run_style = style
            run.append(html.escape(char.data or " "))
        if run:
            parts.append(_span(run_style, "".join(run)))
        rows.append("".join(parts).rstrip())
    return "\n".join(rows)


def _span(style: str, text: str) -> str:
    return f'<span style="{style}">{text}</span>' if style else text
