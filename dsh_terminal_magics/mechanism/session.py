"""One PTY session: the process, its output, its input.  Lives on the loop thread.

Everything here runs on the private event loop (see :mod:`.event_loop`);
nothing in this module is thread-safe on purpose.  Output is read as soon as
the master is readable, so a busy notebook never leaves a child blocked on a
full PTY and idle timing is never distorted.  The send and its wait are in
:mod:`.send`, the screen state in :mod:`.screen_tracker`, answers to terminal
queries in :mod:`.terminal_replies`.
"""
from __future__ import annotations

import asyncio
import os
import signal as signal_module
import time
from dataclasses import dataclass, replace
from typing import Callable

from ptyprocess import PtyProcess

from ..errors import BackendError, SessionBusyError, SessionNotRunningError, TerminalError
from ..vocabulary import SessionStatus
from .backends import LaunchSpec, python_code_block
from .output import OutputListeners, OutputNormalizer, RawRing, ScrollbackBuffer, TerminalEvents, keyed_marker_at
from .event_loop import wait_within
from .process_tree import ProcessStat, TreeToEnd, read_proc, subtree_table
from .pty_child import PtyChild
from .readiness import Fence, ReadinessProbe
from .process_cap import ProcessCap
from .sandbox import INIT_FAILED, Sandbox
from ..asciicast import CastRecorder
from .screen_tracker import ScreenTracker, switches_screen
from .send import (ENTER, KEY_EVENT_WAIT, LINE_FEED, LINE_WAIT, MAX_LINE_MODE_LINE, MAX_TICK, MIN_TICK, PASTE_START,
                   SendOperation, SendRequest, SendResult)
from .keys import holds_an_escape_key
from .terminal_replies import HeldAnswers, TerminalReplies



@dataclass(frozen=True)
class SessionOptions:
    """Per-session limits and defaults (documented in the README)."""

    rows: int = 40
    cols: int = 160
    scrollback_lines: int = 10_000
    scrollback_chars: int = 4 * 1024 * 1024
    raw_bytes: int = 1024 * 1024
    start_timeout: float = 10.0
    close_grace: float = 2.0


@dataclass(frozen=True)
class SessionInfo:
    """A snapshot of a session for listings."""

    session_id: str
    name: str | None
    type: str
    pid: int | None
    status: SessionStatus
    motd: str = ""
    exit_status: int | None = None
    last_wait_reason: str | None = None
    last_exit_code: int | None = None
    rows: int = 40
    cols: int = 160


#: How often, and how far apart (seconds), a closed session's cgroup is removed while exiting tasks hold it.
CAP_REMOVAL_TRIES = 20
CAP_REMOVAL_PAUSE = 0.1


class Session:
    """A PTY running one backend process, with its output and at most one send at a time."""

    def __init__(self, *, session_id: str, owner: object, name: str | None, type_name: str,
                 spec: LaunchSpec, cwd: str, env: dict[str, str], token: str, options: SessionOptions,
                 loop: asyncio.AbstractEventLoop, sandbox: Sandbox = Sandbox(), cap: ProcessCap | None = None) -> None:
        self.session_id = session_id
        self.owner = owner
        self.name = name
        self.type = type_name
        self.spec = spec
        self.cwd = cwd
        self.env = env
        self.token = token
        self.sandbox = sandbox
        #: The cap on the session's tasks (:mod:`.process_cap`), None for none.
        self.cap = cap
        #: The shell (or REPL) itself: the spawned process, or the one under a sandbox's wrapper.
        self._shell_pid: int | None = None
        self.options = options
        self.loop = loop
        self.status: SessionStatus | str = "starting"
        self.motd = ""
        self.scrollback = ScrollbackBuffer(options.scrollback_lines, options.scrollback_chars)
        self.scrollback.columns = options.cols
        self.raw = RawRing(options.raw_bytes)
        self.normalizer = OutputNormalizer()
        self.screen = ScreenTracker(options.rows, options.cols, self.raw, self.normalizer, self.group_members)
        self.replies = TerminalReplies(self.screen.model, self.screen.catch_up, self.size,
                                       lambda: self.screen.alternate, lambda: self.screen.application_cursor)
        self.operation: SendOperation | None = None
        self.reservation: str | None = None
        self.last_exit_code: int | None = None
        #: The exit code of the last command our shell finished while no send ran (a command a send left
        #: running on its timeout), until the next send ends: that send reports it, unless a command finishes
        #: during it.
        self.exit_code_between: int | None = None
        #: The key of our shell's exit-code markers (see :meth:`_exit_codes`); learnt while the session starts.
        self._marker_key: str | None = None
        self._learning_marker_key = True
        #: Whether input was typed since our shell's last prompt (its keyed marker): False means it sits at
        #: its prompt, and a query from its group is no command's (see :meth:`deliver_answers`).  True when
        #: no marker tells (a REPL: its answers are always delivered).
        self._typed_since_prompt = True
        #: Whether the last prompt marker came from another REPL of ours - the python console a ``python3``
        #: started in our shell runs (see python_rc.py), which keys its markers with a key of its own - and
        #: nothing was typed since: it gets Python code as the python session's does (see :meth:`_keys_and_text`).
        self._nested_console_at_prompt = False
        #: Counts the signal keys :meth:`type_input` typed: what it was typing before the last one stops.
        self._typing_stopped = 0
        self.last_wait_reason: str | None = None
        #: The raw output count when the last send ended: its sender was shown the output up to there (a result,
        #: a job's output), so a viewer following up picks up after it.
        self.last_send_end = 0
        #: The completed lines of the scrollback its owner was shown (a send's result, a job's output, a read
        #: of the newest lines): lines completed after them and before a send's viewport are that send's
        #: ``unseen`` (see :meth:`unseen_before`).
        self.seen_lines = 0
        #: The program's prompt as the last send that began at one saw it, the cursor past it (node's ``> ``),
        #: with the terminal's foreground group then: also for a send that begins with the cursor at a line start
        #: (see ``SendOperation._back_at_its_prompt``).
        self.last_prompt: tuple[int, str] = (0, "")
        self.last_output = 0.0
        #: How many times the session has answered a terminal query.
        self.replies_written = 0
        #: Answers to terminal queries not written yet, and the look for their reader while no send runs.
        self.held_answers = HeldAnswers()
        self._reader_look: asyncio.TimerHandle | None = None
        self.listeners = OutputListeners()
        self.recorder: CastRecorder | None = None
        self.probe: ReadinessProbe | None = None
        #: Set while (and after) the session is being closed; resolves when it is gone.
        self.closing: asyncio.Future[None] | None = None
        #: After the close: pids of its processes this process may not signal (another user's, started with
        #: ``sudo``), which nothing here could end.
        self.left_running: list[int] = []
        self.child: PtyChild | None = None
        #: Resolves once a spawn in progress has finished (see :meth:`open`).
        self._spawned: asyncio.Future[None] | None = None

    # -- state -----------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The shell's pid (under a sandbox, the shell inside it, not the wrapper)."""
        if self._shell_pid is not None:
            return self._shell_pid
        return self.child.pid if self.child is not None else None

    @property
    def exit_status(self) -> int | None:
        return self.child.exit_status if self.child is not None else None

    @property
    def running(self) -> bool:
        return self.status in ("running", "starting")

    @property
    def public_status(self) -> SessionStatus:
        return "running" if self.status == "starting" else self.status  # type: ignore[return-value]

    def size(self) -> tuple[int, int]:
        return self.options.rows, self.options.cols

    def snapshot(self) -> SessionInfo:
        return SessionInfo(self.session_id, self.name, self.type, self.pid, self.public_status, self.motd,
                           self.exit_status, self.last_wait_reason, self.last_exit_code,
                           self.options.rows, self.options.cols)

    # -- lifecycle -----------------------------------------------------------------------
    async def open(self, spawning: "asyncio.Future[PtyProcess]") -> None:
        """Take the backend process ``spawning`` starts on a new PTY (:func:`.pty_child.spawn_off_loop`: the
        fork and exec run in a spawner thread) once it has started.

        Once this returns or raises, a process that was started is the session's to end, even when the
        awaiting task was cancelled meanwhile (the spawn is waited out first).  A spawn that has not started
        the process within the start-up timeout is given up (what it starts later is killed and reaped): the
        sandbox's set-up reads the workspace, and a hung mount there held the open for ever.
        """
        self._spawned = self.loop.create_future()
        try:
            try:
                proc = await wait_within(asyncio.shield(spawning), self.options.start_timeout)
            except asyncio.TimeoutError:
                spawning.cancel()
                waits = "the sandbox's set-up or the program's start" if self.sandbox.wrapped else "the program's start"
                raise TerminalError(
                    f"could not start {self.type!r} session: it did not start within {self.options.start_timeout:g} s "
                    f"({waits} waits on the file system: a hung mount?); bring the mount back or unmount it, or "
                    "open the session elsewhere") from None
            except asyncio.CancelledError:
                self._adopt(await spawning)
                raise
            except BackendError:
                raise  # (the sandbox's refusal says what to do itself)
            except TerminalError as exc:
                raise TerminalError(f"could not start {self.type!r} session: {exc}") from None
            self._adopt(proc)
        finally:
            self._spawned.set_result(None)

    async def spawned(self) -> None:
        """Wait until a spawn in progress has finished (its process, if any, is then :attr:`child`)."""
        if self._spawned is not None:
            await asyncio.shield(self._spawned)

    def _adopt(self, proc: PtyProcess) -> None:
        self.child = PtyChild(proc, self.loop, self._ingest, self._child_changed, self._output_read)
        self.probe = ReadinessProbe(self.child.master_fd, self.child.slave_fd, self.child.tty_path, self.child.pid,
                                    private_dev=self.sandbox.private_dev)
        self.status = "running"

    async def wait_started(self) -> str:
        """Wait for the first prompt (bounded); return the bounded start-up output."""
        op = self.start_send(SendRequest(text="", submit=False, timeout=self.options.start_timeout,
                                         idle=self.options.start_timeout), holder="start-up")
        try:
            result = await op.future
        finally:
            self._learning_marker_key = False
        self._find_shell()
        startup = result.viewport.strip()
        self.motd = "\n".join(filter(None, [self.spec.description, self.sandbox.describe(),
                                            self.cap.describe() if self.cap else None, startup[-1024:]]))
        return self.motd

    def wrapper_failure(self) -> str | None:
        """The wrapper's own error when it could not start the program (bubblewrap exited at once with
        ``bwrap: ...``: a mount it could not make, a directory it could not enter; the namespace's init could not
        set the session's cap, :data:`.sandbox.INIT_FAILED`), else None."""
        if not self.sandbox.wrapped or self.status != "exited":
            return None
        data, _ = self.raw.since(0)
        first = data.lstrip().split(b"\n", 1)[0].decode("utf-8", "replace").strip()
        return first if first.startswith("bwrap: ") or first == INIT_FAILED else None

    def _find_shell(self) -> None:
        """Under a wrapper (the sandbox's, the backend's own), find the program at the first prompt: the holder
        of the foreground when it made a group of its own (bash, python), else the first process below the
        wrappers."""
        if self.child is None or self.probe is None or not (self.sandbox.wrapped or self.spec.wrapped):
            return
        foreground = self.foreground_pgid()
        table = subtree_table([self.child.pid])
        below = set(table)
        if foreground > 0 and foreground != self.child.pid and foreground in below:
            program = foreground
        else:
            program = self.child.pid
            wrappers = {b"bwrap\n", b"sh\n", *([os.path.basename(self.spec.argv[0])[:15].encode() + b"\n"]
                                               if self.spec.wrapped else [])}  # (sh: the namespace's init)
            while read_proc(f"/proc/{program}/comm") in wrappers:
                children = [pid for pid in below if table[pid].ppid == program]
                if len(children) != 1:
                    break
                program = children[0]
        chain, pid = set(), program
        while pid != self.child.pid and pid in table:  # the chain from the program up to the wrapper
            pid = table[pid].ppid
            chain.add(pid)
        self.probe.wrappers = frozenset(chain)
        self._shell_pid = self.probe.leader_pid = program

    def _child_changed(self) -> None:
        """The leader exited, or a watched foreground process did."""
        if self.child is not None and self.child.exited and self.running:
            self.status = "exited"
        if self.operation is not None:
            self.operation.program_exited()
        self.wake()

    def begin_close(self) -> TreeToEnd | None:
        """Mark the session closing; returns what must end (None when it never started)."""
        self.status = "closing"
        if self.operation is not None:
            self.operation.cancel_requested = True
            self.operation.stop_text()
        self.wake()
        if self.child is None:
            return None
        self.discard_input()  # (nothing typed ahead runs while the close lets the shell reap its dead)
        return TreeToEnd(self.child.leader, self.token.encode(), self.child.exited, self.sandbox.wrapped)

    def finish_close(self) -> None:
        """After the tree has ended: reap, flush, close every fd.  Never blocks."""
        if self.child is not None:
            self.child.reap()
            self.child.drain()
            self.child.close_fds()
        if self.probe is not None:
            self.probe.close()
        if self._reader_look is not None:
            self._reader_look.cancel()
            self._reader_look = None
        self.held_answers.drop()
        self._remove_cap()
        if self.recorder is not None:
            self.recorder.close()
            self.recorder = None
        self.status = "closed"
        self.wake()
        self.listeners()

    def _remove_cap(self, tries: int = CAP_REMOVAL_TRIES) -> None:
        """Remove the session's cgroup, again a little later while tasks that were just killed still hold it."""
        if self.cap is not None and not self.cap.remove() and tries > 1:
            self.loop.call_later(CAP_REMOVAL_PAUSE, self._remove_cap, tries - 1)

    # -- output -------------------------------------------------------------------------
    def drain(self) -> None:
        """Read whatever output is waiting now (a send in progress looks again at the next turn)."""
        if self.child is not None and self.child.drain():
            self.wake()

    def _ingest(self, data: bytes) -> None:
        offset = self.raw.total
        self.raw.append(data)
        if self.recorder is not None:
            self.recorder.output(data)
        replies = self.replies.scan(data, offset)
        if replies:
            self._hold_answers(replies)
        if self.screen.alternate or (b"\x1b" in data and b"\x1b[?" in data and switches_screen(data)):  # (on the
            # alternate screen, or it may switch to it; a one-byte search first: a longer one cost a flood a sixth
            # of the loop's time)
            data = self._ingest_to_prompt(data)
        for piece in self.screen.pieces(data):
            self._ingest_piece(piece)
        self.last_output = time.monotonic()
        self.listeners()

    def _ingest_to_prompt(self, data: bytes) -> bytes:
        """Take in ``data`` up to our shell's exit marker, if it has one, and return the rest.  Our shell back at
        its prompt with the alternate screen still on means the program that switched to it ended without
        switching back (a curses program killed or crashed): a terminal stays there until ``reset``, and every
        later command's output was left out of the line history (``seq 1 100``: only what the screen showed, in
        a snapshot).  From the prompt on, the output is line text again (see :meth:`ScreenTracker.left_behind`)."""
        at = keyed_marker_at(data, self._marker_key) if self._marker_key else -1
        if at < 0:
            return data
        if at > 0:
            for piece in self.screen.pieces(data[:at]):
                self._ingest_piece(piece)
        if self.screen.alternate:
            self.screen.left_behind()
        return data[at:]

    def _ingest_piece(self, data: bytes) -> None:
        """Into the line history, what of ``data`` the main screen shows as text."""
        drawing = self.screen.split_chunk(data, self.foreground_pgid, self.pid, self.reads_lines)
        if drawing:  # a cursor-addressing program's drawing stays out of the line history
            self.normalizer.suppressed = True
            self._normalize(data[:drawing])
            self.normalizer.suppressed = False
        if drawing < len(data):
            self._normalize(data[drawing:])

    def _normalize(self, data: bytes) -> None:
        text, events = self.normalizer.feed(data)
        self.scrollback.append(text)
        if events:
            self._handle_events(events)

    def _handle_events(self, events: TerminalEvents) -> None:
        op = self.operation
        codes = self._exit_codes(events.exit_markers) if events.exit_markers else None
        if events.exit_markers:  # (a marker with no key is a program's output forging one: it tells nothing)
            self._nested_console_at_prompt = not codes and self._marker_key is not None \
                and any(key and key != self._marker_key for _, key in events.exit_markers)
        if codes:
            self._typed_since_prompt = False
            self.screen.bracketed_paste = False  # our shell at its prompt (its line editor pastes nothing)
            self.screen.cursor_hidden = False  # (what hid it has ended)
            self.last_exit_code = codes[-1]
            if op is not None:
                op.exit_code = codes[-1]
                op.marker_seen = True
                op.prompt_seen()
            else:
                self.exit_code_between = codes[-1]
        if events.bells and op is not None:
            op.bell = True
        if self.screen.after_chunk(events) and op is not None:
            op.left_full_screen_at = self.scrollback.chars_written

    @property
    def marks_prompts(self) -> bool:
        """Whether the program draws our exit-code marker at its prompts (our shell and python session)."""
        return self._marker_key is not None

    def _exit_codes(self, markers: list[tuple[int | None, str]]) -> list[int | None]:
        """The exit codes of the markers our shell set-up printed: those with the session's key.

        The shell draws the key before any command runs and prints it in every marker; the first keyed
        marker, read while the session starts (before any input), tells it.  Markers without it are a
        program's output forging an exit code (``printf '\\e]133;D;0\\a'; read x``): ignored.
        """
        if self._marker_key is None and self._learning_marker_key:
            self._marker_key = next((key for _, key in markers if key), None)
        return [code for code, key in markers if key and key == self._marker_key]

    # -- answers to terminal queries --------------------------------------------------------
    def _hold_answers(self, answers: bytes) -> None:
        """Answer the queries just read once the group that asked reads the terminal (see
        :class:`HeldAnswers`): the send in progress hands them over when it sees the program wait
        (:meth:`deliver_answers`), else a look of their own does.  Without ``/proc``, written at once."""
        if self.probe is None or not self.probe.available:
            self._write_answers(answers)
            return
        self.held_answers.hold(self.foreground_pgid(), answers, time.monotonic())
        if self.operation is None:
            self._look_for_reader_soon(MIN_TICK)

    def deliver_answers(self) -> bool:
        """The foreground group was just seen waiting on the terminal: write the answers it asked for, drop
        the rest.  True when anything was written (the program has input to read first)."""
        if not self.held_answers:
            return False
        self.drain()  # (what it printed before it waited: our shell's prompt marker after its query)
        editor = self.probe is not None and self.pid in self.probe.tty_readers  # (not a child in its group)
        answers = self.held_answers.take(self.foreground_pgid(), editor and not self._typed_since_prompt)
        if answers:
            self._write_answers(answers)
        return bool(answers)

    def _write_answers(self, answers: bytes) -> None:
        if self.operation is not None and self.probe is not None:
            # The answer is input too: a wait counts only once the program has run after it, and it runs on
            # it at once - the send looks closely again, as after its own input.
            self.operation.fence = self.probe.fence_past_answer(self.operation.fence)
            self.operation.look_closely()
        self.write_now(answers)
        self.replies_written += 1

    def _look_for_reader_soon(self, tick: float) -> None:
        if self._reader_look is None:
            self._reader_look = self.loop.call_later(tick, self._look_for_reader, tick)

    def _look_for_reader(self, tick: float) -> None:
        """No send looks at the program: look whether the group that asked reads the terminal now, on a tick
        backing off to :data:`MAX_TICK`; answers held :data:`HOLD_ANSWERS` are dropped."""
        self._reader_look = None
        if not self.held_answers or self.operation is not None or self.probe is None:
            return  # (a send in progress hands them over)
        if not self.running or self.held_answers.expired(time.monotonic()):
            self.held_answers.drop()
            return
        if self.probe.waiting_for_input(Fence(accept_stale=True)) is not None:
            self.deliver_answers()
        if self.held_answers:
            self._look_for_reader_soon(min(tick * 2, MAX_TICK))

    def output_waiting(self) -> bool:
        """Whether the last read left output to read (see :attr:`PtyChild.output_waiting`)."""
        return self.child is not None and self.child.output_waiting

    def _output_read(self) -> None:
        """The loop's reader read output: the send in progress looks now, in this turn (output read by
        :meth:`drain` wakes it for the next turn instead)."""
        if self.operation is not None:
            self.operation.step_now()

    def wake(self) -> None:
        """Output arrived or the session's state changed: the send in progress looks again."""
        if self.operation is not None:
            self.operation.wake()

    # -- input --------------------------------------------------------------------------------
    def write_now(self, data: bytes) -> int:
        """Write what the PTY takes now; returns the bytes written."""
        return self.child.write_now(data) if self.child is not None else 0

    async def write_all(self, data: bytes, deadline: float, stopped: Callable[[], bool] | None = None) -> int:
        """Write ``data``, waiting for room; returns the bytes written (fewer when the session ended,
        ``deadline`` passed or ``stopped()`` said so)."""
        if not self.running or self.child is None:
            return 0
        return await self.child.write_all(data, deadline, stopped)

    def type_input(self, data: bytes) -> None:
        """Type ``data`` into the terminal without waiting, as a person at the keyboard would (less a key that
        would stop the output, as for a send).  A key the terminal makes a signal of (C-c, C-\\, C-z) throws
        away what was typed and not read, and what is still to be typed - by the viewport or by a send: at a
        terminal, nothing typed before the key is read after it (it waited behind a long text a busy program
        did not read)."""
        if self.running and self.child is not None:
            self._typed_since_prompt = True
            self.child.restart_output()
            if self.child.clear_input_for_signal_keys(data):
                self._typing_stopped += 1
                if self.operation is not None:  # (a send's text too: the program it was for is signalled)
                    self.operation.stop_text()
            stops = self._typing_stopped
            self.loop.create_task(self.write_all(self.child.without_output_stop(data), time.monotonic() + 30.0,
                                                 lambda: self._typing_stopped != stops))

    # -- sends -----------------------------------------------------------------------------
    def check_can_send(self) -> None:
        """Raise unless a send may start now."""
        if self.status in ("closing", "closed"):
            raise SessionNotRunningError(
                f"terminal session {self.session_id!r} is closing: open a new session with terminal_open")
        if self.status == "exited":
            raise SessionNotRunningError(
                f"terminal session {self.session_id!r} has exited (status {self.exit_status}): "
                "read its output with terminal_read, then close it with terminal_close")
        if self.reservation is not None:
            raise SessionBusyError(f"terminal session {self.session_id!r} is busy: {self.reservation} holds its "
                                   f"send reservation; {_busy_hint(self.reservation)}, then send again")

    def start_send(self, request: SendRequest, holder: str) -> SendOperation:
        """Take the send reservation now and start writing and waiting; returns the operation."""
        self.check_can_send()
        payload, escape_sent = self._payload(request)  # may refuse bad input: before any change
        by_line = self._typed_line_by_line(request, payload)
        events = request.line_events(payload) if by_line else self._key_events(request, payload)
        if self.child is not None:
            self.child.clear_input_for_signal_keys(payload)
        # A text written in parts goes to the shell, or to a command it runs (see SendOperation.prompt_seen):
        # output not read yet may end with the shell's prompt - it is at it.
        in_parts = bool(payload) and (len(events) > 1 or len(events[0]) > 4096)
        if in_parts:
            self.drain()
        to_command = in_parts and self._typed_since_prompt
        fence = self.probe.fence(accept_stale=not payload) if self.probe else Fence(accept_stale=True)
        reader = fence.pgid or self.foreground_pgid()  # (before the write: a first line may start a program)
        echo = self._echo_to_expect(request)
        written = self.write_now(events[0][:4096]) if payload else 0  # the program starts on it at once
        if self.child is not None:
            self.child.restart_output()
        if payload:
            self._typed_since_prompt = True
            self._nested_console_at_prompt = False
        op = SendOperation(self, request, payload, escape_sent)  # (its output is read only after this returns)
        op.echo_expected = echo
        self.reservation = holder
        self.operation = op
        if self.child is not None:
            self.child.send_began()
        op.start(fence, written, events[1:], to_command, LINE_WAIT if by_line else KEY_EVENT_WAIT, reader)
        return op

    def shows_what_is_typed(self) -> bool:
        """Whether text typed now would be shown: our shell or REPL sits at its prompt (its line editor draws
        what it reads), or the terminal echoes (no password prompt has turned that off).  True when not
        known."""
        if not self._typed_since_prompt:  # (cleared only by our keyed marker)
            return True
        return self.probe is None or self.probe.echoes()

    def _echo_to_expect(self, request: SendRequest) -> str | None:
        """The line our shell or REPL, at its prompt, must show as ``request`` types it (its line editor echoes
        what it reads): a one-line printable text, no keys, that fits on the prompt's row - else None.  A
        command that ends without it shown ran with the terminal's echo off (see ``SendResult.echo_off``)."""
        text = request.text.strip()
        if not text or request.keys or self._typed_since_prompt or self.screen.full_screen or not text.isprintable() \
                or len(self.scrollback.partial_line) + len(request.text) >= self.options.cols - 1:
            return None
        return text

    def _typed_line_by_line(self, request: SendRequest, payload: bytes) -> bool:
        """Whether ``payload`` goes in a line at a time: a multi-line text typed ahead (see
        :meth:`SendRequest.types_ahead`) to a line editor - our shell or REPL at its prompt, or a command that
        takes the keys raw (a shell or REPL started from ours).  Each line is written once whoever read the one
        before - the editor, or the program that line started - waits for input again (see
        :meth:`input_taken`), or after :data:`LINE_WAIT`.  Written at once, the lines after the first waited in
        the terminal's input for the program to read, and a program that flushes its input as it starts
        threw them away: a password prompt (Python's ``getpass``, ``ssh``, ``sudo``) - ``cmd⏎secret`` lost
        ``secret``, and the next command sent became the password.  A line-mode reader (``cat``, ``read``)
        still gets the text in one write."""
        if not request.types_ahead() or payload.startswith(PASTE_START) or self.screen.full_screen \
                or self.probe is None or not self.probe.available:
            return False
        self.drain()  # (our prompt's marker, not read yet, says the shell is at its prompt)
        return not self._typed_since_prompt or self._command_takes_keys_raw()

    def _command_takes_keys_raw(self) -> bool:
        """Whether a command the session's shell (or REPL) started has the terminal and takes the keys raw -
        not a line-mode reader (as ``/proc`` shows; False without it)."""
        probe = self.probe
        return probe is not None and probe.available and self.foreground_pgid() not in (0, self.pid) \
            and not probe.reads_lines()

    def _key_events(self, request: SendRequest, payload: bytes) -> list[bytes]:
        """The payload in the pieces it is written in: one, or - while a command the session started takes the
        keys raw - the text, each key and the Enter, each once the program has taken the one before (read it
        and waited for input again), as a person types (see :meth:`SendRequest.key_events`,
        :meth:`input_taken`).  A program that takes each read as one key event sees them apart: Ink (React for
        the terminal) took ``hello`` and its Enter, read at once, for pasted text - the line was never
        submitted, and the CR went into it.  A program that acts on keys in the background sees the Enter
        after it acted on the text: fzf filters in another thread, and ``42`` sent to it picked the top line
        of the unfiltered list.  The session's own shell and line-mode readers get one write (a multi-line
        text to a line editor goes a line at a time: :meth:`_typed_line_by_line`)."""
        if not self._command_takes_keys_raw():
            return [payload]
        return request.key_events(payload, self.screen.application_cursor)

    async def input_read(self, until: float) -> None:
        """Return once the program has read all the input written to it (or at ``until``)."""
        probe, turns = self.probe, 0
        while probe is not None and self.running and probe.unread_input() > 0 and time.monotonic() < until:
            turns += 1  # (a program waiting in a read takes it within a few turns of the loop; then every 1 ms)
            await asyncio.sleep(0 if turns < 50 else 0.001)

    async def input_taken(self, fence: Fence, until: float) -> None:
        """Return once the program has read all the input written to it since ``fence`` and acted on it: it
        waits for input again (or at ``until``).  Read is not taken: fzf filters what was typed in another
        thread, and an Enter that came as soon as the query was read picked the top line of the old list."""
        await self.input_read(until)
        probe, pause = self.probe, 0.0
        while probe is not None and self.running and time.monotonic() < until \
                and probe.waiting_for_input(fence) is None:
            await asyncio.sleep(pause)
            pause = min(pause + 0.001, 0.01)  # (at once, then a look every few ms)

    def _payload(self, request: SendRequest) -> tuple[bytes, bool]:
        """The bytes to write for ``request``, and whether the caller sent an ESC (the paste brackets are
        ours): pasted or ending in a line feed when the program needs it (:meth:`SendRequest.wants_paste`,
        :meth:`SendRequest.types_ahead`), without a key that would stop the output
        (:meth:`PtyChild.without_output_stop`).  Raises for a bad key, or a line too long for a line-mode
        reader."""
        payload, escape_sent = self._keys_and_text(request)
        return (self.child.without_output_stop(payload) if self.child is not None else payload), escape_sent

    def _keys_and_text(self, request: SendRequest) -> tuple[bytes, bool]:
        screen = self.screen
        # To a full-screen program a line end is the Enter key, a CR, as a terminal pastes it: a line feed is
        # C-j (nano justified the paragraph: three lines of code sent to it became one).
        typed = request.payload(screen.application_cursor, newline=ENTER if screen.full_screen else LINE_FEED)
        if len(typed) > MAX_LINE_MODE_LINE and self.probe is not None and self.probe.reads_lines():
            request.check_lines_fit_line_mode()  # (not when the mode is unknown: a refusal must be sure)
        escape_sent = holds_an_escape_key(typed)
        if screen.full_screen:
            return typed, escape_sent
        if screen.bracketed_paste and request.wants_paste():
            return request.payload(screen.application_cursor, paste=True), escape_sent
        code_block = self.spec.code_block or (python_code_block if self._nested_console_at_prompt else None)
        if screen.bracketed_paste and code_block is not None and not request.keys and code_block(request.text):
            # (ending in a line end, a one-line block is a block: the REPL runs it as it runs a pasted one)
            return request.payload(screen.application_cursor, paste=True, block=True), escape_sent
        if request.types_ahead():
            return request.payload(screen.application_cursor, enter=LINE_FEED), escape_sent
        return typed, escape_sent

    def release(self, op: SendOperation, result: "SendResult | None") -> None:
        """The send ``op`` has finished (with ``result``, None when it failed): give up the reservation."""
        if self.operation is op:
            self.operation = None
            self.reservation = None
            if self.child is not None:
                self.child.send_ended()
        self.last_send_end = self.raw.total
        self.saw_all()
        self.exit_code_between = None
        if result is not None:
            self.last_wait_reason = result.wait_reason
        if self.held_answers:
            self._look_for_reader_soon(MIN_TICK)
        self.listeners()

    def unseen_before(self, line: int) -> tuple[int, int] | None:
        """``(count, offset)`` of the lines still kept that were completed after those the owner was shown and
        before ``line`` (a viewport's first): output that came between two sends - a background command's, a
        thread's - which the viewport, the output produced during a send, does not hold.  ``offset`` is
        terminal_read's for the page that ends with them; None when there are none, or only blank ones (the
        line end a shell writes after an interrupted command)."""
        scrollback = self.scrollback
        first = max(self.seen_lines + 1, scrollback.first_line)
        last = min(line - 1, scrollback.completed_lines)
        if last < first or not any(text.strip() for text in scrollback.iter_lines(first, last)):
            return None
        return last - first + 1, scrollback.total_lines - last

    def saw_page(self, begin: int, end: int) -> None:
        """The owner was shown lines ``begin``..``end`` (a read): when they reach the newest and leave out none
        of those it had not seen, it has now seen them all."""
        scrollback = self.scrollback
        if end >= scrollback.total_lines and begin <= max(self.seen_lines + 1, scrollback.first_line):
            self.saw_all()

    def saw_all(self) -> None:
        """The owner has been shown every line completed so far (a result, a read, a cell's stream)."""
        self.seen_lines = self.scrollback.completed_lines

    def prompt_shown(self) -> tuple[int, str] | None:
        """The terminal's foreground group and the line the cursor is on, when it is past text on the unfinished
        last line of the main screen (a program's prompt, while it waits there); else None."""
        scrollback = self.scrollback
        shown = scrollback.cursor_column > 0 and scrollback.cursor_line > scrollback.completed_lines \
            and not self.screen.full_screen
        return (self.foreground_pgid(), scrollback.partial_line) if shown else None

    # -- size, recording -------------------------------------------------------------------
    def resize(self, rows: int, cols: int) -> None:
        """Set the terminal size: the program gets SIGWINCH, the screen model follows."""
        if self.child is None or self.child.closed:
            raise SessionNotRunningError(f"terminal session {self.session_id!r} is closed")
        self.screen.resize(rows, cols)
        self.scrollback.columns = cols
        self.child.setwinsize(rows, cols)
        self.options = replace(self.options, rows=rows, cols=cols)
        if self.recorder is not None:
            self.recorder.resize(rows, cols)

    # -- the foreground ----------------------------------------------------------------------
    def foreground_pgid(self) -> int:
        """The terminal's foreground process group (0 when not known)."""
        return self.probe.foreground_pgid() if self.probe else 0

    def group_stats(self, pgid: int) -> list[ProcessStat]:
        """Every process of group ``pgid`` in the session's tree (where the terminal's groups live)."""
        tree = subtree_table([self.child.pid]) if self.child is not None else {}
        return [stat for stat in tree.values() if stat.pgrp == pgid]

    def group_members(self, pgid: int) -> list[tuple[int, bool]]:
        """Every process of group ``pgid`` in the session's tree, with whether it still runs."""
        return [(stat.pid, not stat.gone) for stat in self.group_stats(pgid)]

    def reads_lines(self) -> bool:
        """True while the terminal is in canonical mode (no program has taken the keys)."""
        return self.probe.reads_lines() if self.probe else True

    def activity(self) -> tuple[int, int]:
        """Changes whenever output arrives or a watched foreground process exits."""
        return self.scrollback.chars_written, self.child.exits_seen if self.child else 0

    def watch_foreground_exits(self) -> None:
        """Wake the session when any process of the foreground group exits (pidfds)."""
        pgid = self.foreground_pgid()
        if self.child is not None and self.probe is not None and pgid > 0:
            # (not the shell itself: its exit ends the child, whose own pidfd the loop always watches)
            self.child.watch_exits(set(self.probe.members_seen(pgid)) - {self.pid})

    def stop_watching_exits(self) -> None:
        if self.child is not None:
            self.child.stop_watching_exits()

    def wake_program(self) -> None:
        """Continue the session's program, found stopped (C-z, ``SIGTSTP``, ``SIGSTOP``), and its group.

        Nothing else would: it has no shell above it to ``fg`` it.  Were it the session's first process, the
        kernel would ignore the terminal's C-z for it (its group orphaned); under a wrapper (bubblewrap's,
        the python session's ``sh``) its parent is in the same session, and a C-z in a python session stopped
        the REPL for good - as ``suspend -f`` or ``kill -STOP $$`` stops a shell."""
        if self.probe is None:
            return
        try:
            os.killpg(os.getpgid(self.probe.leader_pid), signal_module.SIGCONT)
        except OSError:
            pass

    def discard_input(self) -> None:
        """Throw away the input no program has read."""
        if self.child is not None:
            self.child.discard_input()

    def clear_input_for_interrupt(self) -> bytes | None:
        """Throw away the input no program has read, as the terminal does at its interrupt key (see
        :meth:`PtyChild.clear_input_for_signal_keys`); returns that key (None: the terminal makes no signals
        of keys, and nothing was thrown away)."""
        child = self.child
        key = child.interrupt_key() if child is not None else None
        if child is not None and key is not None:
            child.clear_input_for_signal_keys(key)
        return key

    def interrupt_foreground(self) -> None:
        """SIGINT to the foreground process group, typed as the terminal's interrupt character while the
        terminal makes signals of keys: the kernel then also throws away input typed ahead and not read yet,
        as a terminal does (a kill() while the shell was still reading ``sleep 100`` left ``leep 100`` to run
        as a command, and text queued behind an interrupted command ran after it).  A kill() otherwise (a
        program that took the keys raw, or no room left in the input queue)."""
        key = self.clear_input_for_interrupt()  # (else the key may wait behind input no one reads)
        if key is not None and self.write_now(key) == len(key):
            return
        pgid = self.foreground_pgid()
        if pgid > 0:
            try:
                os.killpg(pgid, signal_module.SIGINT)
            except OSError:
                pass


def _busy_hint(holder: str) -> str:
    """What to do about the send reservation ``holder`` holds ("job j-…", "a foreground send", "start-up")."""
    if holder.startswith("job "):
        return f"wait for it (job_output with jobId {holder[4:]!r}) or stop it (job_kill)"
    if holder == "start-up":
        return "wait for the session to finish starting"
    return "wait for that call to return, or stop its command with terminal_signal SIGINT"
