"""Shared fixtures.  Every test is checked for leaked session processes and PTY fds."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable, Iterator

import pytest
from IPython.testing import globalipapp

from dsh_terminal_magics import Agent, TerminalTools
from dsh_terminal_magics.mechanism import SendOperation, SendRequest, SessionManager
from dsh_terminal_magics.mechanism.event_loop import EventLoopThread
from dsh_terminal_magics.mechanism.manager import _PROCESS_TOKEN
from dsh_terminal_magics.mechanism.process_tree import process_table, read_proc, with_token
from dsh_terminal_magics.mechanism.watchdog import Watchdog


def session_processes() -> set[int]:
    """Live processes of this test process's sessions (found by their token)."""
    table = process_table()
    return {p for p in with_token(_PROCESS_TOKEN.encode(), table, set()) if not table[p].gone}


def command_started(shell_pid: int, name: str) -> bool:
    """Whether the shell ``shell_pid`` runs ``name`` (a child that has exec'd it, and has the terminal by
    then).  An interrupt sent while the shell is still reading the line or starting the command races bash
    and readline themselves: a kill right after ``sleep 100`` was sent left ``l`` in the next command line
    (``lecho ok``), and bash fed ``sleep 100`` and then ^C 0.5 ms apart failed 14 times in 30."""
    children = (read_proc(f"/proc/{shell_pid}/task/{shell_pid}/children") or b"").split()
    return any((read_proc(f"/proc/{int(c)}/comm") or b"").strip() == name.encode() for c in children)


def pty_fds() -> set[str]:
    """This process's open PTY, pidfd and kept ``/proc`` descriptors, as 'fd->target'."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(("/dev/pts/", "/proc/")) or target == "/dev/ptmx" or "pidfd" in target:
            out.add(f"{fd}->{target}")
    return out


def end_kernel(kernel: "subprocess.Popen[str]") -> None:
    """Let a kernel run in a subprocess end (its stdin closed: it reads nothing more), kill it by pid if it has not
    within 30 s, and close its pipes."""
    if kernel.stdin is not None:
        kernel.stdin.close()
    try:
        kernel.wait(timeout=30)
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
        if kernel.stdout is not None:
            kernel.stdout.close()


def wait_for(predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.01) -> object:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


def start_send(manager: SessionManager, owner: object, session_id: str, request: SendRequest,
               holder: str) -> SendOperation:
    """Take the session's reservation and start a send from the test thread; returns the operation."""
    return manager.loop_thread.call(manager.begin_send, owner, session_id, request, holder)


@pytest.fixture(scope="session", autouse=True)
def _ctrl_c_raises() -> Iterator[None]:
    """A SIGINT raises KeyboardInterrupt in this process, as in a kernel running a cell (ipykernel puts Python's
    handler in place for the cell).  A test run started in the background of a shell without job control
    (``cmd &`` in a script) inherits SIGINT ignored, and every test that presses Ctrl-C failed there."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if before is not None:
        signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="session", autouse=True)
def _warm_loop() -> Iterator[None]:
    EventLoopThread.shared()
    Watchdog.ensure(_PROCESS_TOKEN)
    yield


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail a test that leaves a session process alive or a PTY fd open."""
    procs_before = session_processes()
    fds_before = pty_fds()
    yield
    deadline = time.monotonic() + 10
    while session_processes() - procs_before and time.monotonic() < deadline:
        time.sleep(0.02)
    leaked = session_processes() - procs_before
    assert not leaked, f"test leaked session processes: {sorted(leaked)}"
    from dsh_terminal_magics.mechanism.readiness import _HOLDERS
    while True:
        while _HOLDERS.searching and time.monotonic() < deadline:  # (a search under way lists /proc/PID/fd dirs)
            time.sleep(0.01)
        live = {str(pid) for pid in session_processes()}
        fds = {fd for fd in pty_fds() - fds_before if not _of_live_process(fd, live)}
        if not fds or time.monotonic() >= deadline:
            break
        # A search another session's check started after the wait above holds a /proc listing for a moment
        # (seen once, beside two CPU hogs): a leak is what is still open at the deadline.
        time.sleep(0.05)
    assert fds == set(), f"test leaked fds: {sorted(fds)}"


def _of_live_process(fd: str, live: set[str]) -> bool:
    """A kept ``/proc`` file of a session process still running (a session another fixture holds)."""
    target = fd.split("->", 1)[1]
    return target.startswith("/proc/") and target.split("/")[2] in live


@pytest.fixture
def manager() -> Iterator[SessionManager]:
    m = SessionManager()
    yield m
    m.sync.shutdown()


@pytest.fixture
def agent() -> Agent:
    return Agent("tester")


@pytest.fixture
def tools() -> Iterator[TerminalTools]:
    t = TerminalTools()
    yield t
    t.shutdown()


def interactive_shell():
    """The test InteractiveShell (created once per process)."""
    return globalipapp.start_ipython() or globalipapp.get_ipython()


@pytest.fixture
def ip() -> Iterator[object]:
    """An InteractiveShell with the extension loaded (unloaded, and %config reset, afterwards)."""
    shell = interactive_shell()
    shell.run_line_magic("load_ext", "dsh_terminal_magics")
    yield shell
    shell.run_line_magic("unload_ext", "dsh_terminal_magics")
    shell.config.pop("TerminalMagics", None)  # %config values must not leak into the next test


@pytest.fixture
def magics(ip):
    from dsh_terminal_magics.notebook.magics import loaded_magics
    return loaded_magics(ip)
