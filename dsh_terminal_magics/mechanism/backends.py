"""Session backends, registered by type name.

A backend turns ``(cwd, environment)`` into a :class:`LaunchSpec`: the argv
to run on the PTY and what the session may rely on (an exit-code marker).
Built in: ``shell`` (bash set up for machines, or ``sh`` when bash is absent)
and ``python`` (a python3 REPL).  Third parties register more through the
``dsh_terminal_magics.backends`` entry-point group; an entry point names a
:class:`Backend` instance or a class to instantiate.
"""
from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import resources
from importlib.metadata import entry_points
from typing import Callable, Protocol, runtime_checkable

from ..errors import BackendError, shown

ENTRY_POINT_GROUP = "dsh_terminal_magics.backends"

#: Environment every session gets: colours and full-screen programs work, no pager swallows the terminal.
BASE_ENV = {
    "TERM": "xterm-256color",
    "COLORTERM": "truecolor",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "",
    "LESS": "-R",
}


@dataclass(frozen=True)
class LaunchSpec:
    """What to run on the PTY for one session: argv, the variables it needs (an empty value
    unsets), and a one-line description for the session's motd."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    description: str = ""
    #: The program runs under a process of the backend's own that only waits for it (see :func:`reaped`):
    #: the session looks through it to the program, as through the sandbox's.
    wrapped: bool = False
    #: Whether a text is code the program's REPL must get whole, as one bracketed paste, to run it as a file
    #: would (see :func:`python_code_block`); None: only what any line editor would change is pasted.
    code_block: Callable[[str], bool] | None = None


#: ``sh -c`` under which :func:`reaped` runs a program: it waits for the program and exits with its status.  A
#: Ctrl-C or Ctrl-\\ that reaches its group too (before the program takes a group of its own) does not end it:
#: a caught signal, unlike an ignored one, is the default again in the program it starts.
REAPER_SCRIPT = 'trap : INT QUIT; "$@"; exit'


def reaped(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` run under ``sh``, which reaps the orphans the session adopts (and whether it is).

    A session's program is its tree's subreaper (orphans stay in the tree, for close to find): they become
    its children, and a program that does not reap children it did not start leaves them as zombies until
    the session closes - the python REPL, where ``os.system('job &')`` or a daemon (``gpg-agent``) leaves
    one each time.  A shell reaps every child; ``sh -c`` running the program as its only command, and
    exiting with its status, is one (a signal's death shows as 128 + its number, as in a shell).  Without
    an ``sh``, the program runs bare."""
    sh = _which("sh", os.environ.get("PATH"))
    return ([sh, "-c", REAPER_SCRIPT, "sh", *argv], True) if sh is not None else (argv, False)


@runtime_checkable
class Backend(Protocol):
    """A session type.  ``launch`` must not start anything itself."""

    name: str

    def launch(self, cwd: str) -> LaunchSpec: ...


class ShellBackend:
    """``bash --noprofile --rcfile <ours> -i``: fixed prompt ``$ ``, OSC 133;D exit-code marker."""

    name = "shell"

    def launch(self, cwd: str) -> LaunchSpec:
        bash = _which("bash", os.environ.get("PATH"))
        if bash is None:
            sh = _which("sh", os.environ.get("PATH")) or "/bin/sh"
            return LaunchSpec([sh, "-i"], {"PS1": "$ ", "PS2": "> "}, "sh shell (no exit codes)")
        rc = _shell_rc()
        # A python3 started in the shell gets the python session's REPL (blocks run whole: see python_rc.py),
        # unless the kernel's environment names a start-up file of its own.
        env = {} if os.environ.get("PYTHONSTARTUP") else {"PYTHONSTARTUP": _package_file("python_startup.py")}
        return LaunchSpec([bash, "--noprofile", "--rcfile", rc, "-i"], {**env, **readline_env()},
                          f"bash {_bash_version(bash)} shell; prompt '$ '; exit codes reported")


class PythonBackend:
    """A plain python3 REPL (the interpreter running this kernel), quiet banner."""

    name = "python"

    def launch(self, cwd: str) -> LaunchSpec:
        env = {"PYTHON_BASIC_REPL": "1", "PYTHONSTARTUP": _package_file("python_startup.py"), "PYTHONINSPECT": "",
               **readline_env()}
        version = ".".join(map(str, sys.version_info[:3]))
        argv, wrapped = reaped([sys.executable, "-q", "-i"])
        return LaunchSpec(argv, env, f"python {version} REPL; prompt '>>> '", wrapped, python_code_block)


#: Statements the REPL reads to a blank line: typed, ``for x in xs: print(x)`` left it at ``...``.
_COMPOUND = tuple(getattr(ast, name) for name in ("If", "For", "AsyncFor", "While", "With", "AsyncWith", "Try",
                                                    "TryStar", "FunctionDef", "AsyncFunctionDef", "ClassDef",
                                                    "Match") if hasattr(ast, name))
#: The longest text looked at: it is parsed on the session loop (5,900 one-line ``if`` statements, 64 KB,
#: took 38 ms; indented code, however long, is pasted without it).
MAX_CODE_BLOCK = 16 * 1024


def python_code_block(text: str) -> bool:
    """Whether ``text`` is Python - as a file reads it, in this interpreter's grammar (the python session's)
    - with a compound statement: typed, the REPL's grammar ran it otherwise.  A one-line ``for``, ``with`` or
    ``def`` waited at ``...`` for a blank line (the next send was a ``SyntaxError``, and the statement never
    ran), and a statement right after a block on its own lines was one.  Indented text is pasted anyway."""
    if ":" not in text or len(text) > MAX_CODE_BLOCK:
        return False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return any(isinstance(node, _COMPOUND) for node in tree.body)


_BASH_VERSION: dict[str, str] = {}


def readline_env() -> dict[str, str]:
    """``INPUTRC`` for a session: the one the kernel's environment names, else ours (the system's settings
    without ``~/.inputrc``: see the file).  With a user's ``set editing-mode vi``, an agent's Esc then text ran
    the text as vi commands in the shell's line editor."""
    return {"INPUTRC": os.environ.get("INPUTRC") or _package_file("inputrc")}


@functools.lru_cache(maxsize=16)
def _which(name: str, path: str | None) -> str | None:
    """``shutil.which`` remembered per ``PATH`` (a lookup stats every directory of it: once per session adds up)."""
    return shutil.which(name, path=path)


@functools.cache
def _package_file(name: str) -> str:
    return str(resources.files(__package__).joinpath(name))


def _shell_rc() -> str:
    return _package_file("shell_rc.bash")


def _bash_version(bash: str) -> str:
    if bash not in _BASH_VERSION:
        try:
            out = subprocess.run([bash, "-c", "echo $BASH_VERSION"], capture_output=True, text=True,
                                 timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = "?"
        _BASH_VERSION[bash] = out.split("(")[0] or "?"
    return _BASH_VERSION[bash]


class BackendRegistry:
    """Backends by type name: the built-ins, then entry points, then :meth:`register` calls."""

    def __init__(self) -> None:
        self._backends: dict[str, Backend] = {}
        self._entry_points_loaded = False
        self.register(ShellBackend())
        self.register(PythonBackend())

    def register(self, backend: Backend) -> None:
        """Add or replace the backend for ``backend.name``."""
        if not isinstance(backend, Backend) or not isinstance(getattr(backend, "name", None), str):
            raise BackendError(f"{backend!r} is not a backend: it needs a str `name` and a `launch(cwd)` method")
        self._backends[backend.name] = backend

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted(self._backends)

    def get(self, name: str) -> Backend:
        """The backend for ``name``; an unknown name is an error listing the registered ones."""
        self._load_entry_points()
        try:
            return self._backends[name]
        except KeyError:
            raise BackendError(
                f"unknown terminal type {shown(name)}: registered types are {', '.join(self.names())}; "
                "use one of them (usually 'shell')"
            ) from None

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                obj = ep.load()
                self.register(obj() if isinstance(obj, type) else obj)
            except Exception as exc:  # a broken plugin must not break the built-ins
                import warnings

                warnings.warn(f"dsh_terminal_magics: backend entry point {ep.name!r} failed to load: {exc}",
                              stacklevel=2)
