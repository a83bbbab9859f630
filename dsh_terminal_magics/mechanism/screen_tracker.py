"""Which screen the program is drawing on, and what of its output belongs in the line history.

One object owns that state for a session: the pyte screen model (fed lazily,
see :mod:`.screen`), whether the alternate screen is on, whether a program
is drawing the main screen by cursor addressing (``top`` without an
alternate screen), and the cursor-key mode.  The normaliser only reports
events; this tracker decides.

The rule for the line history: it keeps every byte the main screen shows.
What a full-screen program draws is left out only while it draws it - on
the alternate screen (the normaliser cuts at the switch, in the middle of a
chunk if need be), or by cursor addressing while the process group that
started drawing holds the foreground.  A drawing starts only while a program
has taken the keys (the terminal is out of canonical mode, as ``top`` puts
it): ``clear``, ``tput cup`` or a script's ``\\e[2J`` followed by lines and a
``read`` are text, kept like any other.  Suppression ends the moment that
program leaves: the alternate screen is switched off, its group leaves the
foreground, the process that drew exits (``sh -c 'top -n 1; echo after'``
keeps ``sh``'s group in the foreground after ``top`` has gone), or a chunk
puts the keypad back (what such a program sends as it leaves) - not when
the shell's prompt comes back.  The last sign is read from the bytes alone:
when the drawing and what followed it arrive in one read (a busy machine, a
pipe), the process that drew may already be gone and another member of its
group (``sleep``, ``cat``) looks like the drawer.
"""
from __future__ import annotations

import re
from typing import Callable

from .output import OutputNormalizer, RawRing, TerminalEvents
from .process_tree import read_stat
from .screen import ScreenModel, ScreenSnapshot

#: Clear-screen or absolute cursor positioning below the first row: a program drawing a screen.
_CURSOR_ADDRESSING = re.compile(rb"\x1b\[2J|\x1b\[(?:[2-9]|\d\d+);\d+H")
#: Sequences a full-screen program sends when it leaves: cursor shown, normal keypad/cursor keys.
_RESTORE = re.compile(rb"\x1b\[\?25h|\x1b\[\?1l|\x1b>")
#: Keypad / cursor-key mode set (``h``, ``=``) or put back (``l``, ``>``).
_KEYPAD = re.compile(rb"\x1b\[\?1([hl])|\x1b([=>])")
#: A switch of the alternate screen, or a full reset (which puts the main screen back); such a chunk is handled
#: by the normaliser's own cut.
_SCREEN_SWITCH = re.compile(rb"\x1b\[\?(?:1049|1047|47)[hl]|\x1bc")


def switches_screen(data: bytes) -> bool:
    """Whether ``data`` switches the alternate screen on or off (or resets the terminal)."""
    return _SCREEN_SWITCH.search(data) is not None


class ScreenTracker:
    """Alternate screen, cursor-addressing programs and the screen model of one session."""

    def __init__(self, rows: int, cols: int, raw: RawRing, normalizer: OutputNormalizer,
                 group_members: Callable[[int], list[tuple[int, bool]]] = lambda pgid: [(pgid, True)]) -> None:
        self.model = ScreenModel(rows, cols, 0)
        self._group_members = group_members
        #: The processes that may be drawing (the group's newest members when it started).
        self._drawers: set[int] = set()
        self._raw = raw
        self._normalizer = normalizer
        self.alternate = False
        self.application_cursor = False
        #: Whether the program asked for pasted text to be bracketed (DEC mode 2004).
        self.bracketed_paste = False
        #: Whether a program hid the cursor (DEC mode 25) since our shell was last at its prompt: it draws a
        #: display of its own (Ink), and where the cursor stands says nothing of a prompt.
        self.cursor_hidden = False
        #: The foreground process group drawing the main screen by cursor addressing, if any.
        self.drawing_group: int | None = None

    @property
    def full_screen(self) -> bool:
        """True while a full-screen program owns the terminal (alternate screen or cursor addressing)."""
        return self.alternate or self.drawing_group is not None

    @staticmethod
    def pieces(data: bytes) -> tuple[bytes, ...]:
        """``data`` in the pieces to look at one by one (:meth:`split_chunk`, then the normaliser): two when
        a program leaves the alternate screen in it and goes on drawing the main screen - up to the switch
        and after it (``dialog``: curses' start-up switches there and back, then it draws by cursor
        addressing; when both came in one read, the drawing was taken for text) - else one."""
        if b"\x1b" not in data or (b"\x1b[?" not in data and b"\x1bc" not in data):  # (memchr first)
            return (data,)
        last = None
        for last in _SCREEN_SWITCH.finditer(data):
            pass
        if last is None or last.end() == len(data) or data[last.end() - 1:last.end()] == b"h":
            return (data,)
        return data[:last.end()], data[last.end():]

    def split_chunk(self, data: bytes, foreground: Callable[[], int], shell_pid: int | None,
                    reads_lines: Callable[[], bool]) -> int:
        """How much of ``data`` (from its start) is a cursor-addressing program's drawing.

        0: all of it is main-screen text; ``len(data)``: all of it is drawing; in
        between: the program left inside this chunk - its drawing ends with its
        last cursor/keypad restore sequence, and what follows is text again.  ``foreground()`` gives the
        terminal's foreground group and ``reads_lines()`` whether the terminal is in canonical mode; they
        are asked only when the answer depends on them (system calls).
        """
        if self.drawing_group is not None:
            if not _puts_keypad_back(data) and not self._drawing_program_left(foreground()):
                return len(data)
            self._stop_drawing()
            return _last_restore_end(data)
        if self.alternate or self._normalizer.alternate or b"\x1b" not in data or b"\x1b[" not in data \
                or _SCREEN_SWITCH.search(data) \
                or not _CURSOR_ADDRESSING.search(data):
            return 0
        group = foreground()
        if group <= 0 or group == shell_pid or reads_lines():
            return 0  # the shell's own output, or a program that moves the cursor but has not taken the keys
        if _puts_keypad_back(data):
            return _last_restore_end(data)  # it left inside this chunk, whoever of its group still runs
        members = self._group_members(group)  # (pid, still running) pairs, zombies included
        drawers = {pid for pid, _ in members if pid != group} or {pid for pid, _ in members}
        if not any(running for pid, running in members if pid in drawers):
            return _last_restore_end(data) or len(data)  # it has already left: its drawing is all in here
        self.drawing_group = group
        self._drawers = drawers
        return len(data)

    def _drawing_program_left(self, foreground: int) -> bool:
        if foreground > 0 and foreground != self.drawing_group:
            return True
        return bool(self._drawers) and not any(_running(pid) for pid in self._drawers)

    def after_chunk(self, events: TerminalEvents) -> bool:
        """Apply the chunk's screen events; returns True when the program just left the alternate screen."""
        left = False
        if events.alternate_screen is not None:
            left = self.alternate and not events.alternate_screen
            self.alternate = events.alternate_screen
            if left:
                self._stop_drawing()
        if events.application_cursor is not None:
            self.application_cursor = events.application_cursor
        if events.bracketed_paste is not None:
            self.bracketed_paste = events.bracketed_paste
        if events.cursor_hidden is not None:
            self.cursor_hidden = events.cursor_hidden
        return left

    def left_behind(self) -> None:
        """The program that switched to the alternate screen has ended without switching back (killed, crashed):
        the line history takes the output again, and results are text, not snapshots of what it left.  (The
        screen model stays as the terminal is, on the alternate screen, until a program switches back or
        ``reset``.)"""
        self.alternate = False
        self._normalizer.alternate = False
        self._stop_drawing()

    def check_drawer(self, foreground: Callable[[], int]) -> None:
        """End cursor-addressing drawing once its program has left (group changed, drawers exited)."""
        if self.drawing_group is not None and self._drawing_program_left(foreground()):
            self._stop_drawing()

    def _stop_drawing(self) -> None:
        self.drawing_group = None
        self._drawers = set()

    def catch_up(self, until: int | None = None, seconds: float | None = None) -> bool:
        """Feed the screen model from the raw ring (up to ``until``); True when caught up."""
        return self.model.catch_up(self._raw, seconds=seconds, until=until)

    def snapshot(self) -> ScreenSnapshot:
        """The screen, brought up to date."""
        self.catch_up()
        return self.model.snapshot()

    def resize(self, rows: int, cols: int) -> None:
        self.catch_up()
        self.model.resize(rows, cols)


def _last_restore_end(data: bytes) -> int:
    """Offset just after the last restore sequence in ``data`` (0 when there is none)."""
    end = 0
    for match in _RESTORE.finditer(data):
        end = match.end()
    return end


def _puts_keypad_back(data: bytes) -> bool:
    """True when the last keypad / cursor-key mode sequence in ``data`` puts the keypad back (rmkx)."""
    if b"\x1b>" not in data and b"\x1b[?1l" not in data:
        return False
    modes = _KEYPAD.findall(data)  # (CSI ?1 final, ESC final) pairs, one of them empty
    return bool(modes) and b"".join(modes[-1]) in (b"l", b">")


def _running(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and not stat.gone
