"""One handler per tool: typed arguments in, a typed result out.  They run on the private loop.

The table :data:`HANDLERS` maps each tool name to its handler; the owner
check and argument validation have already happened (in
:class:`~dsh_terminal_magics.tools.terminal_tools.TerminalTools`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Coroutine

from pydantic import BaseModel

from ..jobs import JobHandle, JobOutcome, JobRegistry
from ..mechanism import EnvironmentPolicy, Sandbox, SendOperation, SendRequest, SendResult, SessionManager
from ..mechanism.manager import wait_interruptible
from ..owners import Agent
from .models import (BackgroundSendResult, CloseArgs, CloseResult, ForegroundSendResult, JobKillArgs,
                     JobKillResult, JobOutputArgs, JobOutputResult, ListArgs, OpenArgs, OpenResult, ReadArgs,
                     ReadResult, RecordArgs, RecordResult, ResizeArgs, ResizeResult, ScreenInfo, SendArgsForeground,
                     SessionEntry, SessionList, SignalArgs, SignalResult, UnseenOutput)
from .render import body_budget, job_meta, lines_meta, unread_note, unseen_note, unsent_note, utf8_size

JOB_KIND = "pty-send"


@dataclass
class ToolContext:
    """What handlers work with: the layers below and the limits of this tool set."""

    manager: SessionManager
    jobs: JobRegistry
    max_result_bytes: int
    environment: Callable[[Agent], EnvironmentPolicy]
    #: The directory ``agent``'s recordings are confined to (None: the notebook user, unconfined).
    recordings: Callable[[Agent], "str | None"]
    #: How ``agent``'s sessions are sandboxed.
    sandbox: Callable[[Agent], Sandbox]


def send_request(a: SendArgsForeground, cap: int) -> SendRequest:
    """The mechanism request for validated send arguments.  With named keys, ``submit`` defaults to false: a
    send of ``Down`` to a menu presses Down, not Down and then Enter (which picks the item below)."""
    keys = tuple(getattr(a, "keys", None) or ())
    submit = a.submit if a.submit is not None else not keys
    return SendRequest(a.text, submit, float(a.timeout), float(a.idle), viewport_bytes=cap, keys=keys)


def foreground_result(r: SendResult) -> ForegroundSendResult:
    """The tool result of a finished foreground send."""
    screen = None
    if r.screen is not None:
        screen = ScreenInfo(rows=r.screen.rows, cols=r.screen.cols, cursor_row=r.screen.cursor_row,
                            cursor_col=r.screen.cursor_col)
    result = ForegroundSendResult(viewport=r.viewport, wait_reason=r.wait_reason,  # type: ignore[arg-type]
                                  session_status=r.session_status,  # type: ignore[arg-type]
                                  truncated=r.viewport_truncated, exit_code=r.exit_code,
                                  bell=True if r.bell else None, screen=screen, unsent=r.unsent or None,
                                  unseen=None if r.unseen is None else UnseenOutput(lines=r.unseen[0],
                                                                                    offset=r.unseen[1]),
                                  echo_off=True if r.echo_off else None, unread=r.unread or None)
    return result.with_extras(r.raw_output, r.screen.text() if r.screen is not None else None, r.cancelled,
                              r.text_cut_by)


async def terminal_open(ctx: ToolContext, a: OpenArgs, agent: Agent) -> OpenResult:
    info = await ctx.manager.open(agent, a.type, name=a.name, cwd=a.cwd, environment=ctx.environment(agent),
                                  sandbox=lambda: ctx.sandbox(agent))
    return OpenResult(session_id=info.session_id, name=info.name, type=info.type, pid=info.pid,
                      status=info.status, motd=info.motd)


async def terminal_send(ctx: ToolContext, a: SendArgsForeground, agent: Agent) -> BaseModel:
    request = send_request(a, ctx.max_result_bytes)
    if getattr(a, "run_in_background", False):
        return await _start_background(ctx, a, agent, request)
    op = ctx.manager.begin_send(agent, a.session_id, request, "a foreground send")
    return foreground_result(await wait_interruptible(op))


async def _start_background(ctx: ToolContext, a: SendArgsForeground, agent: Agent,
                            request: SendRequest) -> BackgroundSendResult:
    ctx.manager.preflight_send(agent, a.session_id, request)

    def run(job_id: str) -> JobHandle:  # on the loop, before the job id is returned
        op = ctx.manager.begin_send(agent, a.session_id, request, holder=f"job {job_id}")
        return JobHandle(cancel=op.cancel, done=_job_outcome(op), read_output=op.read_output)

    label = f"{a.session_id}: {job_label(a.text)}"
    job_id = await ctx.jobs.start(JOB_KIND, label, agent, ctx.max_result_bytes, run)
    return BackgroundSendResult(job_id=job_id)


#: The most characters of a send's text a job's label shows.
JOB_LABEL_CHARS = 60


def job_label(text: str) -> str:
    """A job's label from its send's text: the first line, cut at :data:`JOB_LABEL_CHARS` (a label is listed
    whole: it held the whole text, 37 KB of it in ``%term_jobs``)."""
    first, _, rest = text.partition("\n")
    more = rest.count("\n") + 1 if rest else 0
    label = first[:JOB_LABEL_CHARS] + ("…" if len(first) > JOB_LABEL_CHARS else "")
    return (label or "(input)") + (f" (+{more} more line{'s' if more > 1 else ''})" if more else "")


async def _job_outcome(op: SendOperation) -> JobOutcome:
    r = await op.future
    detail = f"waitReason={r.wait_reason} sessionStatus={r.session_status} exitCode={r.exit_code}"
    if r.unsent:
        detail += f" - {unsent_note(r.unsent, r.text_cut_by)}"
    if r.unread:
        detail += f" - {unread_note(r.unread)}"
    if r.unseen is not None:
        detail += f" - {unseen_note(r.unseen[0], None)}"
    return JobOutcome("killed" if op.cancel_requested else "completed", detail)


async def terminal_read(ctx: ToolContext, a: ReadArgs, agent: Agent) -> ReadResult:
    page = await ctx.manager.read(agent, a.session_id, a.offset, a.count)
    lines, begin, truncated = list(page.lines), page.line_begin, page.truncated
    budget = body_budget([lines_meta(page.line_begin, page.line_end, page.total_lines)], ctx.max_result_bytes)
    size = sum(utf8_size(line) + 1 for line in lines)
    while lines and size > budget:
        size -= utf8_size(lines.pop(0)) + 1
        begin += 1
        truncated = True
    return ReadResult(text="\n".join(lines), total_lines=page.total_lines, line_begin=begin,
                      line_end=page.line_end, truncated=truncated)


async def terminal_signal(ctx: ToolContext, a: SignalArgs, agent: Agent) -> SignalResult:
    return SignalResult(target_pgid=await ctx.manager.signal(agent, a.session_id, a.signal))


async def terminal_close(ctx: ToolContext, a: CloseArgs, agent: Agent) -> CloseResult:
    session = ctx.manager.session(agent, a.session_id)
    closed = await ctx.manager.close(agent, a.session_id)
    return CloseResult(session_id=a.session_id, outcome="closed" if closed else "already-closing",
                       not_ended=session.left_running or None)


async def terminal_list(ctx: ToolContext, a: ListArgs, agent: Agent) -> SessionList:
    infos = await ctx.manager.list(agent)
    return SessionList([SessionEntry(session_id=i.session_id, name=i.name, type=i.type, pid=i.pid,
                                     status=i.status) for i in infos])


async def job_output(ctx: ToolContext, a: JobOutputArgs, agent: Agent) -> JobOutputResult:
    def budget(status: str, detail: str | None) -> int:
        return max(0, body_budget(job_meta(a.job_id, status, detail), ctx.max_result_bytes))

    read = await ctx.jobs.output(agent, a.job_id, budget)
    result = JobOutputResult(job_id=read.job_id, status=read.status, output=read.output, detail=read.detail)
    result._more = read.more
    return result


async def job_kill(ctx: ToolContext, a: JobKillArgs, agent: Agent) -> JobKillResult:
    return JobKillResult(job_id=a.job_id, status=await ctx.jobs.kill(agent, a.job_id))


async def terminal_resize(ctx: ToolContext, a: ResizeArgs, agent: Agent) -> ResizeResult:
    rows, cols = await ctx.manager.resize(agent, a.session_id, a.rows, a.cols)
    return ResizeResult(session_id=a.session_id, rows=rows, cols=cols)


async def terminal_record(ctx: ToolContext, a: RecordArgs, agent: Agent) -> RecordResult:
    path, events, truncated = await ctx.manager.record(agent, a.session_id, a.action, a.path,
                                                       ctx.recordings(agent))
    return RecordResult(session_id=a.session_id, action=a.action, path=path, events=events, truncated=truncated)


Handler = Callable[[ToolContext, Any, Agent], Coroutine[Any, Any, BaseModel]]
#: Every tool's handler, by tool name.
HANDLERS: dict[str, Handler] = {
    "terminal_open": terminal_open, "terminal_send": terminal_send, "terminal_read": terminal_read,
    "terminal_signal": terminal_signal, "terminal_close": terminal_close, "terminal_list": terminal_list,
    "job_output": job_output, "job_kill": job_kill, "terminal_resize": terminal_resize,
    "terminal_record": terminal_record,
}
