"""Tools layer (the seed's ``tool-terminal``): the model-facing terminal tools.

:class:`TerminalTools` validates every call against the pydantic argument
models (the same models the schemas come from), fences it by the exact
initiating :class:`~dsh_terminal_magics.Agent`, runs it through the policies
and the handler of the tool (:mod:`.handlers`), and returns a typed result
(:meth:`~TerminalTools.call`) or the capped text a model sees
(:meth:`~TerminalTools.call_text`).  It is also the notebook's only door: a
foreground send can stream its output (``on_output``), and
:meth:`~TerminalTools.follow` gives viewers an owner-fenced live handle.
It never touches a PTY.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from typing import Any, Callable, Iterable, Mapping

from pydantic import BaseModel, ValidationError

from ..errors import InvalidArgumentError, TerminalError, shown
from ..jobs import JobInfo, JobRegistry
from ..mechanism import EnvironmentPolicy, Sandbox, SessionManager, SessionOptions, USER_DEFAULT
from ..mechanism.manager import shutdown_all as _shutdown_all_managers
from ..owners import Agent
from .config import ToolsConfig, environment_policy, load_config
from .handlers import HANDLERS, JOB_KIND, ToolContext, foreground_result, send_request
from .models import ForegroundSendResult, SendArgsForeground, describe_validation_error, tool_models
from .policies import Policy, PolicyDenied, PolicyEngine, PolicyOutcome, ToolCall
from .render import render_capped, result_text
from .schemas import build_schemas
from .streaming import FLUSH_INTERVAL, LiveOutput, SessionFollower, TerminalView
from .structured import ToolAnswer, output_schema, structured_result

PROMPT_SECTION_NAME = "tool:pty"
PROMPT_SECTION_ORDER = 106
PROMPT_SECTION_TEXT = (
    "Use a terminal session only when work needs persistent terminal state or interactive stdin; prefer "
    "shell/read/write/edit for bounded one-shot operations. Track every terminal session id and close sessions "
    "that no longer matter. An inferred_idle or timeout result does not prove the foreground command exited."
)
Observer = Callable[[ToolCall, Any, "BaseException | None"], None]


class TerminalTools:
    """The six terminal tools plus ``job_output`` / ``job_kill`` (and the extensions) for a set of agents.

    ``config`` is validated here (see :class:`ToolsConfig`).  ``user`` is the
    notebook user's own owner object: its sessions get ``user_environment``
    (default: inherit everything, like a JupyterLab terminal); every other
    agent gets the config's ``shellEnvironmentPolicy``.  ``manager`` and
    ``jobs`` may be shared; by default each tool set has its own.
    """

    def __init__(self, config: dict[str, Any] | ToolsConfig | None = None, *,
                 manager: SessionManager | None = None, jobs: JobRegistry | None = None,
                 workspace_root: str | None = None, session_options: SessionOptions | None = None,
                 user: Agent | None = None, user_environment: EnvironmentPolicy = USER_DEFAULT) -> None:
        self.config = load_config(config)
        self.manager = manager or SessionManager(workspace_root=workspace_root, options=session_options,
                                                 max_sessions_per_owner=self.config.max_sessions_per_agent)
        self.jobs = jobs or JobRegistry(self.manager.loop_thread)
        self.jobs.declare_kind(JOB_KIND)
        self._loop = self.manager.loop_thread
        self.user = user
        self.user_environment = user_environment
        #: Policies around every call, in order (see :meth:`add_policy`).
        self.policies: list[Policy] = []
        #: ``fn(call, result, error)`` after every call (cards use this); they never change results.
        self.observers: list[Observer] = []
        #: Raw offset up to which each session's output was streamed (so nothing between sends is lost).
        self._streamed: dict[str, int] = {}

    @property
    def max_result_bytes(self) -> int:
        return self.config.max_result_bytes

    @property
    def models(self) -> Mapping[str, type[BaseModel]]:
        """The argument model of every tool under the current config (the schemas come from these)."""
        return tool_models(self.config.enable_run_in_background, self.config.enable_terminal_extensions)

    def _context(self) -> ToolContext:
        return ToolContext(self.manager, self.jobs, self.max_result_bytes, self._environment, self._recordings,
                           self._sandbox)

    def _environment(self, agent: Agent) -> EnvironmentPolicy:
        return self.user_environment if agent is self.user else self.config.environment

    def _sandbox(self, agent: Agent) -> Sandbox:
        return Sandbox() if agent is self.user else self.config.sandbox_setup

    def _recordings(self, agent: Agent) -> str | None:
        return None if agent is self.user else self.config.recordings_directory(self.manager.workspace_root)

    # -- calls ----------------------------------------------------------------------------
    def call(self, name: str, args: dict[str, Any] | None = None, *, agent: Agent | None = None,
             on_output: Callable[[str], None] | None = None, show_prompt: bool = True,
             secret: bool = False) -> BaseModel:
        """Run tool ``name``; returns its typed result or raises :class:`TerminalError`.

        Ctrl-C (a kernel interrupt) during a foreground send interrupts the
        program too (SIGINT to its foreground group) before propagating.
        ``on_output(text)`` makes a foreground send stream: sanitised output
        (colours kept) as it arrives, starting with output that arrived since
        the previous streamed send, or else with the prompt the program shows
        (unless ``show_prompt`` is false); Ctrl-C then interrupts the program
        and the call still returns its result.  ``secret``: the text is one the user typed into a password
        box - observers (cards) are told not to show it.
        """
        parsed = self._check(name, args, agent)
        assert agent is not None
        if not (self.policies or self.observers):
            return self._execute(ToolCall(name, {}, agent), parsed, on_output, show_prompt)
        call = ToolCall(name, parsed.model_dump(by_alias=True), agent, secret)
        engine = PolicyEngine(self.policies, self._validate,
                              lambda c, p: self._execute(c, p, on_output, show_prompt))
        try:
            result = engine.run(call, parsed)
        except BaseException as exc:
            self._notify(call, None, exc)
            raise
        self._notify(call, result, None)
        return result

    async def acall(self, name: str, args: dict[str, Any] | None = None, *,
                    agent: Agent | None = None) -> BaseModel:
        """:meth:`call` for ``await`` in a cell (policies, which are plain functions, run in a worker thread).

        Cancelling the awaiting task interrupts a foreground send's program, as Ctrl-C does for :meth:`call`.
        """
        if self.policies or self.observers:
            worker = asyncio.ensure_future(asyncio.to_thread(self.call, name, args, agent=agent))
            try:
                return await asyncio.shield(worker)
            except asyncio.CancelledError:
                if name == "terminal_send" and isinstance(args, dict):
                    self._interrupt_foreground_send(agent, args.get("sessionId"))
                raise
        parsed = self._check(name, args, agent)
        return await self._loop.arun(HANDLERS[name](self._context(), parsed, agent))  # type: ignore[arg-type]

    def call_text(self, name: str, args: dict[str, Any] | None = None, *,
                  agent: Agent | None = None) -> str | list[dict[str, Any]]:
        """Run tool ``name`` and return the capped text a model sees; errors come back as text.

        A policy that supplies a list of content blocks gets that list back, shape kept.
        """
        try:
            return self.render(self.call(name, args, agent=agent))
        except Exception as exc:  # the contract: errors come back as text, whatever they are
            return self.render_error(exc)

    async def acall_text(self, name: str, args: dict[str, Any] | None = None, *,
                         agent: Agent | None = None) -> str | list[dict[str, Any]]:
        try:
            return self.render(await self.acall(name, args, agent=agent))
        except Exception as exc:
            return self.render_error(exc)

    async def aanswer(self, name: str, args: dict[str, Any] | None = None, *,
                      agent: Agent | None = None) -> ToolAnswer:
        """Run tool ``name`` for a protocol server: the capped text, the JSON object, and whether it failed.

        Never raises for a bad call: the error comes back as the text a model sees, with ``is_error``.
        Cancelling the awaiting task interrupts a foreground send's program.
        """
        try:
            result = await self.acall(name, args, agent=agent)
        except Exception as exc:
            return ToolAnswer(self.render_error(exc), None, True)
        text = self.render(result)
        return ToolAnswer(text, structured_result(result, _plain(text)), False)

    def _interrupt_foreground_send(self, agent: Agent | None, session_id: Any) -> None:
        """Interrupt ``agent``'s foreground send on ``session_id``, if one runs (a job's send is left alone)."""
        self._loop.call(self.manager.interrupt_foreground_send, agent, session_id)

    def _execute(self, call: ToolCall, parsed: BaseModel, on_output: Callable[[str], None] | None,
                 show_prompt: bool = True) -> BaseModel:
        if call.name == "terminal_send" and not getattr(parsed, "run_in_background", False):
            assert isinstance(parsed, SendArgsForeground)
            if on_output is not None:
                return self._streaming_send(parsed, call.agent, on_output, show_prompt)
            return self._foreground_send(parsed, call.agent)
        return self._loop.run(HANDLERS[call.name](self._context(), parsed, call.agent))

    def _foreground_send(self, a: SendArgsForeground, agent: Agent) -> ForegroundSendResult:
        """The hot path: one hop into the loop to start, one hop back with the result."""
        started: list[Any] = []

        def start() -> Any:
            started.append(self.manager.begin_send(agent, a.session_id, send_request(a, self.max_result_bytes),
                                                   "a foreground send"))
            return started[0]

        r = self._loop.call_and_wait(start, on_interrupt=lambda: started and started[0].cancel())
        return foreground_result(r)

    def _streaming_send(self, a: SendArgsForeground, agent: Agent, on_output: Callable[[str], None],
                        show_prompt: bool) -> ForegroundSendResult:
        request = send_request(a, self.max_result_bytes)
        streamed_to = self._streamed.get(a.session_id)
        begun: list[Any] = []

        def begin() -> Any:
            # Output after the last cell's stream ended leads this one, unless a send since showed it to its
            # sender (a tool call's result, a background job's output).
            session = self.manager.session(agent, a.session_id)
            offset = session.raw.total
            resume = None if streamed_to is None else max(streamed_to, session.last_send_end)
            unseen = resume is not None and resume < offset
            prompt = session.scrollback.partial_line if show_prompt and not unseen else ""
            if unseen:  # (the stream shows it: the result has none to point at)
                session.saw_all()
            op = self.manager.begin_send(agent, a.session_id, request, "a foreground send (streaming)")
            begun.append(op)
            return session, op, resume if unseen else offset, prompt

        try:
            session, op, start, prompt = self._loop.call(begin)
        except KeyboardInterrupt:  # (struck while the send began: it is interrupted, if it did - behind begin)
            self._loop.call(lambda: begun and begun[0].cancel())
            raise
        stream: LiveOutput | None = None
        future: concurrent.futures.Future[Any] | None = None
        while True:  # (from here a Ctrl-C at any point interrupts the program, and the wait goes on)
            try:
                if stream is None:
                    stream = LiveOutput(self._loop, session, start, on_output)
                    if prompt:
                        on_output(prompt)
                if future is None:
                    future = self._loop.submit(_result_of(op))
                try:
                    r = future.result(timeout=FLUSH_INTERVAL)
                    break
                except concurrent.futures.TimeoutError:
                    stream.flush()
            except KeyboardInterrupt:
                self._loop.loop.call_soon_threadsafe(op.cancel)
        stream.flush(final=True)
        self._streamed[a.session_id] = stream.offset
        return foreground_result(r)

    def configure(self, config: dict[str, Any] | ToolsConfig) -> None:
        """Replace the config (validated first; a bad one raises and the old one stays).  Calls already
        running keep the limits they started with."""
        self.config = load_config(config)
        self.manager.max_sessions_per_owner = self.config.max_sessions_per_agent

    def set_session_defaults(self, **options: Any) -> None:
        """Defaults for sessions opened from now on (``scrollback_lines``, ``rows``, ``cols`` …)."""
        def apply() -> None:
            self.manager.options = dataclasses.replace(self.manager.options, **options)
        try:
            self._loop.call(apply)
        except TypeError as exc:
            raise InvalidArgumentError(f"unknown session option: {exc}") from None

    def set_user_environment(self, policy: dict[str, Any] | None) -> None:
        """The environment policy of the notebook user's own sessions (keys as ``shellEnvironmentPolicy``);
        ``None`` or ``{}``: inherit everything.  Validated first; a bad one raises and the old one stays."""
        self.user_environment = environment_policy(policy) if policy else USER_DEFAULT

    def job_status(self, job_id: str, *, agent: Agent) -> str:
        """The status of ``agent``'s job (any thread, the loop thread included)."""
        return self._loop.call(lambda: self.jobs.job(agent, job_id).status)

    # -- viewers and notebook needs -------------------------------------------------------
    def follow(self, session_id: str, *, agent: Agent,
               on_change: Callable[[TerminalView], None] | None = None, fps: float = 20.0) -> SessionFollower:
        """A live handle on ``agent``'s session for viewers (an unknown or foreign id is refused)."""
        self._check_agent(agent)
        session = self._loop.call(self.manager.session, agent, session_id)
        return SessionFollower(self._loop, session, on_change, fps)

    def list_jobs(self, *, agent: Agent) -> list[JobInfo]:
        """``agent``'s jobs (id, kind, label, status, detail)."""
        self._check_agent(agent)
        return self.jobs.sync.list(agent)

    # -- policies, observers, schemas, rendering ------------------------------------------
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

    def _notify(self, call: ToolCall, result: Any, error: BaseException | None) -> None:
        for observer in list(self.observers):
            try:
                observer(call, result, error)
            except Exception:  # a display hook must never break a call
                pass

    def schemas(self, format: str = "openai", include: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Tool schemas in ``"openai"``, ``"anthropic"`` or ``"json-schema"`` form, optionally filtered."""
        return build_schemas(self.models, format, include=include)

    def output_schemas(self) -> dict[str, dict[str, Any]]:
        """The JSON Schema of each tool's structured result (see :meth:`aanswer`), by tool name."""
        return {name: output_schema(name) for name in self.models}

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
        """An error as the capped text a model sees."""
        if isinstance(exc, PolicyDenied):
            return render_capped(["[denied]", f"[policy: {exc.policy}]"], exc.reason, self.max_result_bytes)
        if isinstance(exc, TerminalError):
            return render_capped(["[error]"], str(exc), self.max_result_bytes)
        return render_capped(["[error]"], f"internal error ({type(exc).__name__}: {exc}); the call may not have "
                             "completed - check with terminal_list", self.max_result_bytes)

    # -- lifecycle --------------------------------------------------------------------------
    def close_owner(self, agent: Agent) -> None:
        """Close every session and job of ``agent`` (used by ``with Agent(...)`` scopes)."""
        self.jobs.sync.close_owner(agent)
        self.manager.sync.close_owner(agent)

    async def aclose_owner(self, agent: Agent) -> None:
        await self.jobs.aio.close_owner(agent)
        await self.manager.aio.close_owner(agent)

    def shutdown(self) -> None:
        """Stop every job and close every session of every agent."""
        if self._loop.thread.is_alive():
            self.jobs.sync.close_owner(None)
            self.manager.sync.shutdown()

    # -- validation --------------------------------------------------------------------------
    @staticmethod
    def _check_agent(agent: Agent | None) -> None:
        if agent is None:
            raise TerminalError("terminal tools require an initiating agent")
        if not isinstance(agent, Agent):
            raise InvalidArgumentError(f"agent must be an Agent object, got {type(agent).__name__}: "
                                       "create one with Agent('name') and pass the same object every time")

    def _check(self, name: str, args: dict[str, Any] | None, agent: Agent | None) -> BaseModel:
        """Owner present and an Agent, tool known, arguments valid (pure: runs in the caller)."""
        self._check_agent(agent)
        parsed = self._validate(name, args)
        agent._bind(self)  # type: ignore[union-attr]
        return parsed

    def _validate(self, name: str, args: dict[str, Any] | None) -> BaseModel:
        models = self.models
        if not isinstance(name, str) or name not in models:
            raise InvalidArgumentError(f"unknown tool {shown(name)}: the tools are {', '.join(models)}")
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


def _plain(text: str | list[dict[str, Any]]) -> str:
    """The text of a rendered result (a policy's content blocks joined)."""
    if isinstance(text, str):
        return text
    return "\n".join(str(block.get("text", "")) for block in text if block.get("type") == "text")


async def _result_of(op: Any) -> Any:
    return await op.future


def shutdown_all() -> None:
    """Close every session of every tool set and manager in this process (unload, kernel shutdown)."""
    _shutdown_all_managers()
