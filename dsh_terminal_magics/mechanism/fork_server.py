"""A small process that forks session leaders, so that opening a session never forks this one.

A fork copies this whole process copy-on-write: until the child execs, every page any thread here writes is
copied first - the loop's work for every other session slowed three- to fourfold for the length of each open's
fork - and Python's after-fork work runs in a copy of all of it (3 ms from the fork to the exec here).  The
server is ``python3 -S`` running this file, standard library only; its forks are small.  It is this process's
child, started with the first session; a leader it forks is its child, dies with it (``PR_SET_PDEATHSIG``),
and is reaped by it, which tells us the exit status.  It exits when our end of its socket closes (we exited,
or were killed: the watchdog then ends what the sessions left).

Protocol, over one ``SOCK_SEQPACKET`` socket pair: a request passes descriptors (``SCM_RIGHTS``): the PTY's
slave, a memfd holding JSON ``{argv, env, cwd, umask, limits, fds, abstract_socket_scope}`` (an environment may
be larger than a socket message), then the descriptors the leader keeps, which it gets under the numbers ``fds``
lists.  The reply is ``{"pid": N}`` or ``{"errno": E, "error": "..."}``.  Exit notices ``{"exit": pid, "status":
wait status}`` come on a second pair.
"""
from __future__ import annotations

import array
import fcntl
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import termios
import threading
from types import ModuleType
from typing import Callable

#: Descriptors a request passes at most (the slave, the request, what the leader keeps).
MAX_FDS = 16


class ForkServer:
    """This process's end of the fork server, started on first use (any thread)."""

    _proc: "subprocess.Popen[bytes] | None" = None
    _requests: socket.socket | None = None
    _exits: socket.socket | None = None
    _lock = threading.Lock()
    _exits_lock = threading.Lock()
    #: Exit statuses told and not taken yet, by pid.
    _statuses: dict[int, int] = {}

    @classmethod
    def spawn(cls, argv: list[str], env: dict[str, str], cwd: str, slave: int, keep: tuple[int, ...] = (),
              abstract_socket_scope: bool = False, cap: tuple[tuple[str, ...], int | None] | None = None) -> int:
        """Start ``argv`` as the leader of a new session on the PTY whose slave is ``slave``, with the descriptors
        ``keep`` under their numbers here (and in a Landlock scope of its own abstract Unix sockets, if asked),
        having taken ``cap`` (a :class:`.process_tree.LeaderCap`); returns its pid once it has exec'd (raises
        :class:`OSError` with the child's error when it could not)."""
        request = os.memfd_create("dsh-terminal-spawn", os.MFD_CLOEXEC)
        try:
            os.write(request, json.dumps({"argv": argv, "env": env, "cwd": cwd, "umask": _umask(),
                                          "limits": _limits(), "fds": list(keep),
                                          "abstract_socket_scope": abstract_socket_scope,
                                          "cap": None if cap is None else list(cap)}).encode())
            fds = array.array("i", [slave, request, *keep])
            with cls._lock:
                for attempt in (1, 2):  # (a server that died is started again once)
                    requests = cls._ensure()
                    try:
                        requests.sendmsg([b"spawn"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
                        reply = requests.recv(65536)
                    except OSError:
                        reply = b""
                    if reply:
                        break
                    cls._stop_locked()
                    if attempt == 2:
                        raise OSError(0, "the fork server did not answer")
        finally:
            os.close(request)
        answer = json.loads(reply)
        if "pid" not in answer:
            raise OSError(int(answer.get("errno", 0)), str(answer.get("error", "could not start")))
        return int(answer["pid"])

    @classmethod
    def exit_status(cls, pid: int) -> int | None:
        """The wait status of ``pid``, a leader the server started, once it has told it (never blocks)."""
        with cls._exits_lock:
            exits = cls._exits
            while exits is not None:
                try:
                    notice = json.loads(exits.recv(4096, socket.MSG_DONTWAIT) or b"null")
                except (BlockingIOError, InterruptedError):
                    break
                except (OSError, ValueError):
                    break
                if notice is None:
                    break
                cls._statuses[int(notice["exit"])] = int(notice["status"])
            return cls._statuses.pop(pid, None)

    @classmethod
    def stop(cls) -> None:
        """Close our end (the server exits, and the leaders still running with it) and reap it."""
        with cls._lock:
            cls._stop_locked()

    @classmethod
    def _ensure(cls) -> socket.socket:
        if cls._proc is not None and cls._proc.poll() is None and cls._requests is not None:
            return cls._requests
        cls._stop_locked()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        our_exits, their_exits = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            cls._proc = subprocess.Popen(
                [sys.executable, "-S", os.path.abspath(__file__), str(theirs.fileno()), str(their_exits.fileno())],
                pass_fds=(theirs.fileno(), their_exits.fileno()), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=_server_env())
        except BaseException:
            for sock in (ours, our_exits):
                sock.close()
            raise
        finally:
            theirs.close()
            their_exits.close()
        cls._requests, cls._exits = ours, our_exits
        return ours

    @classmethod
    def _stop_locked(cls) -> None:
        proc, cls._proc = cls._proc, None
        for name in ("_requests", "_exits"):
            sock = getattr(cls, name)
            setattr(cls, name, None)
            if sock is not None:
                sock.close()
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _forget_the_parents_server() -> None:
    """In a forked child: the fork server is the parent's.  Our copies of its sockets are closed, or it would not
    see the parent go while this child lives (and the parent's leaders with it); a spawn here starts a server
    of this process's own."""
    cls = ForkServer
    proc, requests, exits = cls._proc, cls._requests, cls._exits
    cls._proc = cls._requests = cls._exits = None
    cls._lock, cls._exits_lock, cls._statuses = threading.Lock(), threading.Lock(), {}
    for sock in (requests, exits):
        if sock is not None:
            sock.close()
    if proc is not None:
        proc.returncode = -1  # (not ours to reap: no "still running" warning when it is dropped)


os.register_at_fork(after_in_child=_forget_the_parents_server)


def _umask() -> int:
    """This process's umask, read from ``/proc`` (setting it to read it back changes it for a moment under every
    thread: a file another thread made then got the wrong mode)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # (no /proc, or a kernel before 4.7)
    os.umask(mask)
    return mask


def _limits() -> dict[str, list[int]]:
    """This process's resource limits, by name: a leader starts with them, as it would forked from here (a
    notebook that raised ``RLIMIT_NOFILE`` after the server started)."""
    return {name: list(resource.getrlimit(getattr(resource, name))) for name in dir(resource)
            if name.startswith("RLIMIT_")}


def _server_env() -> dict[str, str]:
    """The server's own environment: none of the sessions' markers (the watchdog ends what carries one)."""
    return {key: value for key, value in os.environ.items() if not key.startswith("DSH_TERMINAL_")}


# -- the server ------------------------------------------------------------------------------------------
def serve(requests: socket.socket, exits: socket.socket) -> None:
    """Answer requests until our end closes, telling each child's exit as it is reaped."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (as the watchdog does: not the package)
    import process_tree as tree  # noqa: E402
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    exits.setblocking(False)  # (a notice we never read is dropped - its status then reads unknown - never waited on)
    while True:
        try:
            ready, _, _ = select.select([requests.fileno(), wake_read], [], [])
        except InterruptedError:
            continue
        if wake_read in ready:
            while _drained(wake_read):
                pass
        _tell_exits(exits)
        if requests.fileno() in ready:
            try:
                message, ancillary, _, _ = requests.recvmsg(64, socket.CMSG_SPACE(4 * MAX_FDS))
            except InterruptedError:
                continue
            if not message:
                return
            fds = _received_fds(ancillary)
            try:
                answer = _start(_request(fds[1]), fds[0], fds[2:], tree)
            except Exception as exc:  # noqa: BLE001 - a bad request is answered, never the server's end
                answer = {"errno": 0, "error": f"the fork server could not read the request: {exc}"}
            finally:
                for fd in fds:
                    os.close(fd)
            requests.send(json.dumps(answer).encode())


def _drained(fd: int) -> bool:
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False


def _received_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    return list(fds)


def _request(memfd: int) -> dict:
    with os.fdopen(os.dup(memfd), "rb") as request:
        request.seek(0)
        return json.loads(request.read())


def _tell_exits(exits: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        try:
            exits.send(json.dumps({"exit": pid, "status": status}).encode())
        except OSError:
            pass


def _start(request: dict, slave: int, kept: list[int], tree: ModuleType) -> dict:
    """Fork the leader; its answer once it has exec'd, or its error."""
    errors_read, errors_write = os.pipe2(os.O_CLOEXEC)
    leader_steps = tree.make_leader_preexec(os.getpid())  # (what this server ignores is set back in the child)
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(errors_read)
        os.close(errors_write)
        return {"errno": exc.errno or 0, "error": exc.strerror or str(exc)}
    if pid == 0:
        pipe_end = [errors_write]  # (where the error goes: the pipe's end moves in the child)
        try:
            _become_leader(request, slave, kept, pipe_end, leader_steps, tree)
        except BaseException as exc:  # noqa: BLE001 - told to the server, whatever it is
            code = exc.errno if isinstance(exc, OSError) and exc.errno else 0
            os.write(pipe_end[0], json.dumps({"errno": code, "error": str(exc)}).encode())
        finally:
            os._exit(127)
    os.close(errors_write)
    with open(errors_read, "rb") as errors:
        failure = errors.read()
    if failure:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        return json.loads(failure)
    return {"pid": pid}


def _become_leader(request: dict, slave: int, kept: list[int], errors: list[int], leader_steps: Callable[[], None],
                   tree: ModuleType) -> None:
    """In the child: a new session on the PTY, ``kept`` under the numbers the request gives, ``leader_steps``
    (:func:`.process_tree.make_leader_preexec`'s, for this server; ``tree`` is that module), then the exec.
    ``errors[0]`` is the error pipe's end, moved above every number the leader keeps."""
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    targets = [int(fd) for fd in request["fds"]]
    above = max([2, slave, errors[0], *kept, *targets]) + 1  # (moved up first: no number is taken twice)
    errors[0] = errors_write = fcntl.fcntl(errors[0], fcntl.F_DUPFD_CLOEXEC, above)
    kept = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in kept]
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    for fd, target in zip(kept, targets):
        os.dup2(fd, target)
    for low, high in zip([2, *sorted({*targets, errors_write})], [*sorted({*targets, errors_write}), 1 << 20]):
        os.closerange(low + 1, high)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    for name, (soft, hard) in request["limits"].items():
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError, AttributeError):
            pass  # (one the server may not raise back: it keeps the server's)
    signal.set_wakeup_fd(-1)  # (the server's SIGCHLD wake-up: its descriptor number may be a kept one's now)
    leader_steps()
    if request.get("cap") is not None:
        tree.join_cap(*request["cap"])
    if request.get("abstract_socket_scope"):
        tree.enter_abstract_socket_scope()
    os.execve(request["argv"][0], request["argv"], request["env"])


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])), socket.socket(fileno=int(sys.argv[2])))
