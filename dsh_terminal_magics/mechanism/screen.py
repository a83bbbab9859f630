"""Screen emulation for full-screen programs (pyte), fed only while a screen is needed.

pyte is pure Python (well under 2 MB/s here), so the session feeds a
:class:`ScreenModel` only while the alternate screen is active or a viewer
asks, in budgeted slices from the raw ring; when it has fallen far behind it
resynchronises from the ring's tail instead of replaying everything.
"""
from __future__ import annotations

import codecs
import copy
import functools
import operator
import re
import time
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, cast

import pyte
from wcwidth import wcwidth

from ..ansi import SGR_WITH_SUBPARAMETERS, sgr_without_subparameters
from .output import RawRing

#: DEC private modes of the alternate screen.
_ALTERNATE_SCREEN = (1049, 1047, 47)
_DATA = operator.attrgetter("data")
#: Fall further behind than this and the model restarts from the newest :data:`RESYNC_TAIL` bytes.
RESYNC_BYTES = 256 * 1024
RESYNC_TAIL = 32 * 1024
#: Most bytes fed to pyte between checks of the time budget; fewer when the last slice was costly.
SLICE = 4096
MIN_SLICE = 64
#: Most seconds one catch-up works (it runs on the kernel's loop): past it, the model is left behind and
#: the next catch-up goes on from there.  pyte takes ~2 MB/s of ordinary output, so :data:`RESYNC_BYTES`
#: of it fits well within; a flood of costly sequences does not hold the loop longer.
MAX_CATCH_UP_SECONDS = 0.5
#: Most code points one cell holds: zero-width characters past it are left out, as terminals cap the marks
#: they stack on a character.  Each one joined re-forms the cell's text, so a flood of combining marks on
#: one character cost the square of its length (32 KB of them took 3 s of the loop); an emoji sequence
#: (a family with its joiners, a flag's tags) is well within.
MAX_CELL_CODE_POINTS = 32

@dataclass(frozen=True)
class ScreenSnapshot:
    """A rendered screen: ``rows`` lines of ``cols`` cells and the cursor (0-based row, column)."""

    rows: int
    cols: int
    lines: tuple[str, ...]
    cursor_row: int
    cursor_col: int

    def text(self) -> str:
        """The screen as text: lines right-stripped, trailing empty lines dropped."""
        lines = [line.rstrip() for line in self.lines]
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)


@functools.lru_cache(maxsize=4096)
def _placed_apart(char: str) -> bool:
    """Whether ``char`` is one the screen places itself instead of pyte: any but those one or two columns
    wide.  pyte's draw stops at a zero-width character that is not a combining mark, and at one of no
    width; and it joins a combining mark to the second (empty) column of a wide character, where the
    screen's text never shows it."""
    return wcwidth(char) not in (1, 2)


class _Screen(pyte.Screen):
    """pyte's screen, tolerant of private SGR sequences (``ESC[>4;2m``, sent by vim) it does not know, and
    with the sequences ncurses sends xterm that pyte lacks: REP, SU, SD, CHT, CBT.

    What a program prints is untrusted, and the model is fed on the kernel's loop: no sequence may cost far
    more than the text it could change.  pyte's erase of the display rewrote every cell ever drawn (4 bytes,
    ``ESC[2J``, for a screenful of work), its reverse-video screen mode (``ESC[?5h``) rewrote every cell, and
    its alignment test (``ESC#8``) filled the screen with E's: a few KiB of them held the loop for seconds.
    Here an erased line is replaced by an empty one (whose cells default to the erasing colours), reverse
    video is a flag the display applies (:attr:`reverse_video`), and the alignment test is ignored (a test
    pattern of ``vttest``, not something programs draw)."""

    #: The reverse-video screen mode (``ESC[?5h``): the display swaps every cell's colours.
    reverse_video = False

    def select_graphic_rendition(self, *attrs: int, private: bool = False, **_: object) -> None:
        if not private:
            super().select_graphic_rendition(*attrs)

    #: The last character drawn, as drawn (charset and attributes applied), when it is one column wide.
    _last_cell: Any = None

    def draw(self, data: str) -> None:
        """pyte's draw, except that a character it cannot place does not end it: pyte stopped at the first
        zero-width character that is not a combining mark (the joiner and variation selector in emoji, ``👨‍👩``,
        ``⚠️``; a zero-width space) and at one of no width (an unassigned code point), and dropped the rest
        of the text - ``less`` showed ``line one ✔`` for ``line one ✔️ done``.  Zero-width ones join the
        character before them, as a terminal shows them (a combining mark after a wide character too: pyte
        put it on the wide character's empty second column); those of no width are left out."""
        if not data.isascii():
            start = 0
            for index, char in enumerate(data):
                if char > "\x7f" and _placed_apart(char):
                    if index > start:
                        super().draw(data[start:index])
                    self._join_previous(char)
                    self._last_cell, start = None, index + 1
            if start:
                data = data[start:]
                if not data:
                    return
        super().draw(data)
        if data:
            char = data[-1].translate(self.g1_charset if self.charset else self.g0_charset)
            self._last_cell = self.cursor.attrs._replace(data=char) if wcwidth(char) == 1 else None

    def _join_previous(self, char: str) -> None:
        """Add a zero-width ``char`` to the character before the cursor (on the line above at its start), as
        pyte does with a combining mark, up to :data:`MAX_CELL_CODE_POINTS`; one of no width (``wcwidth`` -1)
        is left out."""
        if wcwidth(char) != 0:
            return
        y, x = self.cursor.y, self.cursor.x
        if not x:
            if not y:
                return
            y, x = y - 1, self.columns
        line = self.buffer[y]
        if x >= 2 and not line[x - 1].data:
            x -= 1  # (the second column of a wide character: the character is in the first)
        if len(line[x - 1].data) >= MAX_CELL_CODE_POINTS:
            return
        line[x - 1] = line[x - 1]._replace(data=unicodedata.normalize("NFC", line[x - 1].data + char))
        self.dirty.add(y)

    #: The main screen's lines and cursor while the alternate screen is shown (None on the main screen).
    _main: "tuple[Any, Any] | None" = None

    def set_mode(self, *modes: int, **kwargs: Any) -> None:
        """The alternate screen (``?1049``, ``?1047``, ``?47``) is a screen of its own, blank when entered;
        the main screen comes back as it was when it is left (pyte kept one screen: the next program found
        the last one's frame under what it drew, and the shell's screen showed the editor's).  ``?3``
        (132 columns) is ignored, as xterm does by default: it resized the model, not the terminal.  ``?5``
        (reverse video) is only noted (see the class)."""
        if kwargs.get("private"):
            modes = self._noted_modes(modes, True)
            if self._main is None and any(m in _ALTERNATE_SCREEN for m in modes):
                self._main = (self.buffer, copy.copy(self.cursor))
                self.buffer = copy.copy(self.buffer)  # (the same kind of dict, with its default line)
                self.buffer.clear()
                self.dirty.update(range(self.lines))
        super().set_mode(*modes, **kwargs)

    def reset_mode(self, *modes: int, **kwargs: Any) -> None:
        if kwargs.get("private"):
            modes = self._noted_modes(modes, False)
            if self._main is not None and any(m in _ALTERNATE_SCREEN for m in modes):
                self.buffer, self.cursor = self._main
                self._main = None
                self.dirty.update(range(self.lines))
        super().reset_mode(*modes, **kwargs)

    def _noted_modes(self, modes: tuple[int, ...], on: bool) -> tuple[int, ...]:
        """``modes`` without those pyte is not given: ``?3`` (ignored) and ``?5`` (noted here)."""
        if 5 in modes:
            self.reverse_video = on
        return tuple(m for m in modes if m not in (3, 5))

    def reset(self) -> None:
        super().reset()
        self._main = None
        self.reverse_video = False

    def erase_in_display(self, how: int = 0, *_: object, **__: object) -> None:
        """ED: each erased line becomes an empty one, whatever was drawn on it (see the class); its cells
        default to the cursor's colours (pyte recoloured only the cells drawn before)."""
        blank = self.cursor.attrs._replace(data=" ")
        below, above = range(self.cursor.y + 1, self.lines), range(self.cursor.y)
        rows = {0: below, 1: above, 2: range(self.lines), 3: range(self.lines)}.get(how, range(0))
        if blank == self.default_char:
            for y in [y for y in self.buffer if y in rows]:  # (only lines drawn on)
                del self.buffer[y]
        else:
            for y in rows:
                self.buffer[y] = pyte.screens.StaticDefaultDict(blank)
        self.dirty.update(rows)
        if how in (0, 1):
            self.erase_in_line(how)

    def alignment_display(self) -> None:
        """DECALN (``ESC#8``) is ignored (see the class)."""

    def repeat_character(self, count: int = 1, *_: object, **__: object) -> None:
        """REP (``CSI n b``): the last character drawn, ``n`` times more, up to the end of the line.  ncurses
        draws a run of one character this way on xterm (a box's top edge: ``q``, then ``CSI 157 b``); pyte
        does not know REP, so the run was missing.  Written into the line in one step: a REP is 7 bytes, and
        drawing its characters one by one let a program make the loop draw 900 times what it sent (140 KB of
        REPs held it for minutes)."""
        cell, x = self._last_cell, self.cursor.x
        end = min(x + max(count, 1), self.columns)
        if cell is None or end <= x:
            return
        self.buffer[self.cursor.y].update(dict.fromkeys(range(x, end), cell))
        self.cursor.x = end
        self.dirty.add(self.cursor.y)

    def scroll_up(self, count: int = 1, *rest: int, **_: object) -> None:
        """SU (``CSI n S``): the scrolling region's lines move up ``n``, blank lines in at its bottom; the
        cursor stays.  ncurses scrolls a region this way on xterm (``indn``); pyte lacks SU and SD."""
        self._scroll(count, rest, self.delete_lines)

    def scroll_down(self, count: int = 1, *rest: int, **_: object) -> None:
        """SD (``CSI n T``): the region's lines move down ``n``.  (With more parameters ``CSI T`` is
        xterm's mouse highlight tracking: not a scroll.)"""
        self._scroll(count, rest, self.insert_lines)

    def _scroll(self, count: int, rest: tuple[int, ...], shift: Callable[[int], None]) -> None:
        if rest:
            return
        top = self.margins.top if self.margins else 0
        y, x = self.cursor.y, self.cursor.x
        self.cursor.y = top
        shift(min(max(count, 1), self.lines))
        self.cursor.y, self.cursor.x = y, x

    def forward_tab(self, count: int = 1, *_: object, **__: object) -> None:
        """CHT (``CSI n I``): ``n`` tab stops forward (the last column at most)."""
        stops = sorted(stop for stop in self.tabstops if stop > self.cursor.x)
        n = max(count, 1)
        self.cursor.x = stops[n - 1] if n <= len(stops) else self.columns - 1

    def back_tab(self, count: int = 1, *_: object, **__: object) -> None:
        """CBT (``CSI n Z``): ``n`` tab stops back (the first column at most)."""
        stops = sorted((stop for stop in self.tabstops if stop < self.cursor.x), reverse=True)
        n = max(count, 1)
        self.cursor.x = stops[n - 1] if n <= len(stops) else 0

    def write_process_input(self, data: str) -> None:
        """Replies to terminal queries come from :mod:`.terminal_replies`, never from pyte (which would
        answer a secondary DA request as a primary one)."""


class _Tolerant:
    """The screen as the parser calls it: a sequence whose handler fails on its parameters is ignored, as a
    terminal ignores a sequence it does not know.  pyte passes ``private=True`` to every handler of a ``CSI
    ?`` sequence and most do not take it: ``mc`` leaving sent ``CSI ? 1001 r`` (XTRESTORE), which reached
    ``set_margins`` as a ``TypeError`` - and the parser's restart lost the rest of the text fed with it,
    ``CSI ? 1049 l`` included: the model stayed on the alternate screen and the next program's screen came
    out blank.  ``draw`` (the hot path, which takes any text) is the screen's own."""

    def __init__(self, screen: pyte.Screen, on_error: Callable[[], None]) -> None:
        self._screen = screen
        self._on_error = on_error

    def __getattr__(self, name: str) -> Any:
        handler = getattr(self._screen, name)
        if name in ("draw", "debug") or not callable(handler):
            return handler
        on_error = self._on_error

        def tolerant(*args: Any, **kwargs: Any) -> None:
            try:
                handler(*args, **kwargs)
            except Exception:  # (what a program prints is untrusted: no sequence may stop the parse)
                on_error()
        return tolerant


class _Stream(pyte.Stream):
    """pyte's parser, with REP, SU, SD, CHT and CBT (see :class:`_Screen`), and honouring character set
    designations (``ESC ( 0``: DEC line drawing) as xterm does in UTF-8 too.  pyte ignores them in UTF-8 mode
    (as the Linux console does), so ncurses' boxes - ``dialog``, ``mc``, ``curses`` - came out as ``lqqqk``
    and ``x``."""

    csi = {**pyte.Stream.csi, "b": "repeat_character", "S": "scroll_up", "T": "scroll_down", "I": "forward_tab",
           "Z": "back_tab"}

    def __init__(self, screen: pyte.Screen, on_error: Callable[[], None]) -> None:
        self._on_error = on_error
        super().__init__(screen)
        self.use_utf8 = False  # (the stream is text we decoded: here the flag only gates the designations)

    def attach(self, screen: pyte.Screen) -> None:
        super().attach(cast(pyte.Screen, _Tolerant(screen, self._on_error)))  # (it acts as the screen)

    def select_other_charset(self, code: str) -> None:
        """``ESC % G`` would turn the designations off again: our text is always decoded UTF-8."""


#: What pyte cannot parse and a screen does not show, which pyte drew as text: DCS, SOS, PM and APC strings
#: (XTGETTCAP and DECRQSS queries, sixel images, kitty's graphics), CSI sequences with a private marker other
#: than ``?`` and ``>`` (kitty's keyboard modes, which fish 4, neovim and helix set and pop: ``CSI < u`` drew
#: ``u``, ``CSI = 1;1 u`` drew ``1;1u``) and CSI sequences with an intermediate byte (DECSTR ``CSI ! p`` drew
#: ``p``).  vim probes its terminal with two of them (``ESC P zz ST``, ``CSI 0 % m``, then the cursor
#: position) and, when the cursor stays, asks for its modes (``CSI ? 12 $ p``): answered, the send looks again
#: at once (:meth:`SendOperation.look_closely`).  (A marker is the parameters' first byte: one looked for anywhere
#: in them made a long run of them cost the square of its length - 4 KB of ``<`` after ``CSI`` took 0.15 s.)
_UNPARSED = re.compile(r"\x1b[PX^_][^\x1b]*\x1b\\|\x1b\[[<=][0-?]*[ -/]*[@-~]|\x1b\[[0-?]*[ -/]+[@-~]")
#: A CSI sequence, a DCS/SOS/PM/APC string or an ESC unfinished at the end of a chunk: held for the next one,
#: so that pyte sees it whole (at most :data:`MAX_HELD` characters; a longer string is dropped as it comes).
_UNFINISHED_TAIL = re.compile(r"\x1b(?:[PX^_][^\x1b]*\x1b?|\[[0-?]*[ -/]*)?\Z")
MAX_HELD = 4096
#: What follows the ESC that starts a string: DCS, SOS, PM, APC.
_STRING_STARTS = ("P", "X", "^", "_")


def _plain_sgr(match: "re.Match[str]") -> str:
    params = sgr_without_subparameters(match.group(1))
    return f"\x1b[{params}m" if params else ""  # (nothing left: no sequence, not a reset)


class ScreenModel:
    """A pyte screen following a session's raw output from an offset of its :class:`RawRing`."""

    def __init__(self, rows: int, cols: int, offset: int) -> None:
        self.screen = _Screen(cols, rows)
        self.stream = _Stream(self.screen, self._note_error)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""
        #: Inside a string (DCS, SOS, PM, APC) too long to hold: its text is dropped up to the ESC that ends it.
        self._in_string = False
        self.offset = offset
        self.resyncs = 0
        self.parser_errors = 0

    def feed(self, data: bytes) -> None:
        self.feed_text(self._decoder.decode(data))

    def feed_text(self, text: str) -> None:
        """Feed text; a sequence pyte chokes on restarts its parser instead of breaking the screen.  SGR
        sub-parameters (``CSI 4:3 m``, an underline style) are given to pyte as the plain parameters that say
        the same: pyte stops a sequence at a colon, and drew the rest of it (``3m``) as text.  Sequences it
        cannot parse and no screen shows (:data:`_UNPARSED`) are left out, and a sequence unfinished at the end
        waits for the rest - a string longer than :data:`MAX_HELD` (a sixel image) is dropped as it comes."""
        if self._in_string:
            end = text.find("\x1b")
            if end < 0:
                return
            text, self._in_string = text[end:], False
        if self._held:
            text, self._held = self._held + text, ""
        if "\x1b" not in text:
            self._feed_pyte(text)
            return
        tail = _UNFINISHED_TAIL.search(text, max(0, len(text) - MAX_HELD))
        if tail is not None:
            text, self._held = text[:tail.start()], tail.group()
        else:
            last = text.rfind("\x1b")  # (a string begun too far back to hold: its text is dropped)
            if last >= 0 and text[last + 1:last + 2] in _STRING_STARTS:
                text, self._in_string = text[:last], True
        if ":" in text and "\x1b[" in text:
            text = SGR_WITH_SUBPARAMETERS.sub(_plain_sgr, text)
        self._feed_pyte(_UNPARSED.sub("", text))

    def _feed_pyte(self, text: str) -> None:
        try:
            self.stream.feed(text)
        except Exception:
            self._note_error()
            self.stream = _Stream(self.screen, self._note_error)

    def _note_error(self) -> None:
        self.parser_errors += 1

    def catch_up(self, ring: RawRing, budget: int | None = None, seconds: float | None = None,
                 until: int | None = None) -> bool:
        """Feed what the ring holds past our offset (up to absolute offset ``until``); True when caught up.

        At most ``budget`` bytes and about ``seconds`` of work
        (:data:`MAX_CATCH_UP_SECONDS` when not given); further behind than
        :data:`RESYNC_BYTES`, restart from the newest :data:`RESYNC_TAIL`
        bytes instead.
        """
        data, lost = ring.since(self.offset, until)
        if lost or len(data) > RESYNC_BYTES:
            self.resyncs += 1
            self.screen.reset()
            self._decoder.reset()
            self._held, self._in_string = "", False
            cut = len(data) - RESYNC_TAIL
            self.offset += lost + cut
            data = data[cut:]
        if budget is not None and len(data) > budget:
            data = data[:budget]
        self._feed_for(data, MAX_CATCH_UP_SECONDS if seconds is None else seconds)
        return self.offset >= (ring.total if until is None else until)

    def _feed_for(self, data: bytes, seconds: float) -> None:
        """Feed ``data`` for about ``seconds``, in slices sized by what the last one cost per byte (a slice of
        costly sequences must not overshoot the budget by much)."""
        deadline = time.monotonic() + seconds
        size, start = MIN_SLICE, 0  # (the first slice small: nothing is known of the data's cost yet)
        while start < len(data):
            piece = data[start:start + size]
            began = time.monotonic()
            self.feed(piece)
            self.offset += len(piece)
            start += len(piece)
            now = time.monotonic()
            if now > deadline:
                return
            per_byte = (now - began) / len(piece)
            size = SLICE if per_byte <= 0 else max(MIN_SLICE, min(SLICE, int((deadline - now) / per_byte)))

    def mode_state(self, mode: int, private: bool) -> bool:
        """Whether DEC private (``private``) or ANSI ``mode`` is set."""
        if private and mode == 5:
            return self.screen.reverse_video
        return (mode << 5 if private else mode) in self.screen.mode

    def resize(self, rows: int, cols: int) -> None:
        self.screen.resize(rows, cols)

    def snapshot(self) -> ScreenSnapshot:
        s = self.screen
        rows = tuple(_row_text(s.buffer[y], s.columns) if y in s.buffer else " " * s.columns for y in range(s.lines))
        return ScreenSnapshot(s.lines, s.columns, rows, s.cursor.y, s.cursor.x)


def _row_text(line: dict[int, Any], columns: int) -> str:
    """A screen row's text, as pyte's ``Screen.display`` gives it (a wide character's second cell left out),
    from the cells drawn only: pyte looked up every cell of every row (a third of a second for 500x1000, on
    the loop, at every send that ends on a full screen)."""
    drawn = sorted(line)
    if drawn and drawn[-1] == len(drawn) - 1 < columns:  # (the common row: drawn from its start, no gaps)
        text = "".join(map(_DATA, map(line.__getitem__, drawn)))
        if text.isascii():
            return text + " " * (columns - len(drawn))
    cells = [" "] * columns
    after_wide = -1
    for x in drawn:
        if x >= columns:
            break
        if x == after_wide:
            continue
        data = line[x].data
        cells[x] = data
        if data and data[0] >= "\u1100" and wcwidth(data[0]) == 2:
            after_wide = x + 1
            if after_wide < columns:
                cells[after_wide] = ""
    return "".join(cells)
