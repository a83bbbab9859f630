"""A foreground send whose output streams into the cell while it waits (like ``%%bash``)."""
from __future__ import annotations

import codecs
import concurrent.futures
from dataclasses import dataclass
from typing import Callable

from ..mechanism import SendRequest, SendResult, SessionManager
from ..mechanism.output import _UNFINISHED
from .ansi_html import sanitize_stream

#: How often new output is flushed to the cell while waiting (seconds).
FLUSH_INTERVAL = 0.05


@dataclass
class LiveSendOutcome:
    result: SendResult
    interrupted: bool
    streamed_bytes: int
    #: Raw offset up to which output was streamed: pass it as ``resume_from`` to the next send.
    raw_offset: int


class _RawFollower:
    """Follows a session's raw output from an offset; yields sanitised text (colours kept)."""

    def __init__(self, manager: SessionManager, session: object, offset: int, limit: int,
                 write: Callable[[str], None]) -> None:
        self._loop = manager.loop_thread
        self._session = session
        self.offset = offset
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._limit = limit
        self._write = write
        self.streamed = 0
        self._notice_shown = False

    def _grab(self) -> tuple[bytes, int, int]:
        ring = self._session.raw  # type: ignore[attr-defined]
        data, lost = ring.since(self.offset)
        return data, lost, ring.total

    def flush(self, final: bool = False) -> None:
        data, lost, total = self._loop.call(self._grab)
        self.offset = total
        text = self._pending + self._decoder.decode(data, final=final)
        self._pending = ""
        if not final:
            tail = _UNFINISHED.search(text)
            if tail is not None:
                self._pending, text = text[tail.start():], text[: tail.start()]
        out = sanitize_stream(text)
        if lost:
            out = f"\n[... {lost} bytes of output skipped ...]\n" + out
        if not out:
            return
        if self.streamed + len(out) > self._limit:
            if not self._notice_shown:
                self._notice_shown = True
                self._write(f"\n[more output not shown here (over {self._limit} bytes): read it with %term_read]\n")
            return
        self.streamed += len(out)
        self._write(out)


def run_live_send(manager: SessionManager, owner: object, session_id: str, request: SendRequest,
                  write: Callable[[str], None], *, stream_limit: int = 1024 * 1024,
                  holder: str = "a foreground send (%term_send)", show_prompt: bool = True,
                  resume_from: int | None = None) -> LiveSendOutcome:
    """Send in the foreground, streaming output through ``write`` until the wait ends.

    The stream starts with the prompt the program showed (``show_prompt``),
    or, when output arrived after ``resume_from`` (where the previous stream
    ended), with that unseen output.  Ctrl-C (kernel interrupt) interrupts
    the program (SIGINT to its foreground group) and still returns the result
    once it is back.
    """
    loop = manager.loop_thread
    session = manager.session(owner, session_id)

    def begin():  # type: ignore[no-untyped-def]
        offset = session.raw.total
        unseen = resume_from is not None and resume_from < offset
        prompt = "" if unseen else session.scrollback.partial_line
        op = manager.begin_send(owner, session_id, request, holder)
        return op, (resume_from if unseen else offset), prompt

    op, offset, prompt = loop.call(begin)
    follower = _RawFollower(manager, session, offset, stream_limit, write)
    if show_prompt and prompt:
        write(prompt)

    async def wait() -> SendResult:
        return await op.future

    future = loop.submit(wait())
    interrupted = False
    while True:
        try:
            try:
                result = future.result(timeout=FLUSH_INTERVAL)
                break
            except concurrent.futures.TimeoutError:
                follower.flush()
        except KeyboardInterrupt:
            interrupted = True
            loop.call(op.cancel)
    follower.flush(final=True)
    return LiveSendOutcome(result, interrupted, follower.streamed, follower.offset)
