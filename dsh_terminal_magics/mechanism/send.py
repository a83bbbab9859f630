"""One send: write input, then wait until the program wants input again (or goes quiet, times out, exits).

A :class:`SendOperation` owns all of its state; the session only writes
bytes for it and wakes it when output arrives.  Waiting is observed (see
:mod:`.readiness`), with three refinements written down in the README:

* **timed waits** (``poll``/``select``/``epoll`` with a timeout) are prompts at
  once (node, IPython poll their terminal), except while the program may be
  going on by itself: after a send that contained ESC (vim waiting out its Esc
  timeout; vim shutting down after ``i text Esc :wq Enter`` typed ahead while it
  started, which waits for its queries' answers and then flushes input), or
  after the program left the alternate screen during this send (a full-screen
  program shutting down, which may flush pending input) - unless it has printed
  a prompt of its own on the main screen since, or a full-screen program has the
  screen again.  Then the wait counts only once
  it outlasts its timeout (at most :data:`TIMED_WAIT_SETTLE`) with no new
  output - or, after an ESC, once the program ran, printed and waits again (it
  acted on the Esc).  A timed wait with the keys taken and the cursor at the
  start of a line does not count (node awaiting a promise polls right after the
  echo of its line; at a prompt the cursor is past it) until it comes back
  after its timeout ran out with nothing printed: a loop of polls for keys.
* **events, then a backed-off tick**: checks run right after output arrives (in
  the loop turn that reads it) and right after a process of the foreground
  group exits (a pidfd per member: ``sleep 0.2; cat`` is seen as soon as
  ``sleep`` ends, not at the next slow tick), then at gaps growing from
  :data:`MIN_TICK` to :data:`MAX_TICK` - so a long silent command costs a few
  checks a second.  A look that cannot change "not waiting" (nothing it would
  look at has run since) is one small read instead of a check.
* **the deadline covers everything**, the write of a large text included.
"""
from __future__ import annotations

import asyncio
import math
import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from ..errors import InvalidArgumentError, TerminalError
from ..vocabulary import TextCut, WaitReason
from .keys import encode_keys
from .process_tree import program_of
from .readiness import Fence
from .screen import ScreenSnapshot

if TYPE_CHECKING:
    from .session import Session

#: Most CPU (a share of the time) a program's threads use between two timed polls of the terminal at a line
#: start for the polls to be a loop waiting for keys, not work that looks for a key between its steps.
POLL_LOOP_CPU = 0.05
#: How many of its timeouts such a poll must be seen to last, with nothing printed, to be a loop: node's timer
#: prints the awaited result as it fires - within one, with a margin.
POLLS_SEEN = 2
#: Readiness re-checks right after output arrives, one per loop turn.
SPIN_CHECKS = 4
#: First and largest gap between readiness checks while nothing happens (seconds).
MIN_TICK = 0.001
MAX_TICK = 0.05
#: After a foreground process exits, checks run back to back this long (seconds): whatever the shell
#: starts next usually blocks within a few milliseconds, and a 1 ms tick would add up to a tick of delay.
EXIT_BURST = 0.006
#: From this tick on, a tick also reads when the foreground program's sleep ends, to check right then;
#: checks then run back to back this long (seconds) before the tick starts again from its smallest gap.
SLEEP_WATCH_TICK = 0.004
SLEEP_BURST = 0.001
#: While a thread of the foreground group computes, the tick is held at this (seconds): a program that
#: computes and then reads gives no event, so it is looked at this often - each look one small read while
#: that thread still runs (see :meth:`ReadinessProbe.still_running`).  The tick is longer when the program
#: has computed a long time (:data:`BUSY_TICK_SHARE` of the time since the last event: a read after a
#: minute of computing is seen within 50 ms) and when several sends compute at once (they share one
#: budget of about ``1 / BUSY_TICK`` looks a second, so many computing sessions cannot saturate the loop).
BUSY_TICK = 0.001
BUSY_TICK_SHARE = 0.001
#: The sends whose program computes now (loop threads only).
_BUSY_SENDS: "set[SendOperation]" = set()
#: While nothing happens, a tick whose foreground threads have not run since the last check skips it;
#: a full check still runs at least this often (seconds).
FULL_CHECK_EVERY = 1.0
#: While output is left to read (the last read stopped at its turn's budget: a flood), the program is
#: looked at no more often than this (seconds), and not closely after each batch: a look (and a yield of
#: the CPU) per batch took a sixth of the loop's time while 100 MB streamed.  Once the output is read the
#: look is at once; a wait seen through another program's flood (a background job's) is seen this late.
FLOOD_LOOK_GAP = 0.01
#: Longest a timed tty wait must last, without new output, before it counts as a prompt (seconds).
TIMED_WAIT_SETTLE = 1.5
#: Longest a key event waits for the program to have taken the one before it - read it and waited for input
#: again, as a person sees a program act on a key before pressing the next (seconds; see
#: :meth:`Session.start_send`, :meth:`Session.input_taken`): a program that does not gets the rest then.
KEY_EVENT_WAIT = 0.5
#: Longest a line of a multi-line text sent to a line editor (a shell or REPL) waits for whoever read the one
#: before - the editor, or the program that line started - to wait for input again (seconds; see
#: :meth:`Session._typed_line_by_line`): a command that runs on without reading gets the rest typed ahead then.
LINE_WAIT = 1.5
#: Added to a timer's due time before the wait is looked at again (see :meth:`SendOperation._timer_due_first`).
TIMER_MARGIN = 0.002
#: A full-screen program's timed wait on the terminal this short must be outlasted once, with no new output,
#: before it counts (seconds; see :meth:`SendOperation._polls_often`).
SHORT_POLL = 0.25
#: Added to it: a wait first seen as it began ends when the settle does, and a look then could come a hair
#: before the program wakes (the result showed vim's screen from before its Esc timeout ran out).
TIMED_WAIT_MARGIN = 0.05
#: How long a wait seen through a relay must last, without new output, before it counts (seconds): the
#: command's last output may still sit in the relay's terminal, waiting for the relay to copy it to ours.
RELAY_SETTLE = 0.01
#: How long a relay's own wait must last, with no new output and nothing behind it run, before it counts as
#: having kept our input for itself (seconds): input it passed on may still be on its way to its command.
KEPT_INPUT_SETTLE = 0.05
#: How long after a pause the idle window waited for ends (seconds): the program's next output comes
#: within milliseconds of its wake (the shell's prompt after ``sleep 5``).
PAUSE_SETTLE = 0.25
#: How long an interrupted send waits for the program to come back before giving up (seconds).
INTERRUPT_GRACE = 5.0
#: How long an interrupt of the shell itself (its line editor had the text) waits for the prompt it brings back
#: once the shell is seen reading again (seconds): a program that replaced the shell (``exec``) draws none.
PROMPT_AFTER_INTERRUPT = 0.5
ENTER = b"\r"
#: How many of the newest lines of a send's output are looked at for the program's prompt (see
#: :meth:`SendOperation._back_at_its_prompt`).
PROMPT_LINES_LOOKED = 100
#: The key that clears the line being typed: the terminal's line kill in line mode, a line editor's (readline's
#: unix-line-discard, in its emacs and vi insert modes alike) otherwise.
KILL_LINE = b"\x15"
LINE_FEED = b"\n"
#: The longest line the kernel keeps for a program reading whole lines (the terminal in line mode): the
#: rest of a longer line is dropped as it arrives (its line buffer is 4096 bytes, the line end included).
MAX_LINE_MODE_LINE = 4095
#: Bracketed paste (DEC mode 2004): what a terminal puts around pasted text when the program asked for it.
PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"
_INDENTED_LINE = re.compile(r"\n[ \t]+\S")


@dataclass(frozen=True)
class SendRequest:
    """What to write and how long to wait.

    ``text`` is written as is (its CRLF line ends as LF: a CR then an LF
    were two line ends, an empty command after each line), then the named
    ``keys``, then Enter, a CR, when ``submit`` - which a text that ends in a
    line end (and has no keys) already has: its last line end is that Enter.
    A second one answered the next prompt unseen: ``read -p '[Y/n]? ' a⏎``
    came back answered with its default.  The wait ends at the
    first of: the program reads the tty
    again (``stdin_read``), ``idle`` seconds without output
    (``inferred_idle``), ``timeout`` seconds from the start, the write
    included (``timeout``), or the session's process exits
    (``session_exit``).  ``viewport_bytes`` bounds the output kept for the
    result (the newest is kept).
    """

    text: str = ""
    submit: bool = True
    timeout: float = 30.0
    idle: float = 3.0
    viewport_bytes: int = 1024 * 1024
    keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if "\r\n" in self.text:  # (Windows line ends: one line end each, as a terminal pastes them)
            object.__setattr__(self, "text", self.text.replace("\r\n", "\n"))
        if self.submit and not self.keys and self.text.endswith(("\n", "\r")):  # (a lone CR is Enter too)
            object.__setattr__(self, "text", self.text[:-1])

    def payload(self, application_cursor: bool = False, paste: bool = False, enter: bytes = ENTER,
                newline: bytes = LINE_FEED, block: bool = False) -> bytes:
        """The bytes to write (raises for an unknown key name); ``paste``: the text as a bracketed paste
        (see :meth:`wants_paste`), the keys and ``enter`` after it; ``newline``: what a line end inside the
        text sends (a CR - the Enter key - to a full-screen program, as a terminal pastes it); ``block``: a
        paste of one line ends with a line end (the python session's REPL runs such a paste as a block)."""
        data = self.text.encode("utf-8", "surrogateescape")
        if newline != LINE_FEED:
            data = data.replace(LINE_FEED, newline)
        if block and LINE_FEED not in data:
            data += LINE_FEED
        if paste:
            data = PASTE_START + data + PASTE_END
        if self.keys:
            data += encode_keys(list(self.keys), application_cursor)
        return data + enter if self.submit else data

    def key_events(self, payload: bytes, application_cursor: bool = False) -> list[bytes]:
        """``payload`` (from :meth:`payload`) cut where a person's typing would pause: the text, then each key,
        then the Enter - each to be written once the program has read what came before (see
        :meth:`Session.start_send`).  One piece when there is nothing to cut, or when the payload is not made
        of those parts (a key that would stop the output was taken out of it)."""
        events: list[bytes] = []
        end = len(payload)
        codes = [encode_keys([key], application_cursor) for key in self.keys]
        if self.submit:
            codes.append(payload[-1:])
        for code in reversed(codes):
            if not code or not payload.endswith(code, 0, end):
                return [payload]
            events.insert(0, code)
            end -= len(code)
        return ([payload[:end]] if end else []) + events

    @staticmethod
    def line_events(payload: bytes) -> list[bytes]:
        """A typed-ahead ``payload`` (see :meth:`types_ahead`) cut after each line feed: one piece a line."""
        lines = payload.split(LINE_FEED)
        return [line + LINE_FEED for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])

    def check_lines_fit_line_mode(self) -> None:
        """Raise when a line of the text is longer than a line-mode reader can take (the kernel would drop
        the rest of it as it arrives, and the send would end as if all went in)."""
        if len(self.text) * 4 <= MAX_LINE_MODE_LINE:  # (UTF-8: at most 4 bytes a character)
            return
        for number, line in enumerate(self.text.split("\n"), 1):
            size = len(line.encode("utf-8", "surrogateescape"))
            if size > MAX_LINE_MODE_LINE:
                raise InvalidArgumentError(
                    f"line {number} of the text is {size} bytes, but the terminal is in line mode (the program "
                    f"reads whole lines), where the kernel keeps at most {MAX_LINE_MODE_LINE} bytes of a line "
                    "and drops the rest: send it in lines of at most that (e.g. base64 -w 76 of the data, then "
                    "decode it), or write the data to a file another way; nothing was sent")

    def types_ahead(self) -> bool:
        """Whether the text holds several lines, the later ones for whoever reads next (the command the first
        line starts: ``read v⏎answer``; see :meth:`Session._typed_line_by_line`).  They end with a line feed,
        as the lines inside the text do: a CR typed ahead while a line editor has the terminal raw stays a CR,
        and a line-mode reader taking over never sees its line end (``answer`` was lost).  Line editors take
        a line feed as Enter too."""
        return "\n" in self.text and not self.keys

    def wants_paste(self) -> bool:
        """Whether the text is one a line editor would change if it were typed: it holds a TAB (a completion
        request) or indented lines after the first (an auto-indenting editor - IPython, python 3.13's REPL -
        adds its own indent to each).  Text with an ESC drives keys: it is never pasted."""
        text = self.text
        if "\x1b" in text:
            return False
        return "\t" in text or _INDENTED_LINE.search(text) is not None


@dataclass
class SendResult:
    """The outcome of one send."""

    wait_reason: WaitReason
    viewport: str
    viewport_truncated: bool
    session_status: str
    exit_code: int | None
    cancelled: bool = False
    bell: bool = False
    elapsed: float = 0.0
    #: The raw bytes the program wrote during this send (newest ``viewport_bytes``), escapes included.
    raw_output: bytes = b""
    #: The rendered screen when a full-screen program had the terminal at the end.
    screen: ScreenSnapshot | None = None
    #: Bytes of the input (the text, keys and Enter as written) that were never written: the send ended
    #: first, the program having stopped reading (what was written waits in its input) - or, see
    #: ``text_cut_by``, the text was stopped.
    unsent: int = 0
    #: Why the text was stopped before its end (see :attr:`SendOperation.text_cut_by`), or None.
    text_cut_by: TextCut | None = None
    #: Lines of output that came between the owner's last look and this send, which the viewport does not
    #: hold, as ``(count, offset)`` for terminal_read (see :meth:`Session.unseen_before`), or None.
    unseen: tuple[int, int] | None = None
    #: Our shell or REPL, at its prompt, ran the text's line without showing it as typed: the terminal's echo
    #: is off - a program turned it off (``stty -echo``, a password prompt or a curses program that ended
    #: without restoring it) and the line editor has kept that since.
    echo_off: bool = False
    #: Bytes of the input written that no program has read when the wait ended without a prompt
    #: (``inferred_idle``, ``timeout``): typed ahead while a command ran that does not read the terminal now
    #: (``sleep``, a build) - they wait for whoever reads next.
    unread: int = 0


class SendOperation:
    """A send in progress; loop-thread only.  Created by :meth:`Session.start_send`.

    ``future`` resolves to a :class:`SendResult`; :meth:`cancel` interrupts the
    foreground program (SIGINT to its process group) and ends the wait once
    it is back at a prompt; :meth:`read_output` returns finished lines
    produced since the previous call (never the same text twice).
    """

    def __init__(self, session: "Session", request: SendRequest, payload: bytes, escape_sent: bool) -> None:
        self.session = session
        self.request = request
        self.payload = payload
        self.future: asyncio.Future[SendResult] = session.loop.create_future()
        #: The line the result's viewport starts at: the cursor's (a program may have left it on a line it
        #: climbed back to); read_output streams only lines finished after the start.
        self.start_line = session.scrollback.cursor_line
        # (the program's prompt as this send begins, if it shows one: see _back_at_its_prompt)
        session.last_prompt = session.prompt_shown() or session.last_prompt
        self.raw_offset = session.raw.total
        self.started = time.monotonic()
        self.deadline = self.started + request.timeout
        self.cancel_requested = False
        self.interrupted_at = 0.0
        #: The foreground groups this send has interrupted, each with the program its leader ran then (see
        #: :meth:`cancel`), and whether the prompt it ends at gets a C-u (see :meth:`cancel`).
        self._interrupted: dict[int, str | None] = {}
        self._clear_line_at_prompt = False
        self._pressed_again = False
        #: When the next full check is due whatever the look-skipping rules say (see _prompt_due).
        self._look_at = math.inf
        self.escape_sent = escape_sent
        #: Characters of main-screen text written when the program last left the alternate screen during
        #: this send (None: it did not).
        self.left_full_screen_at: int | None = None
        #: The exit code of the last command our shell finished during this send - or, until one does, since
        #: the last send ended (see :attr:`Session.exit_code_between`).
        self.exit_code: int | None = session.exit_code_between
        #: Bytes of the payload never written: the wait ended first (the program stopped reading), or the
        #: text was stopped (:attr:`text_cut_by`).
        self.unsent = 0
        #: Why nothing more of the text is written: ``"signal"`` (an interrupt, a signal to the program) or
        #: ``"program_ended"`` (the program the text was sent to gave the terminal back to the shell).
        self.text_cut_by: TextCut | None = None
        #: While the rest of a text too long to write at once is written to a program the session's shell
        #: started (not to the shell): that program's process group (0 otherwise).
        self._writing_to = 0
        #: While that rest is written to a command the shell or REPL runs (it was not at its prompt).
        self._to_command = False
        self.marker_seen = False
        #: The line the line editor must show as this send's text is typed (see ``Session._echo_to_expect``).
        self.echo_expected: str | None = None
        self.bell = False
        self._cursor = session.scrollback.completed_lines + 1
        self._rewrites_seen = self._rewrites_at_start = session.scrollback.rewrites
        self._timed_wait: tuple[float, int] | None = None
        #: Until when a timer due in the program holds the verdict back, and the output count it was seen at.
        self._timer_wait: tuple[float, int] | None = None
        #: A timed wait at a line start as first seen: when, the output count, its sample and its timeout.
        self._line_start_wait: tuple[float, int, object, float] | None = None
        #: The program's output so far and what the check saw of it when its timed wait was first seen.
        self._timed_wait_seen: tuple[int, object] = (-1, None)
        self.fence = Fence()
        #: Writes the rest of a text larger than the PTY takes at once (None otherwise).
        self.task: asyncio.Task[None] | None = None
        # The wait's state (see _step): the next step's handle, and whether it is a timer a wake may cut short
        # (False: a step queued for the next turn, which output may run at once instead - see step_now).
        self._timer: asyncio.Handle | None = None
        self._sleeping = False
        self._slept_from: float | None = None
        self._written_at = self._event_at = self._checked_at = self._burst_until = 0.0
        #: The quiet spell (when it began) whose idle window was looked at for a pause, and when it ends.
        self._pause_for = (-1.0, 0.0)
        self._partial_from = -1
        self._activity = self._activity_at_write = (0, 0)
        #: Checks right after output (none at the start: the program has yet to run); whether one ran yet.
        self._spins, self._tick, self._quiet_tick, self._checked = 0, MIN_TICK, False, False
        #: Whether this send watches the foreground group's exits yet (see _sleep).
        self._watching = False
        self._done_callbacks: list[Callable[["asyncio.Future[SendResult]"], object]] = []

    @property
    def done(self) -> bool:
        return self.future.done()

    def add_done_callback(self, callback: Callable[["asyncio.Future[SendResult]"], object]) -> None:
        """Call ``callback(future)`` in the same loop turn the send finishes (an asyncio future's callbacks
        wait for the next turn): the hot path hands the result to its caller's thread one turn sooner."""
        if self.future.done():
            callback(self.future)
        else:
            self._done_callbacks.append(callback)

    def _finish(self) -> None:
        callbacks, self._done_callbacks = self._done_callbacks, []
        for callback in callbacks:
            callback(self.future)

    def cancel(self) -> None:
        """Interrupt, as the terminal's interrupt key does: SIGINT to the foreground group, and nothing more of
        the text is written (the rest is :attr:`unsent`); the wait then ends at the next prompt, or
        :data:`INTERRUPT_GRACE` seconds after the last interrupt.  Each call is one more key press: a program
        that cleans up after the first may take a second as "stop now", so none is sent unasked."""
        if self.future.done():
            return
        first = not self.cancel_requested
        self.cancel_requested, self.interrupted_at = True, time.monotonic()
        self.stop_text()
        self._interrupt_behind_a_fence()
        # The text went to the shell (or REPL) itself, which may have read it ahead into its line editor's own
        # buffer: the interrupt ends the line being edited but not that buffer, whose rest then began the next
        # line ('sleep 30' cut right after its Enter ran 'leep 30' + the next command).  C-u at the prompt the
        # interrupt brings back clears the line (see _complete).
        self._clear_line_at_prompt = first and bool(self.payload) and not self._to_command \
            and self.session.foreground_pgid() == self.session.pid
        if self._clear_line_at_prompt:
            self.marker_seen = False  # (the prompt awaited is the one after the interrupt: see _prompt_due)
        self.session.wake()

    def _interrupt_behind_a_fence(self) -> None:
        """:meth:`_interrupt`, and the wait ends at a wait for input begun after it - not one the program was
        in, or got to, before its signal came: the kernel's worker makes the signal of the key later, and a
        shell that handled it while the next send's text came in lost a character of that text.  The worker
        is made to finish first (:meth:`ReadinessProbe.deliver_input_in_transit`): from then on the program
        has the signal, and is seen running until it waits again."""
        probe = self.session.probe
        if probe is None or not probe.available:
            self._interrupt()
            return
        fence = probe.fence()
        self._interrupt()
        probe.deliver_input_in_transit()
        self.fence = fence

    def stop_text(self) -> None:
        """Write nothing more of the text: the program it was for is being interrupted or signalled."""
        if self.text_cut_by is None:
            self.text_cut_by = "signal"

    def _interrupt(self) -> None:
        pgid = self.session.foreground_pgid()
        self._interrupted[pgid] = program_of(pgid)
        self.session.interrupt_foreground()

    def _interrupt_new_foreground(self) -> None:
        """After an interrupt, once more for each foreground group that was not there - a command the shell
        started since (input a program reading raw keys kept) - and for one whose leader has run another program
        since: an interrupt that struck the shell's own copy of itself between its fork and its exec was lost
        with the copy's handlers (``sleep 30`` cut right after its Enter ran on)."""
        pgid = self.session.foreground_pgid()
        if pgid in (0, self.session.pid):
            return
        if pgid not in self._interrupted:
            self._interrupt()
        elif (program := program_of(pgid)) is not None and program != self._interrupted[pgid]:
            self._interrupt()

    def read_output(self) -> str:
        """Finished lines since the last call; once done, also the final unfinished line.  A line the
        program rewrote since (multi-line progress) comes again, as it reads now."""
        sb = self.session.scrollback
        again, self._rewrites_seen = sb.rewritten_since(self._rewrites_seen, self._cursor)
        lines, self._cursor, dropped = sb.completed_since(self._cursor)
        lines = again + lines
        text = "\n".join(lines) + ("\n" if lines else "")
        if dropped:
            text = f"[{dropped} lines dropped: scrollback overflowed]\n" + text
        if self.future.done() and self._cursor == sb.completed_lines + 1:
            tail = sb.partial_line
            if tail:
                text += tail
                self._cursor += 1
        return text

    # -- the send, on the loop -----------------------------------------------------------
    def start(self, fence: Fence, written: int, later: Sequence[bytes] = (), to_command: bool = False,
              piece_wait: float = KEY_EVENT_WAIT, reader: int = 0) -> None:
        """Write the rest of the payload (its first ``written`` bytes are in; ``later``: its last pieces, each
        written once the program has read what came before and waits for input again, or ``piece_wait``
        seconds after the one before), then wait.  ``to_command``: the session's shell (or REPL) was not at
        its prompt - the text is for the command it runs (see :meth:`prompt_seen`).  ``reader``: the terminal's
        foreground process group before the first write (the first line may have started another since).

        ``fence`` was taken just before the first write; the session replaces it (:attr:`fence`) whenever
        it writes the program more input of its own (answers to terminal queries).  The wait is driven by
        callbacks, not a task: :meth:`wake` (output, an exit, a cancel) and its own timer each run one
        :meth:`_step`; only the rest of a text larger than the PTY takes at once is written by a task.
        """
        self.fence = fence
        session = self.session
        rest = self.payload[written:len(self.payload) - sum(map(len, later))]
        if rest or later:
            self._to_command = to_command
            pgid = reader or session.foreground_pgid()
            if pgid not in (0, session.pid):
                self._writing_to = pgid
                session.watch_foreground_exits()  # (see program_exited)
            self.task = session.loop.create_task(self._write_rest([rest, *later], piece_wait))
        else:
            self._begin_wait()

    async def _write_rest(self, pieces: list[bytes], piece_wait: float) -> None:
        """Write ``pieces``: the first at once, each later one once the program has taken the one before (or
        after ``piece_wait`` seconds), behind a fresh fence."""
        session = self.session
        written = total = 0
        size = sum(map(len, pieces))
        try:
            for index, piece in enumerate(pieces):
                if index:
                    await session.input_taken(self.fence, min(self.deadline, time.monotonic() + piece_wait))
                    if self.text_cut_by is not None:  # (stopped meanwhile: its fence stands, see _program_ended)
                        break
                    if session.probe is not None:
                        self.fence = session.probe.fence()
                total += len(piece)
                written += await session.write_all(piece, self.deadline, self._stop_writing) if piece else 0
                if written < total:
                    break
        except BaseException as exc:  # the reservation must never leak
            self._fail(exc)
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            self._writing_to, self._to_command = 0, False
        self.unsent = size - written  # (the result says how much was never written: it is not written later)
        if self.unsent == 1 and self.request.submit and self.text_cut_by == "program_ended":
            # Only the Enter after the text: the program ended on the text itself (``q`` to ``less``) and needs
            # no Enter - nothing the caller wrote was lost ("input cut" said it was).
            self.unsent = 0
        if written == size or self.text_cut_by is not None:  # (stopped: the wait for the prompt goes on)
            self._begin_wait()
        else:  # the program stopped reading
            self._complete("session_exit" if not self.session.running else "timeout")

    def _stop_writing(self) -> bool:
        """Whether the text stops here: it was stopped, or the program it is written to is gone (the session's
        shell has the terminal back)."""
        if self.text_cut_by is None and self._writing_to and self.session.foreground_pgid() == self.session.pid:
            self._program_ended()
        return self.text_cut_by is not None

    def program_exited(self) -> None:
        """A watched process of the foreground group exited: when it was the last of the program the text is
        being written to, the text stops (see :meth:`_program_ended`)."""
        if self._writing_to and self.text_cut_by is None \
                and all(stat.gone for stat in self.session.group_stats(self._writing_to)):
            self._program_ended()

    def prompt_seen(self) -> None:
        """The session's shell (or REPL) printed its prompt: when the text is being written to a command it
        ran - a program, or its own ``while read`` loop or ``input()`` - that command has ended (see
        :meth:`_program_ended`); a text for the shell itself goes on past its commands' prompts."""
        if self._to_command and self.text_cut_by is None:
            self._program_ended()

    def _program_ended(self) -> None:
        """The program the text is written to ended: nothing more of the text is written, and what it did not
        read is thrown away.  The text is that program's: the shell, taking the terminal back, read the rest
        as commands and ran each of its lines (2995 of 3000 lines sent to a reader that left after five).  The
        shell may have read part of a line before the rest was thrown away: the line-kill key (C-u) clears it,
        else it was glued to the front of the next command (``touch `` + ``ls x`` made a file ``ls``)."""
        self.text_cut_by = "program_ended"
        session = self.session
        session.discard_input()
        if session.probe is not None:
            # The shell's wait now is the answer, one it began before the C-u too: a terminal in line mode as the
            # program ended takes the C-u itself (the line-kill key), and the shell, which never reads it, would
            # not run again - the wait ran out its idle window, with the shell at its prompt.
            self.fence = session.probe.fence(accept_stale=True)
        session.write_now(KILL_LINE)

    def _begin_wait(self) -> None:
        session = self.session
        self._written_at = self._event_at = self._checked_at = time.monotonic()
        self._partial_from = session.scrollback.chars_written if self.payload and not self.request.submit else -1
        self._activity = self._activity_at_write = session.activity()
        if self.payload:  # nothing to see before the program runs on it: look when it answers (output, an
            # exit: see wake) or after the first tick - a look in the next turn finds it still running
            delay = max(min(MIN_TICK, self.deadline - self._written_at), 0.0)
            self._slept_from = self._written_at  # (a sleep like any other: the first step sees what changed)
            self._timer, self._sleeping = session.loop.call_later(delay, self._step), True
        else:
            self._timer = session.loop.call_soon(self._step)

    def wake(self) -> None:
        """Something happened (output, an exit, a cancel, the session closing): step at the next turn."""
        timer = self._timer
        if timer is not None and self._sleeping:
            timer.cancel()
            self._sleeping = False
            self._timer = self.session.loop.call_soon(self._step)

    def look_closely(self) -> None:
        """The program has something to act on now - it printed, a process of it exited, or the session wrote
        it answers to its terminal queries: look again in a few turns and then from the shortest tick.  (A
        tick grown long while it was quiet held the send back after answers: vim's start waited up to 50 ms for
        the look after the answer to its last query.)"""
        self._spins, self._tick = SPIN_CHECKS, MIN_TICK

    def step_now(self) -> None:
        """Run the next step now, from a loop callback, cutting its sleep short (output just arrived).  (A
        wake would queue the step for the next turn: a handle made and dropped, and a turn of the loop more
        on every round trip.)"""
        if self._timer is not None:  # (None: the send has ended)
            self._timer.cancel()
            self._sleeping = False
            self._step()

    def _step(self) -> None:
        self._timer = None
        if self.future.done():
            return
        try:
            reason = self._advance()
            if reason is not None:
                self._complete(reason)
        except BaseException as exc:  # the reservation must never leak
            self._fail(exc)
            if not isinstance(exc, Exception):
                raise

    def _advance(self) -> WaitReason | None:
        """One look: the reason the wait ends now, or None with the next step scheduled."""
        session = self.session
        now = time.monotonic()
        if self._slept_from is not None:
            self._after_sleep(now, self._slept_from)
        if not session.running:
            return "session_exit"
        look_due = now >= self._look_at
        if look_due:
            self._look_at = math.inf
        skipped = not look_due and self._may_skip_check(self._quiet_tick, now - self._checked_at)
        if not skipped:
            self._checked_at, self._checked = now, True
            if self._ready(self.fence, self._partial_from) and self._nothing_asked_since() \
                    and not self._prompt_due(now):
                return "stdin_read"
            if session.probe is not None and session.probe.program_stopped:
                session.wake_program()
        if self.cancel_requested:
            if now - self.interrupted_at > INTERRUPT_GRACE:
                return "timeout"
            self._interrupt_new_foreground()
        idle_at = self._idle_at(now)
        if now >= self.deadline:
            return "timeout"
        if now >= idle_at and not self.cancel_requested:
            return "inferred_idle"
        probe = session.probe
        self._sleep(now, idle_at, nothing_ran=skipped and probe is not None and probe.running_thread is None)
        return None

    def _prompt_due(self, now: float) -> bool:
        """Whether the shell (or our python REPL), interrupted while its line editor had the text and seen
        reading the terminal again, is yet to draw the prompt the interrupt brings back.

        Waited for :data:`PROMPT_AFTER_INTERRUPT` seconds.  A line editor that draws none by then was struck
        while it worked on the text rather than in its wait for keys: it keeps the interrupt pending and waits
        on, and the next text's first key then ended the line and was lost with it (``bash: cho: command not
        found``: 1 strike in 100, about every other one on a long text), or the whole next line in the python REPL
        (``KeyboardInterrupt`` in place of its output).  It is made to act on it once (see
        :meth:`_act_on_the_pending_interrupt`), and the prompt is waited for again.  Only a program whose
        prompts carry our marker: node takes a second Ctrl-C at its prompt as "exit"."""
        if not self._clear_line_at_prompt or self.marker_seen or not self.session.marks_prompts:
            return False
        if now - self.interrupted_at < PROMPT_AFTER_INTERRUPT:
            self._look_at = self.interrupted_at + PROMPT_AFTER_INTERRUPT  # (a full check then, none skipped)
            return True
        pid = self.session.pid
        if pid is None or self._pressed_again or program_of(pid) != self._interrupted.get(pid):
            return False  # (a program that replaced the shell, ``exec``, draws no marker)
        self._pressed_again, self.interrupted_at = True, now
        return self._act_on_the_pending_interrupt(pid)

    def _act_on_the_pending_interrupt(self, pid: int) -> bool:
        """Make the line editor (process ``pid``) that waits with an interrupt pending act on it (False: it is
        not in its own wait for keys, and nothing is pressed).

        Ctrl-C once more, for a wait it takes signals in: bash's readline, in ``pselect6`` or its ``read`` (the
        wait is interrupted and it acts); the python REPL in its own ``select``.  Inside CPython's readline,
        which waits for a key in ``pselect6`` with a signal mask and then reads, a signal only restarts the
        wait: the interrupt flushed the input it was told was there (1 strike in 60) - there the line is
        cleared and ended (C-u, Enter), and the REPL raises the pending KeyboardInterrupt before it runs the
        empty line.  A program's ``input()`` after its KeyboardInterrupt waits in that ``select`` too, with no
        prompt of ours: the REPL's own prompt is the one with bracketed paste on (see ``python_rc.py``), and
        only there is the key pressed (a second Ctrl-C killed ``input('really? ')``).  Nothing for a
        program that reads whole lines (the terminal in canonical mode: a ``read`` in a trap)."""
        probe = self.session.probe
        call = probe.read_call(pid) if probe is not None else None
        if probe is None or call is None or probe.reads_lines():
            return False
        name, masked = call
        if self.session.type == "python":
            if name == "read" or masked:
                self.fence = probe.fence()
                self.session.write_now(KILL_LINE + ENTER)
                return True
            if not self.session.screen.bracketed_paste:
                return False
        self._interrupt_behind_a_fence()
        return True

    def _idle_at(self, now: float) -> float:
        """When the idle window ends: ``idle`` seconds after the last output (or the write).  When it ends
        while the program pauses by itself (``sleep 5``; PAM's delay after a wrong password; see
        :meth:`ReadinessProbe.pause_ends`) and may wake within one more window, before the deadline, the window
        ends :data:`PAUSE_SETTLE` after the wake instead (at the latest it can be, but no later than that one
        more window): what the program does then is the send's answer, not a guess at silence.  Once per quiet
        spell: a program that only pauses again (a silent loop of sleeps) is idle after at most two windows."""
        quiet_from = max(self.session.last_output, self._written_at)
        idle_at = quiet_from + self.request.idle
        if now < idle_at:
            return idle_at
        if self._pause_for[0] != quiet_from:
            probe = self.session.probe
            wakes = probe.pause_ends(now, self._written_at) if probe is not None and probe.available else None
            one_more = idle_at + self.request.idle
            waited = wakes is not None and wakes[0] <= one_more and wakes[0] < self.deadline
            self._pause_for = (quiet_from, min(wakes[1], one_more) + PAUSE_SETTLE
                               if waited and wakes is not None else idle_at)
        return self._pause_for[1]

    def _sleep(self, now: float, idle_at: float, nothing_ran: bool = False) -> None:
        """Schedule the next step: at the next turn while looking closely, else after the tick.

        ``nothing_ran``: this step skipped its check because no thread of the group has run since the last
        one - once this send watches the group for exits, it is the group already watched (a full check, at
        least every second, watches anew)."""
        loop = self.session.loop
        self._slept_from = now
        if (self._spins > 0 or now < self._burst_until) and not self.session.output_waiting():
            self._spins -= 1
            # The program may be waiting for this CPU (woken by an exit, a signal, our input): let it run before
            # the next look.  Looks back to back on its CPU kept it from running for a whole time slice - a
            # shell's `read` was seen 4 ms after it began, behind a few hundred looks at a shell not yet run.
            os.sched_yield()
            self._timer, self._sleeping = loop.call_soon(self._step), False  # queued already: no sleep to cut
            return
        if not (nothing_ran and self._watching):
            self.session.watch_foreground_exits()
            self._watching = True
        delay = min(self._tick, self._busy_tick(now - self._event_at), self.deadline - now,
                    max(idle_at - now, 0.0005))
        wakes = self._sleep_ends(now) if self._tick >= SLEEP_WATCH_TICK else None
        if wakes is not None and wakes - now < delay:  # the program's sleep ends first: be there,
            # look closely for a moment, then tick from the start again
            delay, self._burst_until, self._tick = max(wakes - now, 0.0), wakes + SLEEP_BURST, MIN_TICK / 2
            self._event_at = wakes
        self._timer, self._sleeping = loop.call_later(max(delay, 0.0), self._step), True
        self._tick = min(self._tick * 2, MAX_TICK)

    def _after_sleep(self, now: float, slept_from: float) -> None:
        """What changed while asleep: output or a foreground exit means looking closely again."""
        session = self.session
        activity = session.activity()
        self._quiet_tick = self._tick >= MAX_TICK and activity == self._activity \
            and slept_from >= self._burst_until
        if activity != self._activity:
            if activity[1] != self._activity[1]:  # the next program starts within milliseconds
                self._burst_until = now + EXIT_BURST
            if activity[0] != self._activity[0] and session.probe is not None:
                session.probe.output_arrived()
            self._activity, self._event_at = activity, now
            self.look_closely()

    def _complete(self, reason: WaitReason) -> None:
        if self._clear_line_at_prompt and reason == "stdin_read":
            self.session.write_now(KILL_LINE)  # (before any other send can write: see cancel)
        result = self._result(reason)
        self.future.set_result(result)
        self._finish()  # the caller has its result now; what follows runs before it can act on the loop
        self._stop_waiting()
        self.session.release(self, result)

    def _fail(self, exc: BaseException) -> None:
        self._stop_waiting()
        self.session.release(self, None)
        if not self.future.done():
            self.future.set_exception(exc if isinstance(exc, Exception) else TerminalError("send cancelled"))
        self._finish()

    def _stop_waiting(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        _BUSY_SENDS.discard(self)
        self.session.stop_watching_exits()

    def _sleep_ends(self, now: float) -> float | None:
        probe = self.session.probe
        return probe.sleep_ends(now) if probe is not None and probe.available else None

    def _busy_tick(self, since_event: float) -> float:
        """The longest tick while the last check found a thread running (:data:`MAX_TICK` otherwise)."""
        probe = self.session.probe
        if probe is None or probe.running_thread is None:
            _BUSY_SENDS.discard(self)
            return MAX_TICK
        _BUSY_SENDS.add(self)
        tick = min(max(BUSY_TICK * len(_BUSY_SENDS), since_event * BUSY_TICK_SHARE), MAX_TICK)
        return math.floor(tick * 1000) / 1000  # whole milliseconds: asyncio's epoll rounds 1.04 ms up to 2

    def _may_skip_check(self, quiet_tick: bool, since_full_check: float) -> bool:
        """The answer "not waiting" still stands without a full check (one small read per thread).

        It does while the thread the last check found running still runs.  After input of ours (a whole
        line, not a look at a stale wait), it also does while nothing has run since the last check - or,
        before this send's first check, since the fence: our input is still unread.  Otherwise only on a
        quiet tick.  A full check still runs at least every :data:`FULL_CHECK_EVERY` seconds.
        """
        probe = self.session.probe
        if since_full_check >= FULL_CHECK_EVERY or self._timed_wait is not None or probe is None \
                or not probe.available:
            return False
        if self.session.output_waiting() and since_full_check < FLOOD_LOOK_GAP:
            return True
        if probe.still_running():
            return True
        if self._partial_from >= 0 or self.fence.accept_stale:  # a stale wait may count: it needs no run
            return quiet_tick and probe.unchanged_since_last_check()
        if not self._checked:  # (output since means it ran, most likely: then the look would be wasted)
            return self.session.activity() == self._activity_at_write and probe.nothing_ran_since(self.fence)
        return probe.unchanged_since_last_check()

    def _ready(self, fence: Fence, partial_from: int) -> bool:
        """Is the program waiting for input?  ``partial_from``: output count at the write of
        unsubmitted text (-1 otherwise)."""
        session = self.session
        probe = session.probe
        if probe is None or not probe.available:
            # No /proc: the shell marker, with the shell back in the foreground.
            return self.marker_seen and session.foreground_pgid() == session.pid
        timeout = probe.waiting_for_input(fence)
        if timeout is None and partial_from >= 0 and not fence.accept_stale \
                and session.scrollback.chars_written > partial_from:
            # Canonical-mode readers do not wake for a partial line: once its echo is
            # back and nothing is left unread, a wait already in progress is the answer.
            fence.accept_stale = probe.unread_input() == 0
            timeout = probe.waiting_for_input(fence) if fence.accept_stale else None
        if timeout is not None and session.deliver_answers():
            return False  # it asked the terminal something: the answer is its input to read first
        return self._settled(timeout)

    def _nothing_asked_since(self) -> bool:
        """After a wait was observed: read the output written before it; if that output asked the terminal
        something (an answer it will read is written now), the answer is the program's pending input - it
        is not waiting for the caller."""
        session = self.session
        answered = session.replies_written
        session.drain()
        session.deliver_answers()
        return session.replies_written == answered

    def _settled(self, timeout: float | None) -> bool:
        """An untimed wait is a prompt; so is a timed one, unless the program may still be going on by
        itself (see the module docstring): then it must outlast its timeout with no new output.  A wait seen
        through a relay must outlast :data:`RELAY_SETTLE` with no new output (its output may be in transit); a
        relay's own wait, :data:`KEPT_INPUT_SETTLE`."""
        if timeout is None:
            self._timed_wait = None
            return False
        if self._timer_due_first():
            return False
        if timeout != math.inf:
            self.session.drain()  # (the cursor as the wait left it: its echo or prompt may still be unread)
        if timeout != math.inf and self._cursor_at_line_start():
            # Still working (node awaiting a promise): the idle rule ends the wait - unless it is a loop of polls
            # for keys.  Looked at every tick, as any timed wait (its answers to terminal queries are delivered
            # at a look).
            self._timed_wait = (math.inf, -1)
            return self._polls_for_keys(timeout)
        if timeout == math.inf and self._keys_read_while_timed_work():
            self._timed_wait = (math.inf, -1)  # (looked at every tick: the sleeper's waking is no event)
            return False
        may_go_on = self.escape_sent or self._may_be_leaving() or self._polls_often(timeout)
        probe = self.session.probe
        relayed = probe is not None and (probe.through_relay or probe.kept_by_relay)
        if not relayed and (timeout == math.inf or not may_go_on):
            return True
        now = time.monotonic()
        session = self.session
        session.drain()  # (what it printed before this wait: its output must not lag the look)
        written = session.scrollback.chars_written
        sample = probe.waiting_sample() if probe is not None else None
        seen_output, seen_sample = self._timed_wait_seen
        if self.escape_sent and 0 <= seen_output != session.raw.total and sample != seen_sample:
            # It woke, acted on the Esc and printed (vim's Esc timeout ran out, it redrew), and waits again: a
            # prompt.  (A full-screen redraw adds nothing to the line history: timed by that alone, the settle
            # ran on, and under load the result showed the screen from before the Esc.)
            return True
        if self._timed_wait is None or self._timed_wait[1] != written:
            settle = min(timeout, TIMED_WAIT_SETTLE) + TIMED_WAIT_MARGIN if may_go_on and timeout != math.inf \
                else KEPT_INPUT_SETTLE if probe is not None and probe.kept_by_relay else RELAY_SETTLE
            self._timed_wait = (now + settle, written)
            self._timed_wait_seen = (session.raw.total, sample)
            return False
        return now >= self._timed_wait[0]

    def _polls_for_keys(self, timeout: float) -> bool:
        """Whether a timed wait at the start of a line (see :meth:`_cursor_at_line_start`) came back after its
        timeout ran out (:data:`POLLS_SEEN` times over), with nothing printed meanwhile, little CPU used
        (:data:`POLL_LOOP_CPU`) and no other thread of it in a timed wait: the program waits for keys in a loop of
        polls (blessed's ``inkey(timeout=0.5)``), it is not going on by itself - node's timer, when it fires,
        prints the awaited result; JLine polls the terminal all along while a snippet sleeps in another thread;
        a "press q to stop" loop works between its polls.  Every key to such a loop ended on the idle window.
        The first sighting (its time, the output count, the wait's sample and timeout) is kept until output
        arrives."""
        session, probe = self.session, self.session.probe
        if probe is None:
            return False
        now, total = time.monotonic(), session.raw.total
        sample = probe.waiting_sample()
        seen = self._line_start_wait
        if seen is None or seen[1] != total:
            self._line_start_wait = (now, total, sample, timeout)
            return False
        seen_at, _, seen_sample, seen_timeout = seen
        worked = probe.cpu_seconds(sample) - probe.cpu_seconds(seen_sample)
        return sample is not None and sample != seen_sample and now - seen_at >= POLLS_SEEN * seen_timeout \
            and worked <= POLL_LOOP_CPU * (now - seen_at) and not probe.waits_on_time_elsewhere()

    def _keys_read_while_timed_work(self) -> bool:
        """Whether the program reads keys at the start of a line (see :meth:`_cursor_at_line_start`) while another
        thread of the reading process is in a timed wait: a reader that takes the keys all along, as the Erlang
        VM's does, waits on the terminal while what it was given runs (``timer:sleep(1000)``), and prints no
        prompt until that ends.  (A prompt is printed before its read, so the cursor is past it; a silent
        line-mode read - ``input()``, ``read`` - is no keyboard reader.)"""
        probe = self.session.probe
        if probe is None or probe.through_relay or not probe.reader_works_on_time():
            return False  # (behind a relay, our terminal's modes are the relay's, not its command's)
        self.session.drain()  # (the cursor as the reader left it: the echo of Enter may still be unread)
        return self._cursor_at_line_start()

    def _timer_due_first(self) -> bool:
        """Whether a thread of the program that ran since the write has a timer due within milliseconds (see
        :attr:`ReadinessProbe.timer_due`) while nothing is drawn past the start of a line of the main screen:
        the program is about to go on by itself - fzf reads the terminal at once and draws its list after a
        10 ms timer, and the send ended with nothing drawn (3 of 60 times).  The wait is looked at again once
        the timer is due; once per output seen (a ticking timer does not hold the send up)."""
        session, probe = self.session, self.session.probe
        now, written = time.monotonic(), session.scrollback.chars_written
        if self._timer_wait is not None and self._timer_wait[1] == written:
            return now < self._timer_wait[0]
        if probe is None or probe.timer_due <= 0 or session.screen.full_screen or session.scrollback.cursor_column:
            return False
        self._timer_wait = (now + probe.timer_due + TIMER_MARGIN, written)
        return True

    def _polls_often(self, timeout: float) -> bool:
        """Whether a program that draws its own display (full-screen, or inline under a hidden cursor) polls its
        terminal every few tenths of a second at most (:data:`SHORT_POLL`) in one thread while another, which ran
        since the write, does the work: it may still be acting on the key.  Textual's input thread polls every
        0.1 s and hands keys to the app; after the key that quits (or the Enter that submits an inline app), the
        app waits for that poll to end, then throws away input typed meanwhile as it leaves - the send ended in
        that last poll, and the next command was lost.  One such poll outlasted costs little; a long one (vim's,
        4 s) would cost every key that much, and a program whose reader does the work itself (emacs) has acted
        when it waits again."""
        probe, screen = self.session.probe, self.session.screen
        return timeout <= SHORT_POLL and (screen.full_screen or screen.cursor_hidden) and probe is not None \
            and probe.handed_on

    def _may_be_leaving(self) -> bool:
        """Whether a program left the alternate screen during this send and may be shutting down still: not
        once it printed a prompt of its own on the main screen, nor once a full-screen program has the screen
        again (git opening its next editor after the first: the one that left is gone, and the new one's wait
        took the 1.5 s settle)."""
        return self.left_full_screen_at is not None and not self.session.screen.full_screen \
            and not self._prompted_since_leaving()

    def _prompted_since_leaving(self) -> bool:
        """Whether the program printed text on the main screen since it left the alternate screen and waits
        with the cursor past it: a prompt of its own (vim's "Press ENTER" after ``:!cmd`` waited out a 1.5 s
        settle).  A program shutting down prints nothing there (vim restores modes and the cursor only)."""
        session = self.session
        left_at = self.left_full_screen_at
        return left_at is not None and not session.screen.full_screen \
            and session.scrollback.chars_written > left_at and session.scrollback.cursor_column > 0

    def _cursor_at_line_start(self) -> bool:
        """A program that has taken the keys polls its terminal with the cursor at the start of a line of
        the main screen: it shows no prompt.  node's REPL awaiting a promise polls, its timer as the
        timeout, right after the echo of the line it runs; at a prompt the cursor is past it (``> ``,
        IPython's ``In [2]: ``, a prompt_toolkit continuation line's indent).  A line-mode reader
        (``read -t 5``) echoes nothing itself and prompts nothing: its timed wait stays a prompt.  Nor does a
        program that hid the cursor say anything by where it stands: Ink draws its input box and leaves the
        hidden cursor under it (every send to an idle Ink app ended on the idle window)."""
        session = self.session
        return not session.screen.full_screen and session.scrollback.cursor_column == 0 \
            and not session.screen.cursor_hidden and not session.reads_lines() and not self._back_at_its_prompt()

    def _back_at_its_prompt(self) -> bool:
        """Whether the program's prompt (:attr:`Session.last_prompt`, as this send began: the line the cursor was
        past text on, or as the last send that began so did; the program that showed it still has the terminal)
        starts one of the lines finished since the line our text went on (of the last
        :data:`PROMPT_LINES_LOOKED`): it went back to its prompt, and the line start the cursor is at is output of
        its own that came after - a callback's (node's ``listen`` printing ``listening on 3000``, a
        ``fetch(...).then(console.log)``), which node's REPL does not draw its prompt again under.  Every such send
        ended on the idle window."""
        group, prompt = self.session.last_prompt  # (sends hold the session in turn: set as this one began)
        if not prompt.strip() or group != self.session.foreground_pgid():
            return False  # (the shell's prompt is no prompt of the command it ran: yarn prints "$ vite")
        scrollback = self.session.scrollback
        first = max(self.start_line + 1, scrollback.completed_lines - PROMPT_LINES_LOOKED + 1)
        lines, _, _ = scrollback.completed_since(first)
        return any(line.startswith(prompt) for line in lines)

    def _exit_code_now(self) -> int | None:
        """The exit code our shell reported during this send, while the shell still has the terminal: once it
        has started another command (typed ahead), that code was an earlier command's (``sleep 30`` typed
        while ``sleep 1; (exit 3)`` ran timed out with exit code 3)."""
        session = self.session
        return self.exit_code if self.exit_code is None or session.foreground_pgid() == session.pid else None

    def _result(self, reason: WaitReason) -> SendResult:
        session = self.session
        limit = self.request.viewport_bytes
        session.screen.check_drawer(session.foreground_pgid)
        snapshot = session.screen.snapshot() if session.screen.full_screen else None
        unseen, echo_off = None, False
        if snapshot is not None:
            viewport, cut = snapshot.text(), False
        else:
            climbed_to = session.scrollback.top_rewritten_since(self._rewrites_at_start)
            start = self.start_line if climbed_to is None else min(climbed_to, self.start_line)
            viewport, cut = session.scrollback.text_since(start, limit)
            unseen = session.unseen_before(start)
            if self.echo_expected is not None and self.marker_seen and not cut:
                echo_off = self.echo_expected not in viewport.partition("\n")[0]
        exit_code = session.exit_status if reason == "session_exit" else self._exit_code_now()
        raw, _lost = session.raw.since(self.raw_offset)
        unread = 0
        if reason in ("inferred_idle", "timeout") and self.payload and not self.unsent and session.probe is not None:
            unread = max(session.probe.unread_input(), 0)
        return SendResult(reason, viewport, cut, session.public_status, exit_code, self.cancel_requested,
                          self.bell, time.monotonic() - self.started, raw[-limit:], snapshot,
                          self.unsent, self.text_cut_by if self.unsent else None, unseen, echo_off, unread)
