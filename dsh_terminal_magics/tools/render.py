"""Capped text rendering: what a model sees, never more than ``maxResultBytes`` UTF-8 bytes.

Pure functions.  A rendered result is one metadata line (``[wait: …]``,
``[session: …]``, ``[lines: a-b of n]``, job status …) and a body.  When the
whole does not fit, the body is cut (keeping its newest part for terminal
views, its start otherwise), the marker ``[output truncated]`` is added, and
metadata is kept in preference to the body; only at caps too small for all
metadata plus the marker are the lowest-priority metadata items dropped.
Cuts never split a UTF-8 character.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from pydantic import BaseModel

from ..vocabulary import MAX_READ_LINES, TextCut
from .models import (BackgroundSendResult, CloseResult, ForegroundSendResult, JobKillResult, JobOutputResult,
                     OpenResult, ReadResult, RecordResult, ResizeResult, SessionEntry, SessionList, SignalResult)

MARKER = "[output truncated]"


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def clean_text(text: str) -> str:
    """Replace lone surrogates so the result is always valid UTF-8."""
    return text.encode("utf-8", "replace").decode("utf-8")


def truncate_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` within ``max_bytes`` UTF-8 bytes."""
    if max_bytes <= 0:
        return ""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", "ignore")


def truncate_utf8_tail(text: str, max_bytes: int) -> str:
    """The longest suffix of ``text`` within ``max_bytes`` UTF-8 bytes."""
    if max_bytes <= 0:
        return ""
    data = text.encode("utf-8")
    return data[max(0, len(data) - max_bytes):].decode("utf-8", "ignore")


def body_budget(meta: Sequence[str], cap: int) -> int:
    """Bytes left for the body when all of ``meta`` and the marker are shown."""
    return cap - utf8_size(" ".join(meta)) - 2 - utf8_size(MARKER)


def render_capped(meta: Sequence[str], body: str, cap: int, *, keep_tail: bool = False,
                  cut: bool = False) -> str:
    """Render ``meta`` (priority order) and ``body`` in at most ``cap`` bytes.

    ``cut`` says the body is already incomplete (the marker must show).
    """
    meta = [clean_text(m) for m in meta]
    body = clean_text(body)
    header = " ".join(meta)
    whole = header + ("\n" + body if body else "")
    if not cut and utf8_size(whole) <= cap:
        return whole
    for keep in range(len(meta), 0, -1):
        header = " ".join(meta[:keep])
        fixed = utf8_size(header) + 1 + utf8_size(MARKER)
        if fixed <= cap:
            break
    else:
        return truncate_utf8(header, cap)
    room = cap - fixed - 1
    if keep_tail:
        piece = truncate_utf8_tail(body, room)
        return f"{header}\n{MARKER}" + (f"\n{piece}" if piece else "")
    piece = truncate_utf8(body, room)
    return f"{header}\n" + (f"{piece}\n" if piece else "") + MARKER


def lines_meta(begin: int, end: int, total: int) -> str:
    """The metadata item of a page of lines."""
    return f"[lines: {begin}-{end} of {total}]"


def unsent_note(unsent: int, cut_by: TextCut | None = None) -> str:
    """What to tell about input a send never wrote: the program stopped reading and the wait ended, or
    (``cut_by``, see :data:`~dsh_terminal_magics.vocabulary.TextCut`) the text was stopped."""
    if cut_by == "signal":
        return (f"input cut by the interrupt or signal: the last {unsent} bytes of the input were not written, "
                "and what the program had not read yet was thrown away")
    if cut_by == "program_ended":
        return (f"input cut: the program the input was for ended before reading it all; its last {unsent} bytes "
                "were not written, and what it had not read yet was thrown away (not left to the shell)")
    return (f"input cut: the last {unsent} bytes of the input were not written (the program did not read them "
            "before the wait ended); the part written waits in the terminal's input, its last line maybe cut "
            "short - once the program has read the rest (a send with no text waits for that), send keys C-u to "
            "discard a cut line (or C-c to drop what is left) before sending more")


def not_ended_note(pids: Sequence[int] | None) -> list[str]:
    """The line a close adds for processes it could not end (none when there are none)."""
    if not pids:
        return []
    return [f"not ended: pid {', '.join(map(str, pids))} - another user's processes (started with sudo?), which "
            "the kernel may not signal: they keep running; end them as that user (sudo kill PID)"]


def job_meta(job_id: str, status: str, detail: str | None) -> list[str]:
    """The metadata items of a job read."""
    meta = [f"[job: {job_id}]", f"[status: {status}]"]
    if detail:
        meta.append(f"[detail: {detail}]")
    return meta


def _foreground(r: ForegroundSendResult, cap: int) -> str:
    meta = [f"[wait: {r.wait_reason}]", f"[session: {r.session_status}]"]
    if r.exit_code is not None:
        meta.append(f"[exit: {r.exit_code}]")
    if r.screen is not None:
        meta.append(f"[screen: {r.screen.rows}x{r.screen.cols} cursor {r.screen.cursor_row},{r.screen.cursor_col}]")
    if r.bell:
        meta.append("[bell]")
    if r.unsent:
        meta.append(f"[{unsent_note(r.unsent, r.text_cut_by)}]")
    if r.unseen is not None:
        meta.append(f"[{unseen_note(r.unseen.lines, r.unseen.offset)}]")
    if r.echo_off:
        meta.append(f"[{ECHO_OFF_NOTE}]")
    if r.unread:
        meta.append(f"[{unread_note(r.unread)}]")
    return render_capped(meta, r.viewport, cap, keep_tail=True, cut=r.truncated)


#: What to tell when the shell ran a command without showing it as typed (``echoOff``).
ECHO_OFF_NOTE = ("echo off: the command ran but was not shown as typed - a program left the terminal with its "
                 "echo off (stty -echo, or a password prompt or full-screen program that did not restore it); "
                 "send `stty sane` to turn it back on (a command typed while it is off is not shown either)")


def unread_note(unread: int) -> str:
    """What to tell about input written that no program has read when the wait ended (``unread``)."""
    return (f"unread: no program has read the last {unread} bytes typed - the command running now does not "
            "read the terminal (or is busy); they wait for whoever reads next (the shell, once it ends); "
            "send keys C-c to drop them and stop the command")


def unseen_note(lines: int, offset: int | None) -> str:
    """What to tell about output that came between two looks at a session (see ``UnseenOutput``); with no
    ``offset``, about a job's send (the job's output is read later: an offset would be stale)."""
    told = f"unseen: {lines} line{'s' if lines != 1 else ''} of output came after your last result and before "
    if offset is None:
        return told + "this job's send, not in its output (terminal_read shows the session's lines)"
    count = min(lines, MAX_READ_LINES)
    return (told + f"this send, not shown below - terminal_read with offset {offset}, count {count} shows "
            + ("it" if lines == 1 else "them" if count == lines else f"the newest {count}"))


def _open(r: OpenResult, cap: int) -> str:
    meta = [f"sessionId: {r.session_id}", f"status: {r.status}", f"type: {r.type}"]
    meta += [f"pid: {r.pid}"] if r.pid is not None else []
    meta += [f"name: {r.name}"] if r.name is not None else []
    return render_capped(meta, r.motd, cap)


def _record(r: RecordResult, cap: int) -> str:
    meta = [f"sessionId: {r.session_id}", f"recording: {r.action}"]
    if r.action == "stop":
        meta.append(f"events: {r.events}")
    if r.truncated:
        meta.append("[truncated: the recording stopped growing at its size cap]")
    return render_capped(meta, r.path, cap)


def _session_line(s: SessionEntry) -> str:
    parts = [s.session_id, f"type={s.type}", f"status={s.status}"]
    if s.pid is not None:
        parts.append(f"pid={s.pid}")
    if s.name is not None:
        parts.append(f"name={s.name}")
    return " ".join(parts)


_RENDERERS: dict[type, Callable[[Any, int], str]] = {
    ForegroundSendResult: _foreground,
    BackgroundSendResult: lambda r, cap: render_capped(
        [f"jobId: {r.job_id}"], "running in the background: collect its output with job_output, stop it with "
        "job_kill", cap),
    OpenResult: _open,
    ReadResult: lambda r, cap: render_capped([lines_meta(r.line_begin, r.line_end, r.total_lines)], r.text, cap,
                                             keep_tail=True, cut=r.truncated),
    SignalResult: lambda r, cap: render_capped([f"delivered: true targetPgid: {r.target_pgid}"], "", cap),
    CloseResult: lambda r, cap: render_capped([f"sessionId: {r.session_id}", f"outcome: {r.outcome}",
                                               *not_ended_note(r.not_ended)], "", cap),
    SessionList: lambda r, cap: render_capped([f"[sessions: {len(r.root)}]"],
                                              "\n".join(_session_line(s) for s in r.root), cap),
    JobOutputResult: lambda r, cap: render_capped(job_meta(r.job_id, r.status, r.detail), r.output, cap,
                                                  cut=r._more),
    ResizeResult: lambda r, cap: render_capped([f"sessionId: {r.session_id}", f"size: {r.rows}x{r.cols}"], "", cap),
    RecordResult: _record,
    JobKillResult: lambda r, cap: render_capped([f"[job: {r.job_id}]", f"[status: {r.status}]"], "", cap),
}


def result_text(result: BaseModel, cap: int) -> str:
    """Render any tool result as the capped text a model sees."""
    renderer = _RENDERERS.get(type(result))
    if renderer is None:
        raise TypeError(f"not a tool result: {type(result).__name__}")
    return renderer(result, cap)
