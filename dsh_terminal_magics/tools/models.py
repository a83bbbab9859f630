"""Pydantic models of every tool's arguments and results: the one source of the schemas.

Python attributes are snake_case; the JSON form (``by_alias=True``) uses the
seed's names (``sessionId``, ``waitReason``, ``run_in_background`` …).
"""
from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Annotated, Any, Literal, Mapping, Optional, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, RootModel, StrictBool, StrictInt,
                      StrictStr, ValidationError, model_validator)

from ..errors import shown
from ..vocabulary import (COLS_RANGE, DEFAULT_READ_LINES, MAX_READ_LINES, MAX_WAIT_SECONDS, ROWS_RANGE, JobStatus,
                          SessionStatus, SignalName, TextCut, WaitReason, signal_name)


def _canonical_signal(value: Any) -> Any:
    """``INT`` and ``SIGINT`` alike; anything else is left for the Literal to refuse."""
    try:
        return signal_name(value)
    except Exception:
        return value


def _check_strings(value: Any, where: str) -> None:
    """Refuse text no terminal or file system can carry: lone surrogates anywhere, NUL in names and paths."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{where} contains a lone surrogate ({value[exc.start]!r}), which is not valid "
                             "Unicode: send valid UTF-8 text") from None
        if "\x00" in value and where != "text":
            raise ValueError(f"{where} contains a NUL byte, which no name or path can hold: remove it")
    elif isinstance(value, list):
        for item in value:
            _check_strings(item, where)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _carryable(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, value in data.items():
                _check_strings(value, str(key))
        return data


class _Result(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)


# -- arguments ----------------------------------------------------------------------
class OpenArgs(_Args):
    """Open a persistent terminal session (a shell or REPL that keeps its state between sends)."""

    type: StrictStr = Field(description="Registered terminal backend type, usually 'shell' ('python' for a "
                                        "python3 REPL).")
    name: Optional[StrictStr] = Field(None, min_length=1, max_length=64,
                                      description="Optional owner-local display name, e.g. 'main' or 'gdb'.")
    cwd: Optional[StrictStr] = Field(None, min_length=1, description="Initial working directory; defaults to "
                                                                      "the workspace root.")


class SendArgsForeground(_Args):
    """Write input to a terminal session and wait until the program wants input again, goes quiet, times
    out or exits."""

    session_id: StrictStr = Field(alias="sessionId", description="Session id from terminal_open.")
    text: StrictStr = Field(description="Text to write exactly as given.")
    submit: StrictBool = Field(True, description="Press Enter after the text (default true; a text ending in a "
                                                 "line end has its Enter: no second one). Set false for "
                                                 "control characters or partial input.")
    timeout: float = Field(30.0, gt=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False,
                           description="Extra: most seconds to wait (default 30).")
    idle: float = Field(3.0, gt=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False,
                        description="Extra: seconds of silence that count as idle (default 3).")


_BACKGROUND_DOC = ("Return a jobId at once and run the send as a background job (collect with job_output, stop "
                   "with job_kill).")
_KEYS_DOC = ("Extra: named keys sent after the text, in order: Enter, Tab, Esc, Up, Down, Left, Right, Home, End, "
             "PageUp, PageDown, Backspace, Delete, Insert, Space, F1-F12, or single characters, after modifiers "
             "C- (control), S- (shift), M- (meta): C-c, C-Space, S-Tab, C-Left, M-x.")


_SUBMIT_WITH_KEYS_DOC = ("Press Enter after the text and keys. Default: true without keys, false with keys (they "
                         "are pressed as named: list Enter among them, or set this true, to press it too).")


class SendArgs(SendArgsForeground):
    """Write input to a terminal session and wait (foreground), or start a background job (background)."""

    run_in_background: StrictBool = Field(False, description=_BACKGROUND_DOC)


class SendArgsKeysForeground(SendArgsForeground):
    """Write input (text, then named keys) to a terminal session and wait until the program wants input again,
    goes quiet, times out or exits."""

    keys: Optional[list[StrictStr]] = Field(None, max_length=1000, description=_KEYS_DOC)
    submit: Optional[StrictBool] = Field(None, description=_SUBMIT_WITH_KEYS_DOC)  # type: ignore[assignment]


class SendArgsKeys(SendArgsKeysForeground):
    """Write input (text, then named keys) to a terminal session and wait (foreground), or start a background
    job (background)."""

    run_in_background: StrictBool = Field(False, description=_BACKGROUND_DOC)


class ResizeArgs(_Args):
    """Resize a session's terminal; the program receives SIGWINCH."""

    session_id: StrictStr = Field(alias="sessionId", description="Session id from terminal_open.")
    rows: StrictInt = Field(ge=ROWS_RANGE[0], le=ROWS_RANGE[1], description="Rows (lines).")
    cols: StrictInt = Field(ge=COLS_RANGE[0], le=COLS_RANGE[1], description="Columns.")


class RecordArgs(_Args):
    """Start or stop recording a session's output to an asciinema v2 .cast file."""

    session_id: StrictStr = Field(alias="sessionId", description="Session id from terminal_open.")
    action: Literal["start", "stop"] = Field(description="start (needs path) or stop.")
    path: Optional[StrictStr] = Field(None, min_length=1, description="Where to write the .cast file (start).")


class ReadArgs(_Args):
    """Read a bounded page of a session's retained output without sending input."""

    session_id: StrictStr = Field(alias="sessionId", description="Session id from terminal_open.")
    offset: StrictInt = Field(0, ge=0, description="Lines to skip back from the newest (default 0 = newest).")
    count: StrictInt = Field(DEFAULT_READ_LINES, ge=1, le=MAX_READ_LINES,
                             description=f"Lines to return (default {DEFAULT_READ_LINES}, at most {MAX_READ_LINES}).")


class SignalArgs(_Args):
    """Send a signal to the session terminal's foreground process group."""

    session_id: StrictStr = Field(alias="sessionId", description="Session id from terminal_open.")
    signal: Annotated[SignalName, BeforeValidator(_canonical_signal)] = Field(
        description="Signal to deliver to the foreground process group (the SIG prefix is optional).")


class CloseArgs(_Args):
    """Close a session and wait until its whole process tree has ended."""

    session_id: StrictStr = Field(alias="sessionId", description="Session id from terminal_open.")


class ListArgs(_Args):
    """List your terminal sessions."""


class JobOutputArgs(_Args):
    """Get a background job's status and the output produced since the last job_output call."""

    job_id: StrictStr = Field(alias="jobId", description="Job id from a background terminal_send.")


class JobKillArgs(_Args):
    """Stop a background job (for a terminal send: SIGINT to the foreground process group)."""

    job_id: StrictStr = Field(alias="jobId", description="Job id from a background terminal_send.")


# -- results ----------------------------------------------------------------------------


class ScreenInfo(_Result):
    """The rendered screen of a full-screen program (the viewport is its text)."""

    rows: int
    cols: int
    cursor_row: int = Field(alias="cursorRow")
    cursor_col: int = Field(alias="cursorCol")


class UnseenOutput(_Result):
    """Lines of output that came after the owner's last look at the session and before a send (a background
    command's, a thread's): the viewport holds the send's own output only.  ``terminal_read`` with this
    ``offset`` and ``count`` = ``lines`` shows them."""

    lines: int
    offset: int


class ForegroundSendResult(_Result):
    kind: Literal["foreground"] = "foreground"
    viewport: str
    wait_reason: WaitReason = Field(alias="waitReason")
    session_status: SessionStatus = Field(alias="sessionStatus")
    truncated: bool
    exit_code: Optional[int] = Field(None, alias="exitCode")
    #: Extras beyond the seed, present in the JSON only when they say something.
    bell: Optional[bool] = Field(None, exclude_if=lambda v: v is None)
    screen: Optional[ScreenInfo] = Field(None, exclude_if=lambda v: v is None)
    #: Bytes of the input never written: the wait ended while the program did not read (see :func:`unsent_note`).
    unsent: Optional[int] = Field(None, exclude_if=lambda v: v is None)
    unseen: Optional[UnseenOutput] = Field(None, exclude_if=lambda v: v is None)
    #: The shell or REPL ran the command without showing it as typed: the terminal's echo is off (see
    #: ``ECHO_OFF_NOTE`` in render.py).
    echo_off: Optional[bool] = Field(None, alias="echoOff", exclude_if=lambda v: v is None)
    #: Bytes of the input typed that no program has read yet (see :func:`unread_note`).
    unread: Optional[int] = Field(None, exclude_if=lambda v: v is None)
    #: Not part of the seed's JSON: (raw output, screen text, interrupted, text cut by), set by
    #: :meth:`with_extras` - a plain slot, not a pydantic private attribute: those are set up (in Python) on every
    #: result, which cost more than the rest of the result together on the hot path of every send.
    __slots__ = ("_extras",)

    def with_extras(self, raw_output: bytes, screen_text: Optional[str], interrupted: bool,
                    text_cut_by: Optional[TextCut] = None) -> "ForegroundSendResult":
        """This result, carrying what the seed's JSON leaves out (see the properties below)."""
        object.__setattr__(self, "_extras", (raw_output, screen_text, interrupted, text_cut_by))  # (frozen fields)
        return self

    def _extra(self, index: int, default: Any) -> Any:
        extras = getattr(self, "_extras", None)  # (a copy made by pydantic has none)
        return default if extras is None else extras[index]

    @property
    def raw_output(self) -> bytes:
        """The program's raw output during the send, colours included (for cards and viewers)."""
        return self._extra(0, b"")  # type: ignore[no-any-return]

    @property
    def screen_text(self) -> Optional[str]:
        """The full-screen program's screen as text, when one had the terminal at the end."""
        return self._extra(1, None)  # type: ignore[no-any-return]

    @property
    def interrupted(self) -> bool:
        """Whether the send was interrupted (Ctrl-C, a cancelled await)."""
        return bool(self._extra(2, False))

    @property
    def text_cut_by(self) -> Optional[TextCut]:
        """Why the text was stopped before its end (``signal``, ``program_ended``; see :attr:`unsent`)."""
        return self._extra(3, None)  # type: ignore[no-any-return]


class BackgroundSendResult(_Result):
    kind: Literal["background"] = "background"
    job_id: str = Field(alias="jobId")


class ReadResult(_Result):
    text: str
    total_lines: int = Field(alias="totalLines")
    line_begin: int = Field(alias="lineBegin")
    line_end: int = Field(alias="lineEnd")
    truncated: bool


class SignalResult(_Result):
    delivered: Literal[True] = True
    target_pgid: int = Field(alias="targetPgid")


class CloseResult(_Result):
    session_id: str = Field(alias="sessionId")
    outcome: Literal["closed", "already-closing"]
    #: An extra beyond the seed, present only when it says something: pids of the session's processes the
    #: kernel may not signal (another user's, started with ``sudo``), left running.
    not_ended: Optional[list[int]] = Field(None, alias="notEnded", exclude_if=lambda v: v is None)


class SessionEntry(_Result):
    session_id: str = Field(alias="sessionId")
    name: Optional[str] = None
    type: str
    pid: Optional[int] = None
    status: SessionStatus


class OpenResult(SessionEntry):
    motd: str


class SessionList(RootModel[list[SessionEntry]]):
    model_config = ConfigDict(frozen=True)


class JobOutputResult(_Result):
    job_id: str = Field(alias="jobId")
    status: JobStatus
    output: str
    detail: Optional[str] = None
    #: True when output is still waiting for the next job_output call (not part of the seed's JSON).
    _more: bool = PrivateAttr(False)


class JobKillResult(_Result):
    job_id: str = Field(alias="jobId")
    status: JobStatus


class ResizeResult(_Result):
    session_id: str = Field(alias="sessionId")
    rows: int
    cols: int


class RecordResult(_Result):
    session_id: str = Field(alias="sessionId")
    action: Literal["start", "stop"]
    path: str
    events: int = 0
    #: The recording stopped growing at its size cap (a model's: ``MAX_CONFINED_RECORDING_BYTES``).
    truncated: bool = False


ARGS: dict[str, type[BaseModel]] = {
    "terminal_open": OpenArgs,
    "terminal_send": SendArgs,
    "terminal_read": ReadArgs,
    "terminal_signal": SignalArgs,
    "terminal_close": CloseArgs,
    "terminal_list": ListArgs,
    "job_output": JobOutputArgs,
    "job_kill": JobKillArgs,
}
#: The seed's tools plus job_output / job_kill, in their fixed order.
TOOL_NAMES = tuple(ARGS)
#: Tools beyond the seed (full screens, recordings), present when extensions are enabled.
EXTENSION_ARGS: dict[str, type[BaseModel]] = {"terminal_resize": ResizeArgs, "terminal_record": RecordArgs}
ALL_TOOL_NAMES = TOOL_NAMES + tuple(EXTENSION_ARGS)


#: The result types of each tool (``terminal_send`` answers in the foreground or starts a job).
RESULTS: dict[str, Any] = {
    "terminal_open": OpenResult,
    "terminal_send": Annotated[Union[ForegroundSendResult, BackgroundSendResult], Field(discriminator="kind")],
    "terminal_read": ReadResult,
    "terminal_signal": SignalResult,
    "terminal_close": CloseResult,
    "terminal_list": SessionList,
    "job_output": JobOutputResult,
    "job_kill": JobKillResult,
    "terminal_resize": ResizeResult,
    "terminal_record": RecordResult,
}


@functools.lru_cache(maxsize=None)
def tool_models(background: bool = True, extensions: bool = True) -> Mapping[str, type[BaseModel]]:
    """The argument model of every tool under this configuration, in the fixed order (read-only: one mapping
    per configuration, looked up on every call)."""
    choices: dict[tuple[bool, bool], type[BaseModel]] = {
        (True, True): SendArgsKeys, (False, True): SendArgsKeysForeground,
        (True, False): SendArgs, (False, False): SendArgsForeground}
    send = choices[(background, extensions)]
    models: dict[str, type[BaseModel]] = {**ARGS, "terminal_send": send}
    if extensions:
        models.update(EXTENSION_ARGS)
    return MappingProxyType(models)


#: Problems one error message lists; the rest are counted.
MAX_PROBLEMS_SHOWN = 5


def describe_validation_error(name: str, model: type[BaseModel], exc: ValidationError) -> str:
    """One message for all of a call's argument problems, naming the arguments the tool takes."""
    accepted = [f.alias or n for n, f in model.model_fields.items()]
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden":
            problems.append(f"unknown argument {shown(key)}")
        elif kind == "missing":
            problems.append(f"missing required argument {key!r}")
        elif not key:  # a check of the whole call: its message names the argument (no echo of every value)
            problems.append(err["msg"].removeprefix("Value error, "))
        else:
            problems.append(f"argument {key!r}: {err['msg']} (got {shown(err.get('input'), 200)})")
    if len(problems) > MAX_PROBLEMS_SHOWN:  # (a call with thousands of unknown arguments: say how many)
        problems[MAX_PROBLEMS_SHOWN:] = [f"and {len(problems) - MAX_PROBLEMS_SHOWN} more problems"]
    takes = ", ".join(accepted) if accepted else "no arguments"
    return f"{name}: " + "; ".join(problems) + f". {name} takes: {takes}"

