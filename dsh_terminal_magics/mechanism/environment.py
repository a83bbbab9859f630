"""Which environment variables a session's programs see.

An :class:`EnvironmentPolicy` filters the kernel's environment the way Codex's
``shell_environment_policy`` does: start from ``inherit`` (``all``, ``core``
or ``none``), drop the default excludes (names matching ``*KEY*``,
``*SECRET*``, ``*TOKEN*``, ``*PASSWORD*``, ``*CREDENTIAL*``, case-insensitive)
unless ``ignore_default_excludes``, drop ``exclude`` globs, keep only
``include_only`` globs when given; then the backend's own variables
(``TERM``, pagers …) and ``set`` are added, ``set`` last.

What a Jupyter kernel sets in its own process for itself, and what describes
the terminal it was started from, is not inherited under any policy (see
:func:`without_the_kernels_own`): a session sees the environment a terminal
beside the notebook would.
"""
from __future__ import annotations

import fnmatch
import functools
import os
import re
from dataclasses import dataclass, field
from typing import Literal, Mapping

#: Variables ``inherit="core"`` keeps (plus every ``LC_*``).
CORE_VARIABLES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TZ", "TMPDIR")
DEFAULT_EXCLUDES = ("*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*", "*CREDENTIAL*")

#: What a Jupyter kernel's machinery sets in its own process, with the value it sets: ipykernel's inline plotting
#: backend (no program outside the kernel can draw with it, and one whose Python lacks ``matplotlib_inline`` -
#: a project's virtualenv - fails ``import matplotlib.pyplot``), colours forced on for the notebook's ``!cmd``
#: output (in a terminal, output piped to a file or to ``grep`` would carry escapes), and debugpy's switch.
KERNEL_SETTINGS = {"MPLBACKEND": "module://matplotlib_inline.backend_inline", "FORCE_COLOR": "1",
                   "CLICOLOR_FORCE": "1", "CLICOLOR": "1", "PYDEVD_USE_FRAME_EVAL": "NO"}
#: What a kernel's launcher gives the kernel alone: the pid of the process it watches, its notebook's path.
KERNEL_LAUNCH_VARIABLES = ("JPY_PARENT_PID", "JPY_SESSION_NAME")
#: What describes the terminal the kernel was started from - its device, emulator, multiplexer and size - and
#: not the session's, which is ours (globs): with Jupyter started inside tmux, ``TMUX`` pointed a session's
#: ``tmux`` at the user's own server (``tmux kill-server`` ended it; a new tmux refused to nest); ``GPG_TTY``
#: (which gpg's guides have every ``.bashrc`` export) sent gpg's passphrase dialog to that terminal, leaving the
#: session waiting; ``TERM_PROGRAM`` or ``KITTY_WINDOW_ID`` made programs send escapes for a terminal that is
#: not there; ``COLUMNS`` and ``LINES`` overrode the PTY's size.
OUTER_TERMINAL_VARIABLES = (
    "GPG_TTY", "SSH_TTY", "TMUX", "TMUX_PANE", "STY", "TERMCAP", "COLUMNS", "LINES", "WINDOWID", "COLORFGBG",
    "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "TERM_SESSION_ID", "TERMINAL_EMULATOR", "VTE_VERSION", "LC_TERMINAL",
    "LC_TERMINAL_VERSION", "WT_SESSION", "WT_PROFILE_ID", "KITTY_*", "ITERM_*", "WEZTERM_*", "ALACRITTY_*",
    "KONSOLE_*", "GNOME_TERMINAL_*")


@dataclass(frozen=True)
class EnvironmentPolicy:
    """What a session inherits from the kernel's environment (see the module docstring)."""

    inherit: Literal["all", "core", "none"] = "core"
    exclude: tuple[str, ...] = ()
    include_only: tuple[str, ...] = ()
    set: Mapping[str, str] = field(default_factory=dict)
    ignore_default_excludes: bool = False


#: Agents' sessions by default; the notebook user's own sessions inherit everything.
AGENT_DEFAULT = EnvironmentPolicy()
USER_DEFAULT = EnvironmentPolicy(inherit="all", ignore_default_excludes=True)


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return _glob(patterns).match(name.upper()) is not None


@functools.lru_cache(maxsize=64)
def _glob(patterns: tuple[str, ...]) -> "re.Pattern[str]":
    """One compiled regex for a tuple of case-insensitive globs (every variable is tested on every open)."""
    return re.compile("|".join(fnmatch.translate(p.upper()) for p in patterns) or "(?!)")


@functools.lru_cache(maxsize=1)
def started_with() -> dict[str, str]:
    """The environment this process was started with (``/proc/self/environ``; empty when it cannot be read)."""
    try:
        with open("/proc/self/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return {}
    pairs = (os.fsdecode(entry).partition("=") for entry in entries if b"=" in entry)
    return {name: value for name, _, value in pairs}


def without_the_kernels_own(source: Mapping[str, str]) -> dict[str, str]:
    """``source`` less what is the kernel's own: :data:`KERNEL_LAUNCH_VARIABLES`, what describes the terminal
    it was started from (:data:`OUTER_TERMINAL_VARIABLES`), and a :data:`KERNEL_SETTINGS` variable holding the
    kernel's value unless this process was started with it (a ``FORCE_COLOR=1`` the user exported before
    starting Jupyter stays; ``MPLBACKEND=Agg`` always stays)."""
    started = started_with()
    return {name: value for name, value in source.items()
            if name not in KERNEL_LAUNCH_VARIABLES and not _matches(name, OUTER_TERMINAL_VARIABLES)
            and (KERNEL_SETTINGS.get(name) != value or started.get(name) == value)}


def inherited(policy: EnvironmentPolicy, source: Mapping[str, str]) -> dict[str, str]:
    """The part of ``source`` the policy lets through (before backend variables and ``set``), never what
    the kernel set for itself (:func:`without_the_kernels_own`)."""
    if policy.inherit == "none":
        return {}
    env = without_the_kernels_own(source)
    if policy.inherit == "core":
        env = {k: v for k, v in env.items() if k in CORE_VARIABLES or k.startswith("LC_")}
    if not policy.ignore_default_excludes:
        env = {k: v for k, v in env.items() if not _matches(k, DEFAULT_EXCLUDES)}
    if policy.exclude:
        env = {k: v for k, v in env.items() if not _matches(k, policy.exclude)}
    if policy.include_only:
        env = {k: v for k, v in env.items() if _matches(k, policy.include_only)}
    return env


def session_environment(policy: EnvironmentPolicy, source: Mapping[str, str], backend: Mapping[str, str],
                        bookkeeping: Mapping[str, str]) -> dict[str, str]:
    """The full environment of a session's program.

    ``backend`` values are added (an empty value unsets), then ``set``, then
    the session's ``bookkeeping`` variables, which nothing may override.
    """
    env = inherited(policy, source)
    env.pop("PROMPT_COMMAND", None)
    for key, value in backend.items():
        if value:
            env[key] = value
        else:
            env.pop(key, None)
    env.update(policy.set)
    env.update(bookkeeping)
    return env
