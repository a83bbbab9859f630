"""Which environment variables a session's programs see.

An :class:`EnvironmentPolicy` filters the kernel's environment the way Codex's
``shell_environment_policy`` does: start from ``inherit`` (``all``, ``core``
or ``none``), drop the default excludes (names matching ``*KEY*``,
``*SECRET*``, ``*TOKEN*``, ``*PASSWORD*``, ``*CREDENTIAL*``, case-insensitive)
unless ``ignore_default_excludes``, drop ``exclude`` globs, keep only
``include_only`` globs when given; then the backend's own variables
(``TERM``, pagers …) and ``set`` are added, ``set`` last.
"""
from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass, field
from typing import Literal, Mapping

#: Variables ``inherit="core"`` keeps (plus every ``LC_*``).
CORE_VARIABLES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TZ", "TMPDIR")
DEFAULT_EXCLUDES = ("*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*", "*CREDENTIAL*")


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


def inherited(policy: EnvironmentPolicy, source: Mapping[str, str]) -> dict[str, str]:
    """The part of ``source`` the policy lets through (before backend variables and ``set``)."""
    if policy.inherit == "none":
        return {}
    env = dict(source)
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
