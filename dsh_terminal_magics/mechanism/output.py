"""Terminal output: raw bytes in, normalised text lines out.

Three pure-ish pieces, each owning one concern:

* :class:`OutputNormalizer` decodes UTF-8 incrementally, removes escape
  sequences (carrying an unfinished one across chunk boundaries) and reports
  the terminal events the session must act on (exit-code markers, cursor
  position requests, alternate screen, BEL).
* :class:`ScrollbackBuffer` turns the cleaned text into bounded, numbered
  lines: CRLF is a newline, a lone CR rewrites the current line (a progress
  bar keeps only its last state), backspace deletes.
* :class:`RawRing` keeps the newest raw bytes for screen rendering and
  recordings.
"""
from __future__ import annotations

import codecs
import logging
import re
from collections import deque
from dataclasses import dataclass, field
from itertools import accumulate, islice
from typing import Callable, Iterator

from ..ansi import CONTROLS_BUT_MARKS as _CONTROL_BUT_MARKS, ERASE_BELOW, ESCAPE as _ESCAPE, MAX_ROWS, ROW_DOWN, \
    ROW_UP, UNFINISHED as _UNFINISHED, RowCursor, compact_line, cursor_column, has_marks, has_row_marks, \
    last_row_start, line_motion_marks, plays_on_cursor, render_line, budgeted_pieces, to_column, without_marks

log = logging.getLogger(__name__)

#: A CR that is not the first half of a CRLF.
_LONE_CR = re.compile(r"\r(?!\n)")

#: A partial line played on a cursor (backspaces, marks) longer than this is replayed into its shortest
#: form (a spinner never ends).
COMPACT_MARKED_PARTIAL = 1024
#: The same C0 controls as bytes (safe to delete before decoding: UTF-8 never uses them in sequences).
_CONTROL_BYTES = bytes([*range(0x00, 0x08), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
#: A shell's exit-code marker: OSC 133;D, the status (empty: not known), and the key our shell set-up adds
#: (see shell_rc.bash).
_EXIT_MARKER = re.compile(r"\x1b\]133;D(?:;(-?\d*))?(?:;(\d+))?(?:\x07|\x1b\\)")
_EXIT_MARKER_BYTES = re.compile(_EXIT_MARKER.pattern.encode())
#: A switch of the alternate screen, the cursor keys or bracketed paste, or a full reset (RIS, ``ESC c``: what
#: ``reset`` sends), which puts the main screen and those modes back.
_SCREEN_MODE = re.compile(r"\x1b\[\?(1049|1047|47|1|2004|25)([hl])|\x1b(c)")
_DEVICE_ATTRIBUTES = re.compile(r"\x1b\[0?c")
#: Escapes that leave the line text and the screen's place alone and ask nothing: colours (SGR), exit-code
#: markers and bracketed paste switched on or off.  A chunk with no others (``ls --color``, ``grep``, a REPL
#: switching paste on at its prompt) skips the general path's escape-by-escape work.
_INERT_ESCAPES = re.compile(rb"\x1b\[[0-9;]*m|\x1b\[\?2004[hl]|" + _EXIT_MARKER_BYTES.pattern)

#: Longest unfinished escape sequence carried to the next chunk before it is dropped.
MAX_PENDING_ESCAPE = 64 * 1024
#: An excursion: the cursor saved (``ESC 7``, ``CSI s``), moved to an absolute position at once, and
#: restored (``ESC 8``, ``CSI u``).  What is drawn on the way is elsewhere on the screen (apt's progress on
#: the bottom row), not on the line the cursor comes back to.  At most this many characters are left out of
#: the line history while a restore has not come (output is untrusted).
_SAVE = re.compile(r"\x1b7|\x1b\[s")
_RESTORE = re.compile(r"\x1b8|\x1b\[u")
_ABSOLUTE_MOVE = re.compile(r"\x1b\[[0-9;]*[Hfd]")
MAX_EXCURSION = 4096


@dataclass
class TerminalEvents:
    """What one chunk of output asked of the terminal, besides text."""

    #: Exit-code markers, as (status, key): the status is None when the marker says it is not known, the key ""
    #: when the marker had none.
    exit_markers: list[tuple[int | None, str]] = field(default_factory=list)
    cursor_position_requests: int = 0
    device_attribute_requests: int = 0
    bells: int = 0
    alternate_screen: bool | None = None
    application_cursor: bool | None = None
    bracketed_paste: bool | None = None
    #: DECTCEM (``CSI ?25l``/``h``): True when the chunk hid the cursor last, False when it showed it.
    cursor_hidden: bool | None = None

    def __bool__(self) -> bool:
        return bool(
            self.exit_markers
            or self.cursor_position_requests
            or self.device_attribute_requests
            or self.bells
            or self.alternate_screen is not None
            or self.application_cursor is not None
            or self.bracketed_paste is not None
            or self.cursor_hidden is not None
        )


class OutputNormalizer:
    """Decode PTY bytes and strip escape sequences, keeping state across chunks.

    ``feed(b"...")`` returns ``(text, events)``: ``text`` keeps only printable
    characters, TAB, LF, CR and BS, plus the marks a line editor's cursor motion
    leaves (:func:`~..ansi.line_motion_marks`, applied by ``render_line``);
    ``events`` reports what the session must answer or record.  Invalid UTF-8
    becomes U+FFFD.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        #: True while a full-screen program has the alternate screen: its output is not line text.
        self.alternate = False
        #: Set by the session while a cursor-addressing program (``top``) owns the main screen.
        self.suppressed = False
        #: Characters left out of an excursion not yet ended (-1: none under way); a save that ended a chunk.
        self._away = -1
        self._saved_at_end = False

    def feed(self, data: bytes) -> tuple[str, TerminalEvents]:
        if not self._pending and not (self.alternate or self.suppressed) and self._away < 0 \
                and b"\xc2" not in data:
            if b"\x1b" not in data:
                return self._feed_plain(data)
            bare = _INERT_ESCAPES.sub(b"", data)
            if b"\x1b" not in bare:  # only colours, exit-code markers and bracketed paste switched
                self._saved_at_end = False  # (what the general path does: no move follows a save)
                text, events = self._feed_plain(bare)
                _inert_events(data, events)
                return text, events
        return self._feed_escaped(data)

    def _feed_escaped(self, data: bytes) -> tuple[str, TerminalEvents]:
        """:meth:`feed`'s general path, for any chunk: escapes found and acted on one by one."""
        text = self._pending + self._decoder.decode(data)
        self._pending = ""
        events = TerminalEvents()
        if "\x1b" in text or "\x9b" in text:
            text = self._hold_unfinished(text)
            _collect_events(text, events)
            if "\x07" in text:  # BEL as a sound, not as an OSC terminator
                events.bells = _ESCAPE.sub("", text).count("\x07")
            text = self._line_text(text)
        else:
            events.bells = text.count("\x07")
            if self._away >= 0:
                text = self._without_excursions(text)
            text = without_marks(text)  # (what is left of controls goes below; these would survive)
            if self.alternate:
                text = ""
        if self.suppressed:
            text = ""
        return _CONTROL_BUT_MARKS.sub("", text), events

    def _line_text(self, text: str) -> str:
        """Escapes removed (a line editor's cursor motion kept as marks); what a full-screen program drew on
        the alternate screen, and on an excursion, left out."""
        if self._away >= 0 or self._saved_at_end or "\x1b7" in text or "\x1b[s" in text:
            text = self._without_excursions(text)
        if "\x1b[?" not in text and "\x1bc" not in text and not self.alternate:
            return _ESCAPE.sub("", line_motion_marks(text))
        kept = []
        pos = 0
        for match in _SCREEN_MODE.finditer(text):
            if match.group(1) in ("1", "2004", "25"):
                continue
            if not self.alternate:
                kept.append(text[pos:match.start()])
            self.alternate = match.group(2) == "h"  # (a reset: off)
            pos = match.end()
        if not self.alternate:
            kept.append(text[pos:])
        return _ESCAPE.sub("", line_motion_marks("".join(kept)))

    def _without_excursions(self, text: str) -> str:
        if not text:  # (an escape held back whole: a save that ended the last chunk still counts)
            return text
        kept: list[str] = []
        pos = 0
        if self._saved_at_end and _ABSOLUTE_MOVE.match(text):
            self._away = 0
        self._saved_at_end = False
        while pos < len(text):
            if self._away >= 0:
                restore = _RESTORE.search(text, pos)
                end = len(text) if restore is None else restore.start()
                self._away += end - pos
                if self._away > MAX_EXCURSION:  # no restore in sight: the text is the line's after all
                    kept.append(text[pos:end])
                    self._away, pos = -1, end
                    continue
                if restore is None:
                    break
                self._away, pos = -1, restore.end()
                continue
            save = _SAVE.search(text, pos)
            if save is None:
                kept.append(text[pos:])
                break
            kept.append(text[pos:save.end()])
            pos = save.end()
            if _ABSOLUTE_MOVE.match(text, pos):
                self._away = 0
            self._saved_at_end = pos == len(text)
        return "".join(kept)

    def _feed_plain(self, data: bytes) -> tuple[str, TerminalEvents]:
        """Fast path for chunks with no escape and no C1 control: delete controls as bytes."""
        events = TerminalEvents()
        if b"\x07" in data:  # (a one-byte search first: counting is thirty times slower)
            events.bells = data.count(b"\x07")
        return self._decoder.decode(data.translate(None, _CONTROL_BYTES)), events

    def _hold_unfinished(self, text: str) -> str:
        # The earliest escape start that runs unfinished to the end (an OSC may hold an ESC).
        match = _UNFINISHED.search(text, max(0, len(text) - MAX_PENDING_ESCAPE))
        if match is None:
            return text
        self._pending = match.group()
        return text[: match.start()]


def only_inert_escapes(data: bytes) -> bool:
    """Whether every escape in ``data`` is one that asks and draws nothing (see :data:`_INERT_ESCAPES`)."""
    return b"\x1b" not in data or b"\x1b" not in _INERT_ESCAPES.sub(b"", data)


def _inert_events(data: bytes, events: TerminalEvents) -> None:
    """The events of a chunk whose escapes are all inert: its exit-code markers and bracketed paste's switch."""
    if b"\x1b]133;D" in data:
        events.exit_markers = [(_status(code), key.decode()) for code, key in _EXIT_MARKER_BYTES.findall(data)]
    paste = data.rfind(b"\x1b[?2004")
    if paste >= 0:
        events.bracketed_paste = data[paste + 7:paste + 8] == b"h"


def keyed_marker_at(data: bytes, key: str) -> int:
    """Where the first exit-code marker carrying ``key`` (our shell's: it is at its prompt) starts in ``data``,
    or -1."""
    wanted = key.encode()
    for match in _EXIT_MARKER_BYTES.finditer(data):
        if match.group(2) == wanted:
            return match.start()
    return -1


def _status(code: str | bytes) -> int | None:
    """A marker's status, or None when it has none (our shell's marker leaves it empty when it does not know it:
    see shell_rc.bash)."""
    return int(code) if code else None


def _collect_events(text: str, events: TerminalEvents) -> None:
    if "\x1b]133;" in text:
        events.exit_markers = [(_status(code), key) for code, key in _EXIT_MARKER.findall(text)]
    if "\x1b[6n" in text:
        events.cursor_position_requests = text.count("\x1b[6n")
    if "c" in text and _DEVICE_ATTRIBUTES.search(text):
        events.device_attribute_requests = len(_DEVICE_ATTRIBUTES.findall(text))
    if "\x1b[?" in text or "\x1bc" in text:
        for mode, flag, reset in _SCREEN_MODE.findall(text):
            if reset:
                events.alternate_screen = events.application_cursor = events.bracketed_paste = False
                events.cursor_hidden = False
            elif mode == "25":
                events.cursor_hidden = flag == "l"
            elif mode == "1":
                events.application_cursor = flag == "h"
            elif mode == "2004":
                events.bracketed_paste = flag == "h"
            else:
                events.alternate_screen = flag == "h"


def _has_line_longer(text: str, first_extra: int, limit: int) -> bool:
    """Whether a line that one of the LFs in ``text`` ends is longer than ``limit`` characters (the first one
    ``first_extra`` characters longer: it finishes the unfinished line before ``text``).  It searches for an LF
    at most ``limit`` characters on, one stride at a time: measuring every line was a pass over them as Python
    objects.  ``text`` holds an LF."""
    first, end = text.find("\n"), text.rfind("\n")
    if first_extra + first > limit:
        return True
    start = first + 1
    while end - start > limit:
        found = text.rfind("\n", start, start + limit + 1)
        if found < 0:
            return True
        start = found + 1
    return False


def _compact_partial(raw: str) -> str:
    """Drop what a later CR has already overwritten in an unfinished line."""
    cut = raw.rfind("\r", 0, len(raw) - 1)
    return raw[cut + 1 :] if cut >= 0 else raw


class ScrollbackBuffer:
    """Bounded, numbered lines of normalised output.

    Lines are numbered from 1 at session start and keep their numbers when old
    lines are evicted.  The unfinished last line (a prompt, a progress bar) is
    line ``completed + 1`` and is shown when it is not empty.  Bounds: at most
    ``max_lines`` lines and ``max_chars`` characters - a quarter of that once
    text beyond ASCII came (see :meth:`append`); a single line longer than
    ``max_line_chars`` is cut and marked.
    """

    LINE_CUT_MARKER = " [line cut]"

    def __init__(self, max_lines: int = 10_000, max_chars: int = 4 * 1024 * 1024,
                 max_line_chars: int = 64 * 1024) -> None:
        self.max_lines = max_lines
        self.max_chars = self._ascii_max_chars = max_chars
        self.max_line_chars = max_line_chars
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._chars = 0
        self._first = 1
        self._partial = ""
        self._partial_cut = False
        self.chars_written = 0
        #: Where a program that climbs back over lines it printed writes (see RowCursor); rows wider than
        #: ``columns`` wrap on the screen and are not climbed over.
        self._rows = RowCursor()
        self.columns = 160
        #: Rewrites of finished lines, counted as the cursor leaves each rewritten row: line number -> the
        #: count at its last one (for readers that streamed the line before: :meth:`rewritten_since`).
        self.rewrites = 0
        self._rewritten: dict[int, int] = {}
        self._dirty_row = 0

    # -- writing -----------------------------------------------------------
    def append(self, text: str) -> None:
        """Add cleaned text (only printable characters, TAB, LF, CR, BS and cursor-motion marks).

        The first text beyond ASCII cuts ``max_chars`` to a quarter, for good: Python keeps such a line at up
        to four bytes a character (an emoji), and a session's 4 M characters of them held 16 MiB - 64 of one
        agent's sessions over a gigabyte of the kernel's memory.  (A chunk that is all ASCII says so at once;
        counting each line's own width would cost every chunk a pass over its lines.)"""
        if not text:
            return
        if not text.isascii() and self.max_chars == self._ascii_max_chars:
            self.max_chars //= 4
            self._evict_chars()
        if "\r" in text:  # CRLF (how a PTY ends lines) to LF: deleting CRs is three times faster where all are so
            if _LONE_CR.search(text) is None:
                text = text.replace("\r", "")
            else:
                if self.columns and not self._rows.up:
                    text = self._wrapped_rows_kept(text)
                text = text.replace("\r\n", "\n")
        self.chars_written += len(text)
        if self._rows.up or has_row_marks(text):
            self._append_rows(text)
        else:
            self._append_lines(text)

    def _wrapped_rows_kept(self, text: str) -> str:
        """``text`` with a line break before the row a CR comes back to, when its line wrapped: the terminal
        wraps a line at its width, and a CR returns to the start of the row the cursor is on, not of the line.
        zsh and fish end a command's unfinished last line with a mark and spaces up to the row's end, then a CR,
        so that their prompt starts on a row of its own; the CR went back to the line's start, and the prompt
        overwrote the command's output.  Each lone CR is looked at, for what was written since the line began
        or the CR before it, on a line without cursor marks (a line editor's moves are played as they are).
        A row that starts in what an earlier ``text`` wrote is left as it was: a progress bar wider than the
        terminal, redrawn in a write of its own each time, stays one line."""
        pieces: list[str] = []
        done = begin = 0  # (text[:done] is in pieces; the segment the next CR ends begins at begin)
        head = self._partial
        narrow = self.columns // 2  # (no character takes more than two columns)
        for lone in _LONE_CR.finditer(text):
            cr = lone.start()
            if cr - begin <= narrow and not head:  # (it cannot have wrapped: a progress bar's redraw, a CR flood)
                begin = cr + 1
                continue
            newline = text.rfind("\n", begin, cr)
            if newline >= 0:
                begin, head = newline + 1, ""
            cut = self._row_cut(head, text[begin:cr])
            if cut > 0:
                kept = text[begin:begin + cut].rstrip(" ")
                if not kept and head and "\r" not in head:
                    self._partial = head.rstrip(" ")  # (the blanks at the end of the rows above are no text)
                pieces.append(text[done:begin] + kept + "\n")
                done = begin + cut
            begin, head = cr + 1, ""
        return "".join(pieces) + text[done:] if pieces else text

    def _row_cut(self, head: str, written: str) -> int:
        """Where in ``written`` (after ``head``, the line's text before it) the row a CR comes back to starts:
        0 when the line did not wrap, the row starts in ``head``, or the line is played on a cursor.  Only what
        followed the last CR in ``head`` counts: that CR came back to the start of the row."""
        head = head[head.rfind("\r") + 1:]
        segment = head + written
        if plays_on_cursor(segment) or has_row_marks(segment):
            return 0
        return last_row_start(segment, self.columns) - len(head)

    def _append_rows(self, text: str) -> None:
        """Text that moves the cursor up and down rows: what lands on an upper row rewrites that line."""
        rows = self._rows
        for piece in budgeted_pieces(text, rows):
            if piece[0] == ROW_DOWN and not rows.up and self._partial:
                # Down from the last line, with text on it: to new lines, at the same column, as on the screen
                # when rows are left below (reline, after Enter: it asked the terminal where its cursor is).
                self._append_lines("\n" * len(piece) + to_column(cursor_column(self._partial)))
                continue
            if piece[0] in ROW_UP + ROW_DOWN:
                if rows.stays(self._lines, piece):
                    continue
                self._leave_row()
            elif piece == "\n":
                self._leave_row()
            if piece[0] == ROW_UP:
                rows.climb(self._lines, self._partial, len(piece), self.columns)
            elif piece[0] == ROW_DOWN:
                self._append_lines(rows.down(self._lines, len(piece)))
            elif piece[0] == ERASE_BELOW:
                if rows.up:
                    self._erase_below()
            elif not rows.up:
                self._append_lines(piece)
            elif piece == "\n":
                self._append_lines(rows.newline(self._lines))
            else:
                rows.write(piece)
                self._dirty_row = self.cursor_line
        self._play_row()

    def _erase_below(self) -> None:
        """``CSI J`` on a row the cursor climbed to: the rows under it go blank, as on the screen (the next
        lines fill them)."""
        self._chars -= self._rows.erase_below(self._lines)
        self._partial, self._partial_cut = "", False

    def _play_row(self) -> None:
        """What was written on the row the cursor climbed to, into its line (see :class:`RowCursor`)."""
        played = self._rows.play(self._lines) if self._rows.up else None
        if played is not None:
            old, new = played
            if len(new) > self.max_line_chars:
                new = self._lines[-self._rows.up] = new[: self.max_line_chars] + self.LINE_CUT_MARKER
            self._chars += len(new) - len(old)

    def _leave_row(self) -> None:
        self._play_row()
        if self._dirty_row:
            self._left_rewritten_row()

    def _left_rewritten_row(self) -> None:
        self.rewrites += 1
        self._rewritten[self._dirty_row] = self.rewrites
        self._dirty_row = 0
        if len(self._rewritten) > 2 * MAX_ROWS:
            oldest = self.completed_lines - MAX_ROWS
            self._rewritten = {n: c for n, c in self._rewritten.items() if n >= oldest}

    def rewritten_since(self, seen: int, before: int) -> tuple[list[str], int]:
        """Lines numbered below ``before`` rewritten after rewrite count ``seen`` (their text now, in order),
        and the count to pass next time."""
        first = self._first
        numbers = sorted(n for n, count in self._rewritten.items() if count > seen and first <= n < before)
        return [self._lines[n - first] for n in numbers], self.rewrites

    def _append_lines(self, text: str) -> None:
        if not text:
            return
        if "\n" not in text:
            self._set_partial(self._partial + text)
            return
        pieces = text.split("\n")  # (line ends are LF here: see append)
        head = self._partial + pieces[0]
        tail = pieces.pop()
        pieces[0] = head
        marked = has_marks(text) or has_marks(head)
        chars = -1  # (the lines' characters, when they are the pieces as split: see _extend)
        if (marked or "\r" in text or "\b" in text or "\r" in head or "\b" in head
                or _has_line_longer(text, len(self._partial), self.max_line_chars)):
            lines = [self._finish(p) if ("\r" in p or "\b" in p or len(p) > self.max_line_chars
                                         or (marked and has_marks(p))) else p
                     for p in pieces]
        else:  # the common case, decided for the whole chunk at C speed
            lines = pieces
            chars = len(self._partial) + len(text) - len(tail) - len(lines)  # (less one LF a line)
        if self._partial_cut:
            lines[0] = lines[0][: self.max_line_chars] + self.LINE_CUT_MARKER
            chars = -1
        self._partial = ""
        self._partial_cut = False
        self._set_partial(tail)
        self._extend(lines, chars)

    def _finish(self, raw: str) -> str:
        line = render_line(raw[: 4 * self.max_line_chars], self.columns)  # (a longer line is cut anyway)
        if len(line) > self.max_line_chars:
            line = line[: self.max_line_chars] + self.LINE_CUT_MARKER
        return line

    def _set_partial(self, raw: str) -> None:
        played = plays_on_cursor(raw)
        if not played and "\r" in raw:
            raw = _compact_partial(raw)
        if len(raw) > self.max_line_chars:
            raw = raw[: self.max_line_chars]
            self._partial_cut = True
        if played and len(raw) > COMPACT_MARKED_PARTIAL:
            raw = compact_line(raw, wrap=self.columns)
        self._partial = raw

    def _extend(self, new: list[str], chars: int = -1) -> None:
        """Add finished lines (``chars``: their characters, when known; -1: count them)."""
        lines = self._lines
        excess = len(lines) + len(new) - self.max_lines
        if excess > 0:  # the bounded deque drops these itself, at C speed; account for them first
            old = min(excess, len(lines))
            dropped = sum(map(len, islice(lines, 0, old)))
            if excess > old:
                dropped += sum(map(len, new[: excess - old]))
            self._chars -= dropped
            self._first += excess
        lines.extend(new)
        self._chars += chars if chars >= 0 else sum(map(len, new))
        if self._chars > self.max_chars:
            self._evict_chars()

    def _evict_chars(self) -> None:
        lines = self._lines
        if self._chars > self.max_chars:
            over = self._chars - self.max_chars
            count = 0
            for count, total in enumerate(accumulate(map(len, lines)), 1):
                if total >= over:
                    break
            self._drop_oldest(count)

    def _drop_oldest(self, count: int) -> None:
        lines = self._lines
        self._chars -= sum(map(len, islice(lines, 0, count)))
        if count > len(lines) // 2:
            self._lines = deque(islice(lines, count, None), maxlen=self.max_lines)
        else:
            pop = lines.popleft
            for _ in range(count):
                pop()
        self._first += count

    # -- reading -----------------------------------------------------------
    @property
    def completed_lines(self) -> int:
        """Number of the newest finished line (0 when none)."""
        return self._first - 1 + len(self._lines)

    @property
    def cursor_line(self) -> int:
        """Number of the line the cursor is on: the unfinished last one, or a line a program climbed back to."""
        return self.completed_lines + 1 - self._rows.up

    @property
    def first_line(self) -> int:
        """Number of the oldest line still retained."""
        return self._first

    @property
    def partial_line(self) -> str:
        """The unfinished last line, rendered."""
        line = render_line(self._partial, self.columns)
        return line + self.LINE_CUT_MARKER if self._partial_cut else line

    @property
    def cursor_column(self) -> int:
        """The column the cursor is in (0: at the start of a line)."""
        return self._rows.column if self._rows.up else cursor_column(self._partial)

    @property
    def total_lines(self) -> int:
        """Number of the newest line, counting a non-empty unfinished line."""
        return self.completed_lines + (1 if self.partial_line else 0)

    def iter_lines(self, begin: int, end: int) -> Iterator[str]:
        """Yield lines ``begin..end`` (1-based, inclusive), clamped to what is retained."""
        begin = max(begin, self._first)
        last_done = self.completed_lines
        if begin <= min(end, last_done):
            start = begin - self._first
            stop = min(end, last_done) - self._first + 1
            for i, line in enumerate(self._lines):
                if i < start:
                    continue
                if i >= stop:
                    break
                yield line
        if end > last_done and begin <= last_done + 1:
            partial = self.partial_line
            if partial:
                yield partial

    def page(self, offset: int, count: int) -> tuple[list[str], int, int, int]:
        """Return ``(lines, line_begin, line_end, total_lines)`` for a newest-relative page.

        ``offset`` lines are skipped back from the newest; then up to
        ``count`` lines are returned, oldest first.  An empty page has
        ``line_begin == line_end + 1``.
        """
        total = self.total_lines
        end = total - offset
        begin = max(end - count + 1, self._first)
        if end < begin:
            return [], begin, begin - 1, total
        from_newest = total - begin <= end - self._first
        lines = self._newest_lines(begin, end) if from_newest else list(self.iter_lines(begin, end))
        return lines, begin, end, total

    def _newest_lines(self, begin: int, end: int) -> list[str]:
        out: list[str] = []
        number = self.total_lines
        if number > self.completed_lines:
            if begin <= number <= end:
                out.append(self.partial_line)
            number -= 1
        for line in reversed(self._lines):
            if number < begin:
                break
            if number <= end:
                out.append(line)
            number -= 1
        out.reverse()
        return out

    def text_since(self, line: int, max_chars: int) -> tuple[str, bool]:
        """Text of lines from ``line`` to the newest (with the unfinished one).

        Keeps the newest ``max_chars`` characters; the flag says whether
        anything was dropped (evicted or cut).
        """
        out: list[str] = []
        size = 0
        cut = line < self._first
        partial = self.partial_line
        if self.completed_lines + 1 >= line:
            out.append(partial)
            size += len(partial)
        number = self.completed_lines
        for text in reversed(self._lines):
            if number < line:
                break
            if size + len(text) + 1 > max_chars:
                cut = True
                room = max_chars - size - 1
                if room > 0:
                    out.append(text[-room:])
                break
            out.append(text)
            size += len(text) + 1
            number -= 1
        out.reverse()
        if self._rows.up:  # the blank rows under a cursor that climbed back are screen, not output
            keep = max(self.cursor_line - max(line, self._first) + 1, 1)
            while len(out) > keep and not out[-1]:
                out.pop()
        text = "\n".join(out)
        if len(text) > max_chars:
            text, cut = text[-max_chars:], True
        return text, cut

    def top_rewritten_since(self, seen: int) -> int | None:
        """The first line rewritten after rewrite count ``seen`` (the row the cursor is writing on
        included), or None: where the output of a program that climbed back over lines starts."""
        rows = [n for n, count in self._rewritten.items() if count > seen]
        if self._dirty_row:
            rows.append(self._dirty_row)
        return min(rows) if rows else None

    def completed_since(self, line: int) -> tuple[list[str], int, int]:
        """Finished lines from ``line`` on: ``(lines, next_line, dropped_lines)``."""
        dropped = max(0, self._first - line)
        begin = max(line, self._first)
        end = self.completed_lines
        if end < begin:
            return [], max(line, end + 1), dropped
        lines = self._newest_completed(begin, end)
        return lines, end + 1, dropped

    def _newest_completed(self, begin: int, end: int) -> list[str]:
        want = end - begin + 1
        if want >= len(self._lines):
            return list(self._lines)
        out = []
        for text in reversed(self._lines):
            out.append(text)
            if len(out) == want:
                break
        out.reverse()
        return out


class RawRing:
    """The newest ``capacity`` raw bytes of output, with a running byte count."""

    def __init__(self, capacity: int = 1024 * 1024) -> None:
        self.capacity = capacity
        self._buf = bytearray()
        self.total = 0

    def append(self, data: bytes) -> None:
        self._buf += data
        self.total += len(data)
        if len(self._buf) > 2 * self.capacity:
            del self._buf[: len(self._buf) - self.capacity]

    def tail(self, size: int | None = None) -> bytes:
        """Return the newest ``size`` bytes (default: all retained, up to capacity)."""
        size = self.capacity if size is None else min(size, self.capacity)
        return bytes(self._buf[-size:]) if size else b""

    def since(self, total_offset: int, until: int | None = None) -> tuple[bytes, int]:
        """Bytes written after absolute offset ``total_offset`` (up to absolute offset ``until``):
        ``(data, bytes_lost)``."""
        available = min(len(self._buf), self.capacity)
        start_abs = self.total - available
        lost = max(0, start_abs - total_offset)
        first = self.total - len(self._buf)
        begin = max(total_offset, start_abs) - first
        end = len(self._buf) if until is None else max(begin, min(until, self.total) - first)
        return bytes(self._buf[begin:end]), lost


class OutputListeners:
    """Callbacks run on the loop thread when a session's output or state changes.

    Registered like ipywidgets' ``CallbackDispatcher``: ``register(cb)`` /
    ``register(cb, remove=True)``.  A callback that raises is logged and
    skipped; it never breaks ingest.
    """

    def __init__(self) -> None:
        self._callbacks: list[Callable[[], None]] = []

    def register(self, callback: Callable[[], None], remove: bool = False) -> None:
        if remove:
            if callback in self._callbacks:
                self._callbacks.remove(callback)
        elif callback not in self._callbacks:
            self._callbacks.append(callback)

    def __call__(self) -> None:
        for callback in list(self._callbacks):
            try:
                callback()
            except Exception:
                log.exception("a terminal output listener failed (ignored)")
