"""A watchdog process that ends every session tree if this process dies abruptly.

Session leaders die with the process that forked them
(``PR_SET_PDEATHSIG``: the fork server, which exits when our end of its socket
closes), but their orphans would live on.  The watchdog is a
small separate process holding the read end of a pipe from us; when the pipe
reaches end-of-file (we exited, or were killed with SIGKILL) it freezes and
kills every process whose environment carries this process's session token.
Run as a script so it imports nothing but the standard library.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time


class Watchdog:
    """The process-wide watchdog, started on the first session."""

    _proc: "subprocess.Popen[bytes] | None" = None
    _lock = threading.Lock()

    @classmethod
    def ensure(cls, token: str) -> None:
        with cls._lock:
            if cls._proc is not None and cls._proc.poll() is None:
                return
            try:
                cls._proc = subprocess.Popen(
                    [sys.executable, "-S", os.path.abspath(__file__), token],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True, close_fds=True,
                )
            except BlockingIOError:  # (EAGAIN: the user's process limit; the package is imported, not a script)
                from ..errors import out_of_tasks_error
                raise out_of_tasks_error("start the watchdog that ends the sessions' processes") from None

    @classmethod
    def stop(cls) -> None:
        """Close the pipe (the watchdog sweeps once more and exits) and reap it."""
        with cls._lock:
            proc, cls._proc = cls._proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=10)
        except Exception:
            proc.kill()


def _forget_the_parents_watchdog() -> None:
    """In a forked child: the watchdog is the parent's.  Our copy of its pipe is closed, or it would not see
    the parent die while this child lives; nothing is waited for (it is not our child)."""
    proc, Watchdog._proc, Watchdog._lock = Watchdog._proc, None, threading.Lock()
    if proc is not None and proc.stdin is not None:
        proc.returncode = -1  # (not ours to reap: no "still running" warning when it is dropped)
        proc.stdin.close()  # (the child's copy: the parent's end stays open)


os.register_at_fork(after_in_child=_forget_the_parents_watchdog)


def sweep(token: bytes) -> int:
    """Freeze, then kill, every process carrying ``token``; return how many were killed."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from process_tree import ProcessId, process_table, send_signal, with_token, is_alive  # noqa: E402

    victims: set[ProcessId] = set()
    passed: set[ProcessId] = set()  # (gone, or another user's - sudo's: not ours to signal, nor to wait for)
    for _ in range(200):
        table = process_table()
        fresh = {table[p].ident for p in with_token(token, table, set()) if not table[p].gone} - victims - passed
        if not fresh:
            break
        for ident in fresh:
            (victims if send_signal(ident, signal.SIGSTOP) else passed).add(ident)
    for ident in victims:
        send_signal(ident, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(is_alive(v) for v in victims) and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(victims)


def main() -> None:
    token = sys.argv[1].encode()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass
    sweep(token)


if __name__ == "__main__":
    main()
