"""The package's vocabulary and bounds: one home for each name and limit every layer uses.

Signal names, status literals and the numeric limits live here, at the
ground floor, so the mechanism, the tool models, the config and the magics
agree by construction (a ``%term_send --timeout`` and a tool call are
checked against the same bound).
"""
from __future__ import annotations

import signal as signal_module
import unicodedata
from typing import Literal, get_args

from .errors import InvalidArgumentError, shown

SignalName = Literal["SIGINT", "SIGTERM", "SIGKILL", "SIGTSTP", "SIGHUP"]
#: Signals a caller may send to a terminal's foreground process group.
SIGNAL_NAMES: tuple[str, ...] = get_args(SignalName)
#: Their numbers.
SIGNALS: dict[str, int] = {name: int(getattr(signal_module, name)) for name in SIGNAL_NAMES}

WaitReason = Literal["stdin_read", "inferred_idle", "timeout", "session_exit"]
#: Why a send's text was stopped before its end: a signal (an interrupt) to its program, or the program ended.
TextCut = Literal["signal", "program_ended"]
#: A session's status as callers see it.
SessionStatus = Literal["running", "exited", "closing", "closed"]
JobStatus = Literal["running", "completed", "killed", "failed"]

#: Longest ``timeout`` / ``idle`` of one send (seconds).
MAX_WAIT_SECONDS = 3600.0
#: Largest text one send may write (bytes).
MAX_SEND_BYTES = 1024 * 1024
#: Largest recording a model's ``terminal_record`` writes (bytes): past it the file stops growing (a
#: program's output flood must not fill the disk under ``recordDir``).  The notebook user's have no cap.
MAX_CONFINED_RECORDING_BYTES = 64 * 1024 * 1024
#: Largest recording ``%term_replay`` loads (bytes): its events are held in memory, several times its size.
MAX_REPLAY_BYTES = 256 * 1024 * 1024
#: Most lines one read returns, and the default page.
MAX_READ_LINES = 5000
DEFAULT_READ_LINES = 500
#: Bounds of ``maxResultBytes``.
MIN_MAX_RESULT_BYTES = 64
MAX_SAFE_INTEGER = 2**53 - 1
#: Terminal size bounds (rows, cols).
ROWS_RANGE = (2, 500)
COLS_RANGE = (10, 1000)


def signal_name(name: object) -> str:
    """The canonical name of a signal given as ``INT``, ``int``, ``SIGINT`` …; raises for any other."""
    if isinstance(name, str):
        upper = name.strip().upper()
        canonical = upper if upper.startswith("SIG") else "SIG" + upper
        if canonical in SIGNALS:
            return canonical
    raise InvalidArgumentError(f"invalid signal {shown(name)}: use one of {', '.join(SIGNAL_NAMES)} "
                               "(the SIG prefix is optional)")


#: Characters a session's name may not hold: control characters and line or paragraph separators (a name is
#: shown in line-oriented text a model reads: a line break in one made a session list show a line of its own)
#: and the bidirectional controls (they make what a line shows differ from what it holds).
_UNSHOWABLE_IN_NAMES = frozenset("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def session_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a session (None when it can)."""
    for char in name:
        if char in _UNSHOWABLE_IN_NAMES or unicodedata.category(char) == "Cc":
            return (f"session name {name!r} holds {char!r}, a control character: names are shown in the lines a "
                    "model reads - use printable text, e.g. 'main'")
    return None


def wait_seconds_problem(name: str, value: object) -> str | None:
    """Why ``value`` is not a valid ``timeout``/``idle`` (None when it is)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_WAIT_SECONDS
    return None if ok else f"{name} must be a number of seconds in (0, {MAX_WAIT_SECONDS:g}], got {value!r}"


def max_result_bytes_problem(value: object) -> str | None:
    """Why ``value`` is not a valid ``maxResultBytes`` (None when it is)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and (
        MIN_MAX_RESULT_BYTES <= value <= MAX_SAFE_INTEGER)
    return None if ok else (f"maxResultBytes must be a safe integer >= {MIN_MAX_RESULT_BYTES} "
                            f"(and <= {MAX_SAFE_INTEGER}), got {value!r}")
