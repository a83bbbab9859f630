"""Terminal byte grammar and colours: pure facts shared by the mechanism and the displays.

* the escape-sequence grammar (:data:`ESCAPE`, :data:`UNFINISHED`, :data:`SGR`),
* :func:`render_line`: how a terminal leaves one line after CR and BS, and
  after the cursor motions inside a line that line editors use
  (:func:`line_motion_marks`: ``CSI C/D/G/K``, erase below, and the blank
  lines prompt_toolkit reserves below its prompt and climbs back over),
* the palette the viewport shows (:data:`DEFAULT_FG`, :data:`DEFAULT_BG`,
  :data:`BASIC_COLOURS`, :func:`xterm_256`) - the same colours the session
  reports when a program asks the terminal for them.
"""
from __future__ import annotations

import re
import sys
from typing import Iterator, MutableSequence, Sequence

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
#: An SGR sequence with ITU T.416 sub-parameters (``CSI 4:3 m``, ``CSI 38:2::255:0:0 m``).
SGR_WITH_SUBPARAMETERS = re.compile(r"\x1b\[([0-9;]*:[0-9;:]*)m")


def sgr_without_subparameters(params: str) -> str:
    """SGR parameters with each colon group (``4:3``: an underline style; ``38:2:CS:R:G:B`` and ``38:5:N``: a
    colour; ``58:...``: the underline's colour) as the plain parameters that say the same, or left out when
    none does: ``4:0`` (no underline) is ``24``, any other underline style ``4``, colours ``38;2;R;G;B`` and
    ``38;5;N``.  Taken one number at a time, ``4:0`` reset every attribute, ``4:3`` made text italic, and
    ``38:2::255:0:0`` read its empty colour-space id as a colour value."""
    kept: list[str] = []
    for group in params.split(";"):
        if ":" not in group:
            kept.append(group)
            continue
        head, *subs = group.split(":")
        if head == "4":
            kept.append("24" if subs[:1] == ["0"] else "4")
        elif head in ("38", "48") and subs[:1] == ["5"] and len(subs) >= 2:
            kept.append(f"{head};5;{subs[1] or 0}")
        elif head in ("38", "48") and subs[:1] == ["2"] and len(subs) >= 4:
            red, green, blue = subs[-3:] if len(subs) == 4 else subs[2:5]  # (with or without a colour space)
            kept.append(f"{head};2;{red or 0};{green or 0};{blue or 0}")
    return ";".join(kept)

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


#: Cursor motion inside a line as :func:`line_motion_marks` leaves it for :func:`render_line`: C0 codes that
#: never reach a line otherwise (the normaliser deletes a program's own before marking).
CURSOR_LEFT, CURSOR_RIGHT, ERASE_RIGHT, ERASE_LINE, DELETE_CHAR, INSERT_CHAR = \
    "\x0e", "\x0f", "\x10", "\x11", "\x12", "\x13"
MARKS = CURSOR_LEFT + CURSOR_RIGHT + ERASE_RIGHT + ERASE_LINE + DELETE_CHAR + INSERT_CHAR
_LEFT = "\b" + CURSOR_LEFT
#: Row motion as :func:`line_motion_marks` leaves it for a history of lines (:class:`RowCursor`): up
#: (``CSI A``/``F``) and down (``CSI B``/``E``) one row per mark.
ROW_UP, ROW_DOWN = "\x14", "\x15"
#: Erase below (``CSI J``), after the erase of the cursor's own row: the rows under the cursor go blank (fzf
#: climbs back over the list it drew and erases it as it leaves).  Played by the history, like the row marks.
ERASE_BELOW = "\x16"
ROW_MARKS = ROW_UP + ROW_DOWN + ERASE_BELOW
#: What :func:`_play_line` plays in one step: a run of CRs, of moves left (BS too), of moves right, one erase,
#: a run of deletes or inserts, a run of row marks, or a run of text.
_PLAY_RUNS = re.compile(f"\r+|[{_LEFT}]+|{CURSOR_RIGHT}+|{ERASE_RIGHT}|{ERASE_LINE}|{DELETE_CHAR}+|{INSERT_CHAR}+"
                        f"|[{ROW_MARKS}]+|[^\r{_LEFT}{MARKS}{ROW_MARKS}]+")
_DROP_MARKS = dict.fromkeys(map(ord, MARKS + ROW_MARKS))
#: Longest single motion kept (a terminal moves the cursor within one screen row), most marks made from
#: one chunk (output is untrusted: ``CSI 1000C`` must not turn 7 bytes into 1000 marks without bound), and
#: most reserved lines taken out.
MAX_MOTION = 1024
MAX_MARKS_PER_CHUNK = 65536
MAX_RESERVED_LINES = 200
#: Most rows a program may climb back over and rewrite (multi-line progress is a few dozen at most), and
#: the raw text of the row the cursor is on kept before it is replayed into its shortest form.
MAX_ROWS = 200
MAX_ROW_RAW = 1024
#: Most cells of a row the cursor climbed to: a screen row, no wider than any terminal's (what a terminal
#: would wrap onto the row below is dropped).
MAX_ROW_CELLS = MAX_MOTION
#: Output is untrusted: each :data:`ROW_BUDGET_CHARS` of text move the cursor between rows at most
#: :data:`MAX_ROW_MOTIONS` times, looking at most :data:`MAX_ROWS_LOOKED` rows they pass (a 60 KB chunk of
#: ``CSI 200A CSI 200B`` cost the loop 90-250 ms); motions past the budget are dropped.
ROW_BUDGET_CHARS = 4096
MAX_ROW_MOTIONS = 256
MAX_ROWS_LOOKED = 2048
_LINE_MOTION = re.compile(r"\x1b\[(\d{0,6})([CDGKJP@ABEF])")
_ROW_PIECES = re.compile(f"({ROW_UP}+|{ROW_DOWN}+|{ERASE_BELOW}+|\n)")
#: Characters a terminal shows two columns wide: the main blocks of Unicode's East_Asian_Width W and F (CJK,
#: Hangul, kana, full-width forms, emoji) - close enough to tell a line the screen wraps, at C speed.
_WIDE = re.compile("[\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff\ua000-\ua4cf"
                   "\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6\U0001f300-\U0001f64f"
                   "\U0001f680-\U0001f6ff\U0001f900-\U0001f9ff\U0001fa70-\U0001faff\U00020000-\U0003fffd]")
_CURSOR_UP = re.compile(r"\x1b\[(\d{0,6})A")
#: What may fill lines a program reserved below its prompt: blanks, CRs, backspaces, colours.
_RESERVED_FILL = re.compile(r"(?:[ \r\b]|\x1b\[[0-9;]*m)*")


def has_marks(text: str) -> bool:
    """Whether ``text`` holds cursor-motion marks (six substring scans: a regex class scan is ~80x slower on
    the megabytes a stream brings; written out, not a generator, which costs more than the scans on a line)."""
    return CURSOR_LEFT in text or CURSOR_RIGHT in text or ERASE_RIGHT in text or ERASE_LINE in text \
        or DELETE_CHAR in text or INSERT_CHAR in text


def plays_on_cursor(raw: str) -> bool:
    """Whether :func:`render_line` plays this line on a cursor (backspaces or marks in it)."""
    return "\b" in raw or has_marks(raw)


def has_row_marks(text: str) -> bool:
    """Whether ``text`` holds row marks (:data:`ROW_UP`, :data:`ROW_DOWN`, :data:`ERASE_BELOW`)."""
    return ROW_UP in text or ROW_DOWN in text or ERASE_BELOW in text


def without_marks(text: str) -> str:
    """``text`` without mark characters of its own (a program's SO, SI, DLE, DC1-DC4, NAK and SYN are not kept
    anyway)."""
    return text.translate(_DROP_MARKS) if has_marks(text) or has_row_marks(text) else text


def line_motion_marks(text: str) -> str:
    """Turn a line editor's cursor motion into marks :func:`render_line` applies (call before escapes are
    stripped; mark characters the text held of its own are dropped first).

    ``CSI n D``/``C`` move left/right, ``CSI n G`` goes to column n, ``CSI K`` erases to the end of the
    line (``CSI J`` that and the rows below: :data:`ERASE_BELOW`), ``CSI 2K`` the whole line, ``CSI n P``/``@`` delete/insert characters at
    the cursor (readline editing inside a line).  ``CSI n A``/``F`` and ``B``/``E`` move up and down rows
    (:data:`ROW_UP`/:data:`ROW_DOWN`, ``F`` and ``E`` then to column 0).  Blank lines a program prints and then climbs
    back over in the same chunk (prompt_toolkit reserves room for its menus: 34 CRLFs, then ``CSI 34A``) are
    taken out, so the line history does not fill with them.
    """
    text = without_marks(text)
    if "\x1b[" not in text:
        return text
    if "A" in text:
        text = _fold_reserved_lines(text)
    budget = [MAX_MARKS_PER_CHUNK]

    def mark(match: re.Match[str]) -> str:
        marks = _motion_mark(match.group(1), match.group(2))
        budget[0] -= len(marks)
        return marks if budget[0] >= 0 else ""

    return _LINE_MOTION.sub(mark, text)


def _motion_mark(number: str, final: str) -> str:
    if final in "KJ":
        kind = int(number or 0)
        if kind == 0:
            return ERASE_RIGHT + ERASE_BELOW if final == "J" else ERASE_RIGHT
        return ERASE_LINE if (final, kind) == ("K", 2) else ""
    count = min(int(number or 1) or 1, MAX_MOTION)
    if final in "ABEF":
        rows = (ROW_UP if final in "AF" else ROW_DOWN) * min(count, MAX_ROWS)
        return rows + "\r" if final in "EF" else rows
    if final == "G":
        return to_column(count - 1)
    return {"D": CURSOR_LEFT, "C": CURSOR_RIGHT, "P": DELETE_CHAR, "@": INSERT_CHAR}[final] * count


def _fold_reserved_lines(text: str) -> str:
    """Take out ``n`` blank lines followed by ``CSI n A`` (the cursor climbs back to where they started)."""
    out: list[str] = []
    pos = 0
    for match in _CURSOR_UP.finditer(text):
        count = int(match.group(1) or 1) or 1
        start = _reserved_start(text, pos, match.start(), count) if count <= MAX_RESERVED_LINES else None
        if start is None:
            continue
        column = _column_after(text[text.rindex("\n", start, match.start()) + 1:match.start()])
        out.append(text[pos:start])
        out.append(to_column(column))
        pos = match.end()
    out.append(text[pos:])
    return "".join(out)


def _reserved_start(text: str, lower: int, end: int, count: int) -> int | None:
    """Where the ``count`` blank lines ending at ``end`` start (their first newline's CRs included), or
    None when the text before ``end`` is not that."""
    start = end
    for _ in range(count):
        newline = text.rfind("\n", lower, start)
        if newline < 0 or _RESERVED_FILL.fullmatch(text, newline + 1, start) is None:
            return None
        start = newline
    while start > lower and text[start - 1] == "\r":
        start -= 1
    return start


def _column_after(fill: str) -> int:
    """The cursor column after a reserved line's fill (blanks and backspaces from column 0)."""
    column = 0
    for ch in SGR.sub("", fill):
        column = 0 if ch == "\r" else max(0, column - 1) if ch == "\b" else column + 1
    return column


def render_line(raw: str, wrap: int = 0) -> str:
    """How a terminal leaves one line; SGR sequences count as zero-width (``wrap``: the terminal's columns,
    where its rows wrap; 0: not known).

    A trailing CR (the CR of CRLF) is dropped.  A line of text and CRs only
    keeps the text after its last CR (a progress bar keeps its last state, with
    the colour state the overwritten part had set).  A line with backspaces or
    cursor-motion marks (:func:`line_motion_marks`) is played on a cursor, as
    the terminal does: a CR or backspace moves it, later text overwrites, and
    blanks left at or after where it ends are dropped (``"\\b \\b"`` erases).
    """
    if plays_on_cursor(raw):
        return _play_line(raw, wrap=wrap)[0]
    if "\r" in raw:
        head, _, last = raw.rstrip("\r").rpartition("\r")
        raw = "".join(m.group() for m in SGR.finditer(head)) + last if "\x1b" in head else last
    return raw


def to_column(column: int) -> str:
    """Marks that move the cursor to ``column`` of its line (CR, then right)."""
    return "\r" + CURSOR_RIGHT * column


def cursor_column(raw: str) -> int:
    """The column the cursor ends in after one raw line (as :func:`render_line` plays it)."""
    return 0 if raw.endswith("\r") else _play_line(raw)[1]


class RowCursor:
    """The row the cursor is on in a history of printed lines, for programs that climb back over lines
    they printed and rewrite them: multi-line progress (docker, uv, tqdm's nested bars) leaves its last
    state, as on a terminal, not one copy of every line per update.

    ``up`` counts rows above the last, unfinished line.  The caller writes text on the last line itself
    while ``up`` is 0, and through :meth:`write` otherwise; what is written on a row is played into its
    line by :meth:`play`, which the caller calls before the cursor leaves the row (:meth:`stays` tells) and
    at the end of a chunk - not at each write: output is untrusted, and ``x CSI A`` repeated at the top row
    made every ``x`` replay the whole row (a few seconds of it held the loop for minutes).  Rows are the
    history's lines, so a climb over a line the screen wraps (wider than ``columns``) is not followed: the
    motion is dropped.
    """

    __slots__ = ("up", "_raw", "_motions", "_looks", "_unplayed", "_compact_at")

    def __init__(self) -> None:
        self.up = 0
        self._raw = ""  # the cursor's row while up > 0: its line, then what was written on it
        self._unplayed = False  # written on since it was last played into its line
        self._compact_at = MAX_ROW_RAW
        self.new_chunk()

    def new_chunk(self) -> None:
        """Start a new budget (:data:`MAX_ROW_MOTIONS`, :data:`MAX_ROWS_LOOKED`): at each
        :data:`ROW_BUDGET_CHARS` of text."""
        self._motions, self._looks = MAX_ROW_MOTIONS, MAX_ROWS_LOOKED

    def _spend(self, looks: int) -> bool:
        self._motions -= 1
        self._looks -= looks
        return self._motions >= 0 and self._looks >= 0

    @property
    def column(self) -> int:
        return cursor_column(self._raw)

    def stays(self, lines: Sequence[str], marks: str) -> bool:
        """Whether row motion ``marks`` would leave the cursor on its row (at the top of what it may climb,
        on the last line already, or past the budget)."""
        if self._motions <= 0:
            return True
        if marks[0] == ROW_UP:
            target = min(self.up + len(marks), len(lines), MAX_ROWS)
            return target <= self.up or self._looks < target - self.up
        return not self.up

    def climb(self, lines: Sequence[str], partial: str, count: int, columns: int) -> None:
        """Up ``count`` rows (clamped to the lines there are and :data:`MAX_ROWS`), keeping the column."""
        target = min(self.up + count, len(lines), MAX_ROWS)
        if target <= self.up or not self._spend(target - self.up):
            return
        column = self.column if self.up else cursor_column(partial)
        passed = [lines[-i] for i in range(max(self.up, 1), target + 1)]
        if not self.up:
            passed.append(render_line(partial))
        if any(_screen_width(line) > columns for line in passed):
            return
        self.up = target
        self._raw = lines[-target] + to_column(column)

    def down(self, lines: Sequence[str], count: int) -> str:
        """Down ``count`` rows (no further than the last line); on reaching it, what moves the cursor to its
        column there (to add to the last line's raw text)."""
        if not self.up or not self._spend(0):
            return ""
        column = self.column
        self.up = max(self.up - count, 0)
        if self.up:
            self._raw = lines[-self.up] + to_column(column)
            return ""
        return to_column(column)

    def newline(self, lines: Sequence[str]) -> str:
        """A line feed (after CR) on an upper row: down one row, to column 0."""
        self.up -= 1
        self._raw = lines[-self.up] + "\r" if self.up else ""
        return "" if self.up else "\r"

    def erase_below(self, lines: MutableSequence[str]) -> int:
        """Blank the finished lines under the cursor's row (the caller blanks the unfinished last one):
        the characters taken out.  Within the budget (output is untrusted: ``CSI J`` repeated)."""
        if self.up < 2 or not self._spend(self.up):
            return 0
        erased = 0
        for index in range(len(lines) - self.up + 1, len(lines)):
            erased += len(lines[index])
            lines[index] = ""
        return erased

    def write(self, text: str) -> None:
        """Write ``text`` (no newline) on the cursor's row."""
        self._raw += text
        self._unplayed = True
        if len(self._raw) > self._compact_at:  # a spinner on an upper row: keep its raw text short
            self._raw = compact_line(self._raw, MAX_ROW_CELLS)
            self._compact_at = len(self._raw) + MAX_ROW_RAW

    def play(self, lines: MutableSequence[str]) -> tuple[str, str] | None:
        """Play what was written on the cursor's row into its line: the line's (old, new) text, or None when
        nothing was written since the last play."""
        if not self._unplayed:
            return None
        self._unplayed = False
        new = _play_line(self._raw, MAX_ROW_CELLS)[0]  # (a shorter text leaves the rest of the row)
        old, lines[-self.up] = lines[-self.up], new
        return old, new


def _screen_width(line: str) -> int:
    """Columns a rendered line takes (wide East Asian characters and emoji take two)."""
    if line.isascii():
        return len(line)
    if "\x1b" in line:
        line = SGR.sub("", line)
    return len(line) + len(_WIDE.findall(line))


def last_row_start(line: str, columns: int) -> int:
    """Where in ``line`` (text without marks) the row the terminal leaves the cursor on begins, the line wrapped
    at ``columns``: 0 when it did not wrap (a line exactly ``columns`` wide waits at its row's end, unwrapped).
    A wide character that does not fit at a row's end starts the next row."""
    if columns <= 0 or _screen_width(line) <= columns:
        return 0
    if line.isascii():
        return (len(line) - 1) // columns * columns
    cells = start = 0
    for index, char in enumerate(line):
        width = 2 if _WIDE.match(char) else 1
        if cells + width > columns:
            start, cells = index, 0
        cells += width
    return start


def play_rows(text: str, columns: int = MAX_MOTION) -> list[str]:
    """The lines ``text`` (with row marks) leaves, played with a :class:`RowCursor`."""
    lines: list[str] = []
    partial = ""
    rows = RowCursor()
    for piece in budgeted_pieces(text, rows):
        if rows.up and (piece == "\n" or (piece[0] in ROW_UP + ROW_DOWN and not rows.stays(lines, piece))):
            rows.play(lines)
        if piece[0] == ROW_UP:
            rows.climb(lines, partial, len(piece), columns)
        elif piece[0] == ROW_DOWN:
            partial += rows.down(lines, len(piece))
        elif piece[0] == ERASE_BELOW:
            if rows.up:
                rows.erase_below(lines)
                partial = ""
        elif piece != "\n":
            if rows.up:
                rows.write(piece)
            else:
                partial += piece
        elif rows.up:
            partial += rows.newline(lines)
        else:
            lines.append(render_line(partial))
            partial = ""
    if rows.up:
        rows.play(lines)
    return lines + [render_line(partial)]


def budgeted_pieces(text: str, rows: RowCursor) -> Iterator[str]:
    """``text`` split at row marks and newlines, each kept as a piece of its own (empty pieces dropped);
    ``rows`` gets a new budget at each :data:`ROW_BUDGET_CHARS` of text between the marks."""
    rows.new_chunk()
    written = 0
    for piece in _ROW_PIECES.split(text):
        if not piece:
            continue
        if piece[0] not in ROW_UP + ROW_DOWN:
            written += len(piece)
            if written >= ROW_BUDGET_CHARS:
                rows.new_chunk()
                written = 0
        yield piece


def compact_line(raw: str, width: int = sys.maxsize, wrap: int = 0) -> str:
    """A shorter raw line that renders the same (its first ``width`` cells) and leaves the cursor in the
    same column."""
    text, column = _play_line(raw, width, wrap)
    return text + to_column(column)


def _play_line(raw: str, width: int = sys.maxsize, wrap: int = 0) -> tuple[str, int]:
    """Play one raw line on a cursor: its text (colours kept before the cells they coloured; ``width`` cells
    at most) and the column the cursor ends in.  ``wrap``: the terminal's columns (0: not known).

    Played a run at a time (text, motion or edit), not a character at a time: a row's raw text holds up to
    :data:`MAX_MOTION` motion marks per move, and output is untrusted (see :class:`RowCursor`).  The cursor
    moves by cells, as a line editor's does: a wide character (CJK, emoji) takes two, the second
    :data:`_WIDE_TAIL`, and writing over half of one blanks the other half, as on a terminal (readline's
    Backspace over a CJK character, taken as one cell, left ``ech世界世界`` for ``echo 你世界``).

    An erase to the end of the row with the cursor past a row's last column (it waits there to wrap) erases
    that last cell, as xterm does; where a wide character follows, the cell is the gap the row's end left
    it (readline pads it with a space, then erases it: the line read ``中文 中文`` for ``中文中文``)."""
    cells: list[str] = []
    column = 0
    colour = ""
    gapped = False
    raw = raw.rstrip("\r")
    wide = not raw.isascii() and _WIDE.search(raw) is not None
    if wide:
        raw = _WIDE.sub(_WITH_TAIL, raw.replace(_WIDE_TAIL, ""))
    pieces = SGR.split(raw) if "\x1b" in raw else [raw]
    for index, piece in enumerate(pieces):
        if index % 2:
            colour += f"\x1b[{piece}m"
            continue
        for run in _PLAY_RUNS.findall(piece):
            mark = run[0]
            if mark == "\r":
                column = 0
            elif mark in _LEFT:
                column = max(0, column - len(run))
            elif mark == CURSOR_RIGHT:
                column = min(column + len(run), MAX_MOTION)  # (no further right than any screen row)
            elif mark == ERASE_RIGHT:
                del cells[column:]
                if wrap and column and column % wrap == 0 and column == len(cells) and cells[-1][-1:] != _WIDE_TAIL:
                    cells[-1] = cells[-1][:-1] + _ROW_END_GAP  # (the cell the cursor waits on to wrap; colour kept)
                    gapped = True
            elif mark == ERASE_LINE:
                cells = [_ERASED] * min(column, len(cells))
            elif mark == DELETE_CHAR:
                del cells[column:column + len(run)]
            elif mark == INSERT_CHAR:
                if column < len(cells):
                    cells[column:column] = [" "] * len(run)
            elif mark not in ROW_MARKS and column < width:  # (row marks: played by RowCursor)
                run = run[:width - column]
                size = len(cells)
                if column > size:
                    cells.extend(" " * (column - size))
                end = column + len(run)
                if wide and column < size:  # (half of a wide character overwritten: the other half goes blank)
                    if column and cells[column] == _WIDE_TAIL:
                        cells[column - 1] = " "
                    if end < size and cells[end] == _WIDE_TAIL:
                        cells[end] = " "
                cells[column:end] = [colour + run[0], *run[1:]]
                colour = ""
                column = end
    # Blanks the cursor left behind it, and what an erase of the line left at its end: no text, as on a screen
    # (a menu that erased its lines, climbed back and printed above them left lines of spaces under the prompt).
    while cells and (cells[-1] == _ERASED or (len(cells) > column and cells[-1][-1:] == " ")):
        cells.pop()
    if gapped:
        cells = [cell[:-1] + _gap(cells, index) if cell.endswith(_ROW_END_GAP) else cell
                 for index, cell in enumerate(cells)]
    text = "".join(cells).replace(_ERASED, " ") + colour
    return (text.replace(_WIDE_TAIL, "") if wide else text), column


def _gap(cells: list[str], index: int) -> str:
    """An erased cell at a row's end: no text before a wide character (the gap it left), else a blank."""
    return "" if index + 2 < len(cells) and cells[index + 2] == _WIDE_TAIL else " "


#: The second cell of a wide character while a line is played: a control the text never holds (the normaliser
#: drops it), read as text by :data:`_PLAY_RUNS`, and taken out of what the line shows.
_WIDE_TAIL = "\x01"


_WITH_TAIL = "\\g<0>" + _WIDE_TAIL
#: A cell an erase of the line (``CSI 2K``) blanked, while a line is played: a space within the text, nothing at
#: its end.
_ERASED = "\x02"
#: The last cell of a row, erased while the cursor waited past it to wrap (see :func:`_play_line`).
_ROW_END_GAP = "\x03"


#: C0/C1 controls other than TAB, LF, CR and BS (and the same sparing the marks).
OTHER_CONTROLS = re.compile(r"[\x00-\x07\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")
CONTROLS_BUT_MARKS = re.compile(r"[\x00-\x07\x0b\x0c\x17-\x1f\x7f\x80-\x9f]")


def sanitize_stream(text: str, line_motion: bool = False) -> str:
    """Keep printable text, TAB, LF, CR, BS and SGR (colour) sequences; drop every other control.

    Program output is data: no OSC 52 clipboard writes, no OSC 8 hyperlinks,
    no title changes, no cursor games survive; an unfinished sequence at the
    end is dropped (callers that stream hold it back first).  CRLF becomes LF.
    ``line_motion``: keep a line editor's cursor motion as the marks
    :func:`render_line` plays (for callers that render lines, never for text
    printed as it is).
    """
    controls = OTHER_CONTROLS
    if line_motion:
        text = line_motion_marks(text)
        controls = CONTROLS_BUT_MARKS
    out: list[str] = []
    pos = 0
    for match in SGR.finditer(text):
        out.append(_strip_controls(text[pos:match.start()], controls))
        out.append(match.group())
        pos = match.end()
    rest = text[pos:]
    tail = UNFINISHED.search(rest)
    if tail is not None:
        rest = rest[: tail.start()]
    out.append(_strip_controls(rest, controls))
    return "".join(out).replace("\r\n", "\n")


def _strip_controls(piece: str, controls: re.Pattern[str]) -> str:
    if "\x1b" in piece or "\x9b" in piece:
        piece = ESCAPE.sub("", piece)
    return controls.sub("", piece)
