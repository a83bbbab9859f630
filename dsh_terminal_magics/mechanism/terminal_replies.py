"""Answers to terminal queries, as xterm gives them, from the session's real screen state.

Programs ask their terminal things and wait for the answer: the cursor
position (``ESC[6n``, prompt_toolkit, vim), device attributes (``ESC[c``,
``ESC[>c``), colours (``OSC 10/11/12/4 ;?``), sizes (``CSI 14/16/18 t``),
mode states (DECRQM ``CSI ? n $ p``), settings and capabilities (DECRQSS,
XTGETTCAP), the terminal's version (XTVERSION).  A program left waiting for
an answer a terminal could give misbehaves (vim flushes typed input on
exit), so every query here is answered, in stream order, from the state the
stream had at that point: the cursor from the pyte screen model fed exactly
up to the query, colours from the palette the viewport shows and the colours
the program set, sizes from the PTY.  Requests for something this terminal
does not have get the answer xterm gives for "not supported" (DECRQM 0,
DECRQSS/XTGETTCAP ``0``), never an invented value.

An answer is input, and input waits in the terminal until someone reads it:
if the program that asked ends without reading (``printf '\\e[c'``, ``cat`` of
a file holding a query), the shell's line editor would read the answer as
typed keys, garbling or swallowing the caller's next command.  So the session
holds answers (:class:`HeldAnswers`) until the group that asked is seen
waiting on the terminal, and drops those nobody will read.

The work is bounded, since what a program prints is untrusted: one chunk of
output gets at most :data:`MAX_ANSWERS` answers (the PTY's input queue holds
no more), bringing the screen model up to its first query costs at most
:data:`FIRST_ANSWER_SECONDS`, and up to the next ones at most
:data:`ANSWER_SECONDS` per chunk.  And all sessions together draw that screen
work from one :class:`WorkBudget` (:data:`ANSWER_WORK`): a burst of
:data:`ANSWER_WORK_BURST` seconds, then :data:`ANSWER_WORK_RATE` of the loop's
time - per-chunk bounds alone let many sessions flooding queries take theirs
one after another. A query past any bound is left unanswered, as if lost on a
slow line, and counted in ``unanswered``.
"""
from __future__ import annotations

import re
import time
from typing import Callable

from ..ansi import BASIC_COLOURS, DEFAULT_BG, DEFAULT_FG, xterm_256
from .output import only_inert_escapes
from .screen import ScreenModel

#: Character cell size in pixels reported for ``CSI 14t`` / ``CSI 16t``.
CELL_HEIGHT = 16
CELL_WIDTH = 8
#: What ``ESC[c`` and ``ESC[>c`` answer: a VT220-class terminal with ANSI colour, firmware 10.
PRIMARY_DA = b"\x1b[?62;22c"
SECONDARY_DA = b"\x1b[>1;10;0c"
#: How long an answer waits for the program that asked to read the terminal (seconds); then it is dropped,
#: as if lost on a slow line.
HOLD_ANSWERS = 10.0
#: Most answer bytes held at once (about what a PTY's input queue takes): a program that asks without end and
#: never reads (``yes $'\\e[6n'``) cannot grow them; answers past it are dropped.
MAX_HELD_BYTES = 4096
#: Longest unfinished query held over to the next chunk.
MAX_CARRY = 256
#: Most answers to one chunk of output: about what a 4 KiB PTY input queue takes.
MAX_ANSWERS = 64
#: Most screen-model work (seconds) spent answering one chunk's position and mode queries after its first
#: (which brings the model up to date, :data:`~.screen.RESYNC_BYTES` of output at most).
ANSWER_SECONDS = 0.02
#: Most screen-model work (seconds) spent bringing the model up to a chunk's first query (pyte takes ~2 MB/s
#: of ordinary output: the largest backlog, :data:`~.screen.RESYNC_BYTES`, well within).
FIRST_ANSWER_SECONDS = 0.5
#: Screen-model work (seconds) answering may take at once, all sessions together (a few first answers after
#: large backlogs) ...
ANSWER_WORK_BURST = 1.0
#: ... and its share of the loop's time after that (seconds of work per second): 64 sessions printing
#: ``yes $'\e[6n'`` kept the loop catching their screens up - another agent's ``echo`` took 0.8 s and a
#: shutdown 18 s.
ANSWER_WORK_RATE = 0.2

_ST = rb"(?:\x07|\x1b\\)"
_QUERY = re.compile(
    rb"\x1b\[(?P<dsr>\??[56])n"
    rb"|\x1b\[(?P<da>[>=]?)0?c"
    rb"|\x1b\](?P<dyn>1[0-2])(?P<dyn_val>(?:;[^\x07\x1b]*)?)(?P<dyn_st>" + _ST + rb")"
    rb"|\x1b\]4(?P<pal>(?:;[^\x07\x1b]*)?)(?P<pal_st>" + _ST + rb")"
    rb"|\x1b\](?P<reset>11[0-2]|104)[^\x07\x1b]*" + _ST +
    rb"|\x1b\[(?P<win>1[468])t"
    rb"|\x1b\[(?P<rqm_priv>\??)(?P<rqm>\d+)\$p"
    rb"|\x1bP(?P<dcs>[$+])q[^\x1b]*\x1b\\"
    rb"|\x1b\[>0?q"
)
_UNFINISHED = re.compile(rb"\x1b(?:\[[0-9;?>=$]*|\][0-9;?]*[^\x07\x1b]*|P[$+]?q?[^\x1b]*)?\Z")
#: DEC private modes this terminal implements (answered set/reset by DECRQM), by number.
_PRIVATE_MODES = {1, 3, 5, 6, 7, 25, 47, 1047, 1049}
_ANSI_MODES = {4, 20}


class WorkBudget:
    """Seconds of work to draw on: ``burst`` at most, refilled at ``rate`` seconds per second."""

    def __init__(self, burst: float, rate: float) -> None:
        self.burst = burst
        self.rate = rate
        self._left = burst
        self._at = time.monotonic()

    def left(self) -> float:
        """Seconds of work that may be spent now (0 or less: none)."""
        now = time.monotonic()
        self._left = min(self.burst, self._left + (now - self._at) * self.rate)
        self._at = now
        return self._left

    def spend(self, seconds: float) -> None:
        self._left -= seconds


#: The screen work answering may do, shared by every session of the process (they share one loop).
ANSWER_WORK = WorkBudget(ANSWER_WORK_BURST, ANSWER_WORK_RATE)


class TerminalReplies:
    """Scans a session's output for queries and returns the answers to write back.

    ``screen`` is the session's screen model; ``catch_up(until, seconds)`` brings it up
    to an absolute raw offset within about ``seconds`` and says whether it got there; ``size()`` gives
    ``(rows, cols)``;
    ``alternate()`` says whether the alternate screen is on and
    ``application_cursor()`` whether cursor keys are in application mode.  Catching the screen up draws on
    ``work`` (by default the process's :data:`ANSWER_WORK`).
    """

    def __init__(self, screen: ScreenModel, catch_up: Callable[[int, float | None], bool],
                 size: Callable[[], tuple[int, int]],
                 alternate: Callable[[], bool], application_cursor: Callable[[], bool],
                 work: WorkBudget | None = None) -> None:
        self._screen = screen
        self._catch_up = catch_up
        self._work = ANSWER_WORK if work is None else work
        self._size = size
        self._alternate = alternate
        self._application_cursor = application_cursor
        self._carry = b""
        #: Dynamic colours the program set (10 fg, 11 bg, 12 cursor) and palette entries it changed.
        self.dynamic: dict[int, str] = {}
        self.palette: dict[int, str] = {}
        #: Queries left unanswered because a chunk asked too many or too far ahead of the screen model.
        self.unanswered = 0
        self._deadline: float | None = None

    @property
    def foreground(self) -> str:
        return self.dynamic.get(10, DEFAULT_FG)

    @property
    def background(self) -> str:
        return self.dynamic.get(11, DEFAULT_BG)

    def scan(self, data: bytes, offset: int) -> bytes:
        """The replies to the queries in ``data`` (which starts at absolute raw offset ``offset``)."""
        if not self._carry and (b"\x1b" not in data or data.count(b"\x1b") == data.count(b"\x1b]133;D")
                                or only_inert_escapes(data)):
            return b""  # no escape (a one-byte search first: counting is slower), only a shell's exit-code
            # markers, or only others that ask nothing
        text = self._carry + data
        base = offset - len(self._carry)
        self._carry = b""
        replies: list[bytes] = []
        self._deadline = None
        for match in _QUERY.finditer(text):
            if len(replies) >= MAX_ANSWERS:
                self.unanswered += 1
                continue
            reply = self._answer(match, base)
            if reply:
                replies.append(reply)
        tail = _UNFINISHED.search(text, max(0, len(text) - MAX_CARRY))
        if tail is not None:
            self._carry = tail.group()
        return b"".join(replies)

    # -- answers ---------------------------------------------------------------------
    def _answer(self, m: re.Match[bytes], base: int) -> bytes:
        if m.group("dsr") is not None:
            return self._status(m.group("dsr"), base + m.start())
        if m.group("da") is not None:
            return {b"": PRIMARY_DA, b">": SECONDARY_DA}.get(m.group("da"), b"")
        if m.group("dyn") is not None:
            return self._dynamic_colours(int(m.group("dyn")), m.group("dyn_val"), m.group("dyn_st"))
        if m.group("pal") is not None:
            return self._palette(m.group("pal"), m.group("pal_st"))
        if m.group("reset") is not None:
            self._reset_colours(int(m.group("reset")))
            return b""
        if m.group("win") is not None:
            return self._window(int(m.group("win")))
        if m.group("rqm") is not None:
            return self._mode(int(m.group("rqm")), m.group("rqm_priv") == b"?", base + m.start())
        if m.group("dcs") is not None:
            return b"\x1bP0" + m.group("dcs") + b"r\x1b\\"
        return b"\x1bP>|dsh_terminal_magics\x1b\\"  # XTVERSION

    def _screen_at(self, at: int) -> bool:
        """Bring the screen model up to offset ``at`` within this chunk's budget; False (the query counted
        as unanswered) when it cannot."""
        if self._screen.offset >= at:
            return True
        if self._deadline is None:  # the chunk's first such query: the backlog (RESYNC_BYTES at most)
            caught_up = self._catch_up_within(at, FIRST_ANSWER_SECONDS)
            self._deadline = time.monotonic() + ANSWER_SECONDS
            if caught_up:
                return True
            self.unanswered += 1  # (an answer from a screen behind the output would be wrong)
            return False
        if self._catch_up_within(at, self._deadline - time.monotonic()):
            return True
        self.unanswered += 1
        return False

    def _catch_up_within(self, at: int, seconds: float) -> bool:
        """Catch the screen up to ``at`` within ``seconds`` and what the shared budget has left."""
        seconds = min(seconds, self._work.left())
        if seconds <= 0:
            return False
        began = time.monotonic()
        try:
            return self._catch_up(at, seconds)
        finally:
            self._work.spend(time.monotonic() - began)

    def _status(self, kind: bytes, at: int) -> bytes:
        if kind == b"5":
            return b"\x1b[0n"
        if not self._screen_at(at):
            return b""
        rows, cols = self._size()
        row = min(self._screen.screen.cursor.y + 1, rows)
        col = min(self._screen.screen.cursor.x + 1, cols)
        return f"\x1b[{'?' if kind.startswith(b'?') else ''}{row};{col}R".encode()

    def _dynamic_colours(self, first: int, values: bytes, st: bytes) -> bytes:
        """OSC 10/11/12: each ``;``-separated value sets or (``?``) queries the next colour in turn."""
        pairs = [(first + i, value) for i, value in enumerate(values.split(b";")[1:]) if first + i <= 12]
        return self._colours(pairs, self.dynamic, lambda n: DEFAULT_BG if n == 11 else DEFAULT_FG, b"%d", st)

    def _palette(self, values: bytes, st: bytes) -> bytes:
        """OSC 4: ``index;value`` pairs, each setting or (``?``) querying one palette entry."""
        parts = values.split(b";")[1:]
        pairs = [(int(i), value) for i, value in zip(parts[0::2], parts[1::2]) if i.isdigit() and int(i) <= 255]
        return self._colours(pairs, self.palette, xterm_256, b"4;%d", st)

    @staticmethod
    def _colours(pairs: list[tuple[int, bytes]], store: dict[int, str], default: Callable[[int], str],
                 label: bytes, st: bytes) -> bytes:
        replies = []
        for number, value in pairs:
            if value == b"?":
                colour = store.get(number, default(number))
                replies.append(b"\x1b]" + label % number + b";" + _xterm_rgb(colour) + st)
            else:
                parsed = parse_colour(value.decode("ascii", "replace"))
                if parsed is not None:
                    store[number] = parsed
        return b"".join(replies)

    def _reset_colours(self, code: int) -> None:
        if code == 104:
            self.palette.clear()
        else:
            self.dynamic.pop(code - 100, None)

    def _window(self, kind: int) -> bytes:
        rows, cols = self._size()
        if kind == 18:
            return f"\x1b[8;{rows};{cols}t".encode()
        if kind == 14:
            return f"\x1b[4;{rows * CELL_HEIGHT};{cols * CELL_WIDTH}t".encode()
        return f"\x1b[6;{CELL_HEIGHT};{CELL_WIDTH}t".encode()

    def _mode(self, mode: int, private: bool, at: int) -> bytes:
        known = _PRIVATE_MODES if private else _ANSI_MODES
        if mode not in known:
            state = 0
        elif not self._screen_at(at):
            return b""
        else:
            if private and mode in (47, 1047, 1049):
                on = self._alternate()
            elif private and mode == 1:
                on = self._application_cursor()
            else:
                on = self._screen.mode_state(mode, private)
            state = 1 if on else 2
        return f"\x1b[{'?' if private else ''}{mode};{state}$y".encode()


class HeldAnswers:
    """Answers to terminal queries, held until the program that asked reads the terminal.

    Each answer remembers the foreground group when its query was read.  :meth:`take` is called when the
    foreground group is seen waiting on the terminal: it returns the answers that group asked for, and
    drops the rest - those of a group that has lost the terminal, and all of them when the one waiting is
    the session's own shell back at its prompt (the command that asked ended without reading, or a
    background job asked while the shell sat at its prompt).  A builtin that asks and reads
    (``read -p $'\\e[6n' -d R``), or a program a REPL runs in its own group, still gets its answer.
    :meth:`expired` tells when the oldest has waited :data:`HOLD_ANSWERS`.
    """

    def __init__(self) -> None:
        self._held: list[tuple[int, bytes]] = []
        self._bytes = 0
        self._since = 0.0
        #: Answers dropped so far.
        self.dropped = 0

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, asker: int, answers: bytes, now: float) -> None:
        """Hold ``answers`` to queries group ``asker`` printed."""
        if self._bytes + len(answers) > MAX_HELD_BYTES:
            self.dropped += 1
            return
        if not self._held:
            self._since = now
        self._held.append((asker, answers))
        self._bytes += len(answers)

    def take(self, reader: int, shell_at_prompt: bool) -> bytes:
        """What to write now that group ``reader`` waits on the terminal (``shell_at_prompt``: the one waiting
        is the session's own shell, back at its prompt).  Everything held is answered or dropped."""
        held, self._held, self._bytes = self._held, [], 0
        kept = [] if shell_at_prompt else [answers for asker, answers in held if asker == reader]
        self.dropped += len(held) - len(kept)
        return b"".join(kept)

    def expired(self, now: float) -> bool:
        return bool(self._held) and now - self._since >= HOLD_ANSWERS

    def drop(self) -> None:
        self.dropped += len(self._held)
        self._held, self._bytes = [], 0


def parse_colour(spec: str) -> str | None:
    """An X11 colour spec (``#rgb``, ``#rrggbb``, ``rgb:r/g/b`` with 1-4 hex digits) as ``#rrggbb``."""
    spec = spec.strip()
    if spec.startswith("rgb:"):
        parts = spec[4:].split("/")
        if len(parts) != 3 or not all(1 <= len(p) <= 4 and _is_hex(p) for p in parts):
            return None
        return "#" + "".join(f"{int(p, 16) * 255 // (16 ** len(p) - 1):02x}" for p in parts)
    if spec.startswith("#") and len(spec) in (4, 7) and _is_hex(spec[1:]):
        digits = spec[1:]
        return "#" + ("".join(c * 2 for c in digits) if len(digits) == 3 else digits).lower()
    return None


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


def _xterm_rgb(colour: str) -> bytes:
    """``#rrggbb`` as xterm reports it: ``rgb:rrrr/gggg/bbbb``."""
    r, g, b = colour[1:3], colour[3:5], colour[5:7]
    return f"rgb:{r}{r}/{g}{g}/{b}{b}".encode()


__all__ = ["BASIC_COLOURS", "HeldAnswers", "TerminalReplies", "WorkBudget", "parse_colour"]
