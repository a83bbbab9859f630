"""Tools layer (the seed's ``tool-terminal``): the model-facing terminal tools.

:class:`TerminalTools` validates every call against the pydantic argument
models (the same models the schemas come from), fences it by the exact
initiating :class:`~dsh_terminal_magics.Agent`, runs it through the
mechanism and jobs layers, and returns a typed result (:meth:`call`) or the
capped text a model sees (:meth:`call_text`).  It never touches a PTY.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable

from pydantic import BaseModel, ValidationError

from ..errors import InvalidArgumentError, TerminalError
from ..jobs import JobHandle, JobOutcome, JobRegistry
from ..mechanism import SendOperation, SendRequest, SessionManager, SessionOptions
from ..owners import Agent
from .config import ToolsConfig, load_config
from .policies import (Deny, Policy, PolicyDenied, PolicyError, PolicyOutcome, Replace, Rewrite, ShortCircuit,
                       ToolCall, check_content)
from .models import (BackgroundSendResult, CloseResult, ForegroundSendResult, JobKillResult, JobOutputResult,
                     OpenResult, ReadResult, RecordResult, ResizeResult, ScreenInfo, SessionEntry, SessionList,
                     tool_models,
                     SignalResult)
from .render import body_budget, render_capped, utf8_size
from .schemas import build_schemas

PROMPT_SECTION_NAME = "tool:pty"
PROMPT_SECTION_ORDER = 106
PROMPT_SECTION_TEXT = (
    "Use a terminal session only when work needs persistent terminal state or interactive stdin; prefer "
    "shell/read/write/edit for bounded one-shot operations. Track every terminal session id and close sessions "
    "that no longer matter. An inferred_idle or timeout result does not prove the foreground command exited."
)
JOB_KIND = "pty-send"


class _CallContext:
    """Per-call state the calling thread may need on interrupt."""

    def __init__(self) -> None:
        self.operation: SendOperation | None = None


class TerminalTools:
    """The six terminal tools plus ``job_output`` / ``job_kill`` for one set of agents.

    ``config`` keys: ``enableRunInBackground`` (default true), ``maxResultBytes``
    (default 262144, a safe integer >= 64), validated here.  ``manager`` and
    ``jobs`` may be shared; by default each tool set has its own.
    """

    def __init__(self, config: dict[str, Any] | ToolsConfig | None = None, *,
                 manager: SessionManager | None = None, jobs: JobRegistry | None = None,
                 workspace_root: str | None = None, session_options: SessionOptions | None = None) -> None:
        self.config = load_config(config)
        self.manager = manager or SessionManager(workspace_root=workspace_root, options=session_options)
        self.jobs = jobs or JobRegistry(self.manager.loop_thread)
        self.jobs.declare_kind(JOB_KIND)
        self._loop = self.manager.loop_thread
        #: Policies around every call, in order (see :meth:`add_policy`).
        self.policies: list[Policy] = []
        #: ``fn(call, result, error)`` after every call (cards use this); they never change results.
        self.observers: list[Callable[[ToolCall, Any, BaseException | None], None]] = []

    @property
    def max_result_bytes(self) -> int:
        return self.config.max_result_bytes

    # -- public API -------------------------------------------------------------------
    def call(self, name: str, args: dict[str, Any] | None = None, *, agent: Agent | None = None) -> BaseModel:
        """Run tool ``name``; returns its typed result or raises :class:`TerminalError`.

        Ctrl-C (a kernel interrupt) during a foreground send interrupts the
        program too (SIGINT to its foreground group) before propagating.
        """
        parsed = self._check(name, args, agent)
        assert agent is not None
        if self.policies or self.observers:
            return self._call_with_policies(name, parsed, agent)
        return self._execute(name, parsed, agent)

    def _execute(self, name: str, parsed: BaseModel, agent: Agent) -> BaseModel:
        if name == "terminal_send" and not getattr(parsed, "run_in_background", False):
            return self._foreground_send(parsed, agent)
        ctx = _CallContext()

        async def interrupt() -> None:
            op = ctx.operation
            if op is not None and not op.done:
                op.cancel()
                await op.future

        return self._loop.run(self._dispatch(name, parsed, agent, ctx), on_interrupt=interrupt)

    def _foreground_send(self, a: Any, agent: Agent) -> ForegroundSendResult:
        """The hot path: one hop into the loop to start, one hop back with the result."""
        started: list[SendOperation] = []

        def start() -> Any:
            started.append(self.manager.begin_send(agent, a.session_id, self._request(a), "a foreground send"))
            return started[0].future

        r = self._loop.call_and_wait(start, on_interrupt=lambda: _cancel_first(started))
        return foreground_result(r)

    async def acall(self, name: str, args: dict[str, Any] | None = None, *,
                    agent: Agent | None = None) -> BaseModel:
        """:meth:`call` for ``await`` in a cell (policies, which are plain functions, run in a worker thread)."""
        if self.policies or self.observers:
            return await asyncio.to_thread(self.call, name, args, agent=agent)
        return await self._loop.arun(self._call(name, args, agent, _CallContext()))

    def call_text(self, name: str, args: dict[str, Any] | None = None, *,
                  agent: Agent | None = None) -> str | list[dict[str, Any]]:
        """Run tool ``name`` and return the capped text a model sees; errors come back as text.

        A policy that supplies a list of content blocks gets that list back, shape kept.
        """
        try:
            return self.render(self.call(name, args, agent=agent))
        except TerminalError as exc:
            return self.render_error(exc)

    async def acall_text(self, name: str, args: dict[str, Any] | None = None, *,
                         agent: Agent | None = None) -> str | list[dict[str, Any]]:
        try:
            return self.render(await self.acall(name, args, agent=agent))
        except TerminalError as exc:
            return self.render_error(exc)

    # -- policies ----------------------------------------------------------------------------
    def add_policy(self, policy: Policy | None = None, *, name: str | None = None, before: Any = None,
                   around: Any = None, after: Any = None, tools: Iterable[str] | None = None) -> Policy:
        """Register a :class:`Policy` (or build one from hooks); policies run in registration order."""
        if policy is None:
            if not name:
                raise InvalidArgumentError("a policy needs a name (used in denials and errors)")
            policy = Policy(name, before, around, after, frozenset(tools) if tools is not None else None)
        if not isinstance(policy, Policy):
            raise InvalidArgumentError(f"add_policy expects a Policy, got {type(policy).__name__}")
        self.policies.append(policy)
        return policy

    def _call_with_policies(self, name: str, parsed: BaseModel, agent: Agent) -> Any:
        call = ToolCall(name, parsed.model_dump(by_alias=True), agent)
        try:
            result = self._run_policies(call, parsed)
        except BaseException as exc:
            self._notify(call, None, exc)
            raise
        self._notify(call, result, None)
        return result

    def _run_policies(self, call: ToolCall, parsed: BaseModel) -> Any:
        active = [p for p in self.policies if p.applies(call.name)]
        for policy in active:
            if policy.before is None:
                continue
            verdict = _hook(policy, "before", policy.before, call)
            if verdict is None:
                continue
            if isinstance(verdict, Deny):
                raise PolicyDenied(policy.name, verdict.reason)
            if isinstance(verdict, Rewrite):
                try:
                    parsed = self._validate(call.name, verdict.args)
                except TerminalError as exc:
                    raise PolicyError(f"policy {policy.name!r} rewrote the arguments into invalid ones: {exc}") from None
                call = ToolCall(call.name, parsed.model_dump(by_alias=True), call.agent)
                continue
            if isinstance(verdict, ShortCircuit):
                content = check_content(policy.name, "before", verdict.result)
                return self._after(active, call, PolicyOutcome(policy=policy.name, outcome="short-circuit",
                                                                content=content))
            raise PolicyError(f"policy {policy.name!r} before returned {type(verdict).__name__}: return None, "
                              "Deny(reason), Rewrite(args) or ShortCircuit(result)")
        final = parsed

        def execute() -> Any:
            return self._execute(call.name, final, call.agent)

        for policy in reversed([p for p in active if p.around is not None]):
            execute = _wrap_around(policy, call, execute)
        return self._after(active, call, execute())

    def _after(self, active: list[Policy], call: ToolCall, result: Any) -> Any:
        for policy in active:
            if policy.after is None:
                continue
            verdict = _hook(policy, "after", policy.after, call, result)
            if verdict is None:
                continue
            if not isinstance(verdict, Replace):
                raise PolicyError(f"policy {policy.name!r} after returned {type(verdict).__name__}: return None "
                                  "or Replace(result)")
            result = PolicyOutcome(policy=policy.name, outcome="replaced",
                                   content=check_content(policy.name, "after", verdict.result))
        return result

    def _notify(self, call: ToolCall, result: Any, error: BaseException | None) -> None:
        for observer in list(self.observers):
            try:
                observer(call, result, error)
            except Exception:  # a display hook must never break a call
                pass

    def schemas(self, format: str = "openai", include: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Tool schemas in ``"openai"``, ``"anthropic"`` or ``"json-schema"`` form, optionally filtered."""
        return build_schemas(self.models, format, include=include)

    def system_prompt_sections(self) -> list[dict[str, Any]]:
        """The fixed guidance section: ``[{"name": "tool:pty", "order": 106, "text": …}]``."""
        return [{"name": PROMPT_SECTION_NAME, "order": PROMPT_SECTION_ORDER, "text": PROMPT_SECTION_TEXT}]

    def render(self, result: Any) -> str | list[dict[str, Any]]:
        """The capped text of a result (a policy's block list is returned as is)."""
        if isinstance(result, PolicyOutcome):
            content = result.content
            if isinstance(content, list):
                return content
            if isinstance(content, BaseModel):
                return result_text(content, self.max_result_bytes)
            return render_capped([f"[policy: {result.policy}]", f"[{result.outcome}]"], content,
                                 self.max_result_bytes)
        return result_text(result, self.max_result_bytes)

    def render_error(self, exc: BaseException) -> str:
        if isinstance(exc, PolicyDenied):
            return render_capped(["[denied]", f"[policy: {exc.policy}]"], exc.reason, self.max_result_bytes)
        return render_capped(["[error]"], str(exc), self.max_result_bytes)

    def close_owner(self, agent: Agent) -> None:
        """Close every session and job of ``agent`` (used by ``with Agent(...)`` scopes)."""
        self.jobs.close_owner(agent)
        self.manager.close_owner(agent)

    async def aclose_owner(self, agent: Agent) -> None:
        await self.jobs.aclose_owner(agent)
        await self.manager.aclose_owner(agent)

    def shutdown(self) -> None:
        """Stop every job and close every session of every agent."""
        if self._loop.thread.is_alive():
            self.jobs.close_owner(None)
            self.manager.shutdown()

    # -- dispatch (runs on the private loop) ----------------------------------------------
    def _check(self, name: str, args: dict[str, Any] | None, agent: Agent | None) -> BaseModel:
        """Owner present and an Agent, tool known, arguments valid (pure: runs in the caller)."""
        if agent is None:
            raise TerminalError("terminal tools require an initiating agent")
        if not isinstance(agent, Agent):
            raise InvalidArgumentError(f"agent must be an Agent object, got {type(agent).__name__}: "
                                       "create one with Agent('name') and pass the same object every time")
        parsed = self._validate(name, args)
        agent._bind(self)
        return parsed

    async def _call(self, name: str, args: dict[str, Any] | None, agent: Agent | None,
                    ctx: _CallContext) -> BaseModel:
        parsed = self._check(name, args, agent)
        assert agent is not None
        return await self._dispatch(name, parsed, agent, ctx)

    async def _dispatch(self, name: str, parsed: BaseModel, agent: Agent, ctx: _CallContext) -> BaseModel:
        handler = getattr(self, "_" + name)
        return await handler(parsed, agent, ctx)

    @property
    def models(self) -> dict[str, type[BaseModel]]:
        """The argument model of every tool under the current config (the schemas come from these)."""
        return tool_models(self.config.enable_run_in_background, self.config.enable_terminal_extensions)

    def _validate(self, name: str, args: dict[str, Any] | None) -> BaseModel:
        models = self.models
        if not isinstance(name, str) or name not in models:
            raise InvalidArgumentError(f"unknown tool {name!r}: the tools are {', '.join(models)}")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise InvalidArgumentError(f"{name}: arguments must be a JSON object (dict), got {type(args).__name__}")
        model = models[name]
        if name == "terminal_send" and not self.config.enable_run_in_background and "run_in_background" in args:
            raise InvalidArgumentError(
                "terminal_send: undeclared argument 'run_in_background': background sends are disabled "
                "(enableRunInBackground is false); send in the foreground")
        try:
            return model.model_validate(args)
        except ValidationError as exc:
            raise InvalidArgumentError(describe_validation_error(name, model, exc)) from None

    async def _terminal_open(self, a: Any, agent: Agent, ctx: _CallContext) -> OpenResult:
        info = await self.manager.aspawn(agent, a.type, name=a.name, cwd=a.cwd)
        return OpenResult(session_id=info.session_id, name=info.name, type=info.type, pid=info.pid,
                          status=_status(info.status), motd=info.motd)

    def _request(self, a: Any) -> SendRequest:
        return SendRequest(a.text, a.submit, float(a.timeout), float(a.idle),
                           viewport_chars=self.max_result_bytes, keys=tuple(getattr(a, "keys", None) or ()))

    async def _terminal_send(self, a: Any, agent: Agent, ctx: _CallContext) -> BaseModel:
        if getattr(a, "run_in_background", False):
            return await self._start_background(a, agent)
        op = await self.manager.astart_send(agent, a.session_id, self._request(a), "a foreground send")
        ctx.operation = op
        return foreground_result(await op.future)

    async def _start_background(self, a: Any, agent: Agent) -> BackgroundSendResult:
        request = self._request(a)
        self.manager.preflight_send(agent, a.session_id, request)

        def run(job_id: str) -> JobHandle:  # on the loop, before the job id is returned
            op = self.manager.begin_send(agent, a.session_id, request, holder=f"job {job_id}")
            return JobHandle(cancel=op.cancel, done=_job_outcome(op), read_output=op.read_output)

        label = f"{a.session_id}: {a.text or '(input)'}"
        job_id = await self.jobs.astart(JOB_KIND, label, agent, self.max_result_bytes, run)
        return BackgroundSendResult(job_id=job_id)

    async def _terminal_read(self, a: Any, agent: Agent, ctx: _CallContext) -> ReadResult:
        page = await self.manager.aread(agent, a.session_id, a.offset, a.count)
        lines, begin, truncated = list(page.lines), page.line_begin, page.truncated
        budget = body_budget([_lines_meta(page.line_begin, page.line_end, page.total_lines)], self.max_result_bytes)
        size = sum(utf8_size(line) + 1 for line in lines)
        while lines and size > budget:
            size -= utf8_size(lines.pop(0)) + 1
            begin += 1
            truncated = True
        return ReadResult(text="\n".join(lines), total_lines=page.total_lines, line_begin=begin,
                          line_end=page.line_end, truncated=truncated)

    async def _terminal_signal(self, a: Any, agent: Agent, ctx: _CallContext) -> SignalResult:
        pgid = await self.manager.asignal(agent, a.session_id, a.signal)
        return SignalResult(target_pgid=pgid)

    async def _terminal_close(self, a: Any, agent: Agent, ctx: _CallContext) -> CloseResult:
        closed = await self.manager.akill(agent, a.session_id)
        return CloseResult(session_id=a.session_id, outcome="closed" if closed else "already-closing")

    async def _terminal_list(self, a: Any, agent: Agent, ctx: _CallContext) -> SessionList:
        infos = await self.manager.alist(agent)
        return SessionList([SessionEntry(session_id=i.session_id, name=i.name, type=i.type, pid=i.pid,
                                         status=_status(i.status)) for i in infos])

    async def _job_output(self, a: Any, agent: Agent, ctx: _CallContext) -> JobOutputResult:
        def budget(status: str, detail: str | None) -> int:
            return max(0, body_budget(_job_meta(a.job_id, status, detail), self.max_result_bytes))

        read = await self.jobs.aoutput(agent, a.job_id, budget)
        result = JobOutputResult(job_id=read.job_id, status=read.status, output=read.output, detail=read.detail)
        result._more = read.more
        return result

    async def _terminal_resize(self, a: Any, agent: Agent, ctx: _CallContext) -> ResizeResult:
        rows, cols = await self.manager.aresize(agent, a.session_id, a.rows, a.cols)
        return ResizeResult(session_id=a.session_id, rows=rows, cols=cols)

    async def _terminal_record(self, a: Any, agent: Agent, ctx: _CallContext) -> RecordResult:
        path, events = await self.manager.arecord(agent, a.session_id, a.action, a.path)
        return RecordResult(session_id=a.session_id, action=a.action, path=path, events=events)

    async def _job_kill(self, a: Any, agent: Agent, ctx: _CallContext) -> JobKillResult:
        status = await self.jobs.akill(agent, a.job_id)
        return JobKillResult(job_id=a.job_id, status=status)


def _hook(policy: Policy, hook: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except TerminalError:
        raise
    except Exception as exc:
        raise PolicyError(f"policy {policy.name!r} {hook} raised {type(exc).__name__}: {exc}") from exc


def _wrap_around(policy: Policy, call: ToolCall, inner: Callable[[], Any]) -> Callable[[], Any]:
    def wrapped() -> Any:
        value = _hook(policy, "around", policy.around, call, inner)  # type: ignore[arg-type]
        if isinstance(value, BaseModel):
            return value
        return PolicyOutcome(policy=policy.name, outcome="around", content=check_content(policy.name, "around",
                                                                                          value))
    return wrapped


def foreground_result(r: Any) -> ForegroundSendResult:
    screen = None
    if r.screen is not None:
        screen = ScreenInfo(rows=r.screen.rows, cols=r.screen.cols, cursor_row=r.screen.cursor_row,
                            cursor_col=r.screen.cursor_col)
    result = ForegroundSendResult(viewport=r.viewport, wait_reason=r.wait_reason,
                                  session_status=_status(r.session_status), truncated=r.viewport_truncated,
                                  exit_code=r.exit_code, bell=True if r.bell else None, screen=screen)
    result._raw = r.raw_output
    return result


async def _job_outcome(op: SendOperation) -> JobOutcome:
    r = await op.future
    detail = f"waitReason={r.wait_reason} sessionStatus={_status(r.session_status)} exitCode={r.exit_code}"
    return JobOutcome("killed" if op.cancel_requested else "completed", detail)


def _status(status: str) -> Any:
    return "running" if status == "starting" else status


def _lines_meta(begin: int, end: int, total: int) -> str:
    return f"[lines: {begin}-{end} of {total}]"


def _job_meta(job_id: str, status: str, detail: str | None) -> list[str]:
    meta = [f"[job: {job_id}]", f"[status: {status}]"]
    if detail:
        meta.append(f"[detail: {detail}]")
    return meta


def result_text(result: BaseModel, cap: int) -> str:
    """Render any tool result as the capped text a model sees."""
    if isinstance(result, ForegroundSendResult):
        meta = [f"[wait: {result.wait_reason}]", f"[session: {result.session_status}]"]
        if result.exit_code is not None:
            meta.append(f"[exit: {result.exit_code}]")
        if result.screen is not None:
            s = result.screen
            meta.append(f"[screen: {s.rows}x{s.cols} cursor {s.cursor_row},{s.cursor_col}]")
        if result.bell:
            meta.append("[bell]")
        return render_capped(meta, result.viewport, cap, keep_tail=True, cut=result.truncated)
    if isinstance(result, BackgroundSendResult):
        return render_capped([f"jobId: {result.job_id}"], "running in the background: collect its output with "
                             "job_output, stop it with job_kill", cap)
    if isinstance(result, OpenResult):
        meta = [f"sessionId: {result.session_id}", f"status: {result.status}", f"type: {result.type}"]
        meta += [f"pid: {result.pid}"] if result.pid is not None else []
        meta += [f"name: {result.name}"] if result.name is not None else []
        return render_capped(meta, result.motd, cap)
    if isinstance(result, ReadResult):
        meta = [_lines_meta(result.line_begin, result.line_end, result.total_lines)]
        return render_capped(meta, result.text, cap, keep_tail=True, cut=result.truncated)
    if isinstance(result, SignalResult):
        return render_capped([f"delivered: true targetPgid: {result.target_pgid}"], "", cap)
    if isinstance(result, CloseResult):
        return render_capped([f"sessionId: {result.session_id}", f"outcome: {result.outcome}"], "", cap)
    if isinstance(result, SessionList):
        body = "\n".join(_session_line(s) for s in result.root)
        return render_capped([f"[sessions: {len(result.root)}]"], body, cap)
    if isinstance(result, JobOutputResult):
        meta = _job_meta(result.job_id, result.status, result.detail)
        return render_capped(meta, result.output, cap, cut=result._more)
    if isinstance(result, ResizeResult):
        return render_capped([f"sessionId: {result.session_id}", f"size: {result.rows}x{result.cols}"], "", cap)
    if isinstance(result, RecordResult):
        meta = [f"sessionId: {result.session_id}", f"recording: {result.action}"]
        if result.action == "stop":
            meta.append(f"events: {result.events}")
        return render_capped(meta, result.path, cap)
    if isinstance(result, JobKillResult):
        return render_capped([f"[job: {result.job_id}]", f"[status: {result.status}]"], "", cap)
    raise TypeError(f"not a tool result: {type(result).__name__}")


def _session_line(s: SessionEntry) -> str:
    parts = [s.session_id, f"type={s.type}", f"status={s.status}"]
    if s.pid is not None:
        parts.append(f"pid={s.pid}")
    if s.name is not None:
        parts.append(f"name={s.name}")
    return " ".join(parts)


def describe_validation_error(name: str, model: type[BaseModel], exc: ValidationError) -> str:
    """One message for all of a call's argument problems, naming the arguments the tool takes."""
    accepted = [f.alias or n for n, f in model.model_fields.items()]
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden":
            problems.append(f"unknown argument {key!r}")
        elif kind == "missing":
            problems.append(f"missing required argument {key!r}")
        else:
            problems.append(f"argument {key!r}: {err['msg']} (got {err.get('input')!r})")
    takes = ", ".join(accepted) if accepted else "no arguments"
    return f"{name}: " + "; ".join(problems) + f". {name} takes: {takes}"


def _cancel_first(started: list[SendOperation]) -> None:
    """Interrupt the send that was started, if it got that far."""
    if started:
        started[0].cancel()
