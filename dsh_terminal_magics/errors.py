"""One exception family for every wrong call.

Every message says what was wrong and what to do about it.  Callers that want
to tell cases apart catch the subclasses; everyone else catches
:class:`TerminalError`.
"""
from __future__ import annotations

import os


class TerminalError(Exception):
    """Base of every error raised by dsh_terminal_magics."""


def shown(value: object, limit: int = 80) -> str:
    """A value a caller gave, as an error message quotes it: its ``repr``, cut after ``limit`` characters with
    its length said.  A wrong id, key, type or path may be any size, and the message goes back into a model's
    context: a 200,000-character key came back whole in its error."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else repr(value[:limit]) + f"... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def out_of_tasks_error(what: str) -> TerminalError:
    """The error for a thread or process that could not start (``can't start new thread``, ``EAGAIN`` from a
    fork): the user runs as many tasks as its limits let it - ``RLIMIT_NPROC`` counts every process and thread
    of the user, sessions' included."""
    return TerminalError(f"could not {what}: this user runs as many processes and threads as RLIMIT_NPROC or "
                         "kernel.threads-max allow; close sessions you no longer need, end what runs in them, or "
                         "raise the limit")


class UnknownSessionError(TerminalError, KeyError):
    """The session id is unknown to this owner (it may not exist, or belong to another owner)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"unknown terminal session {shown(session_id)}: no session with this id is open for this owner; "
            "call terminal_list to see your sessions"
        )

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class UnknownJobError(TerminalError, KeyError):
    """The job id is unknown to this owner."""

    def __init__(self, job_id: str) -> None:
        super().__init__(
            f"unknown job {shown(job_id)}: no job with this id exists for this owner; "
            "use the jobId returned by terminal_send with run_in_background"
        )

    def __str__(self) -> str:
        return str(self.args[0])


class SessionBusyError(TerminalError):
    """Another send holds the session's exclusive send reservation."""


class SessionNotRunningError(TerminalError):
    """The session's process has exited or the session is closing."""


class SessionLimitError(TerminalError):
    """A cap on open sessions (per agent or per kernel) was reached."""


class InvalidArgumentError(TerminalError, ValueError):
    """An argument has the wrong type, range or value."""


class ConfigError(TerminalError, ValueError):
    """A configuration value is invalid."""


class BackendError(TerminalError):
    """A backend could not be found or failed to start."""


def absolute_path(path: str) -> str:
    """``path`` (``~`` expanded) made absolute against this process's working directory - or a
    :class:`TerminalError` saying what to do when that directory is gone: a notebook's folder deleted or
    moved away leaves the kernel in it, and ``os.getcwd()`` fails with a bare ``FileNotFoundError``."""
    path = os.path.expanduser(path)
    if os.path.isabs(path):
        return os.path.normpath(path)
    try:
        here = os.getcwd()
    except FileNotFoundError:
        raise TerminalError("this process's working directory (the kernel's) no longer exists - it was deleted "
                            "or moved away - so neither a relative path nor the default directory can be found "
                            "from it: change the kernel to an existing directory (%cd DIR, or os.chdir in a "
                            "cell)") from None
    return os.path.normpath(os.path.join(here, path))
