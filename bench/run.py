"""Benchmarks against what people use instead; every figure is a ratio to a baseline run alongside it.

    python3 bench/run.py            # full run (several minutes)
    python3 bench/run.py --quick    # small sizes, used by the test suite so the bench cannot rot
    python3 bench/run.py --check    # exit status 1 when any target misses (targets are ratios in the run)
    python3 bench/run.py --readme   # also put this run's tables into README.md (see report.py)

Each benchmark interleaves the project and its baselines in the same process
run and reports median and p95 over many repetitions, then the ratio and a
pass/fail line per target.  Results are also written as JSON to
``bench/results/latest.json``, and as the README's tables to ``bench/results/latest.md``.
"""
from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import platform
import pty
import random
import re
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Callable, Sequence

import pexpect

from dsh_terminal_magics import Agent, TerminalTools
from dsh_terminal_magics.tools import sandbox_problem
from dsh_terminal_magics.mechanism.manager import _PROCESS_TOKEN
from dsh_terminal_magics.mechanism.process_tree import process_table, with_token

RESULTS = Path(__file__).resolve().parent / "results"
TMUX_POLL = 0.1


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, float]:
    return {"median_ms": statistics.median(values) * 1000, "p95_ms": pct(values, 0.95) * 1000, "n": len(values)}


def rss_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def leftovers() -> int:
    table = process_table()
    return sum(1 for p in with_token(_PROCESS_TOKEN.encode(), table, set()) if not table[p].gone)


# -- what idling costs on this machine ----------------------------------------------------------------
def python_work() -> str:
    """A fixed unit of interpreter work, ~0.2 ms warm here (dicts, JSON, a regex: the kind a send does)."""
    parts = {str(i): json.dumps({"a": i, "b": [i, i + 1]}) for i in range(30)}
    return re.sub(r"\d", "x", "".join(parts.values()))


def bench_idle_costs(reps: int) -> dict:
    """Two properties of the machine that decide how much an idle-then-busy call costs: how long one thread
    takes to wake another blocked in ``epoll`` (after 0.2 ms, 10 ms and 100 ms of idling), and how much slower
    the same short unit of Python work runs right after the thread slept 10 ms than back to back (caches and
    the virtual CPU go cold).  Interleaved, ``reps`` each."""
    import select
    import socket
    import threading

    left, right = socket.socketpair()
    woke: list[float] = []
    done = threading.Semaphore(0)

    def waiter() -> None:
        poller = select.epoll()
        poller.register(right.fileno(), select.EPOLLIN)
        while True:
            poller.poll()
            woke.append(time.perf_counter())
            if right.recv(1) == b"q":
                return
            done.release()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    gaps = ((0.0002, "wake after 0.2 ms idle"), (0.01, "wake after 10 ms idle"), (0.1, "wake after 100 ms idle"))
    times: dict[str, list[float]] = {k: [] for k in [name for _, name in gaps] + ["work back to back",
                                                                                "work after 10 ms asleep"]}
    for _ in range(reps):
        for gap, name in gaps:
            time.sleep(gap)
            started = time.perf_counter()
            left.send(b"x")
            done.acquire()
            times[name].append(woke[-1] - started)
        python_work()
        started = time.perf_counter()
        python_work()
        times["work back to back"].append(time.perf_counter() - started)
        time.sleep(0.01)
        started = time.perf_counter()
        python_work()
        times["work after 10 ms asleep"].append(time.perf_counter() - started)
    left.send(b"q")
    thread.join()
    left.close()
    right.close()
    med = {f"{k} ms": statistics.median(v) * 1000 for k, v in times.items()}
    return {**med, "cold_work_factor": med["work after 10 ms asleep ms"] / med["work back to back ms"]}


def bench_idle_sweep(reps: int, idles: Sequence[float] = (0.001, 0.01, 0.03, 0.1)) -> dict:
    """``echo hi``, ours and pexpect, after each of ``idles`` seconds of doing nothing (interleaved, ``reps``
    each): the idling after which the two part ways."""
    tools = TerminalTools()
    agent = Agent("bench-idle")
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    child = PexpectPrompt("shell")
    methods: dict[str, Callable[[], object]] = {
        "ours": lambda: tools.call("terminal_send", {"sessionId": sid, "text": "echo hi"}, agent=agent),
        "pexpect": lambda: child.round_trip("echo hi")}
    times: dict[tuple[float, str], list[float]] = {(idle, name): [] for idle in idles for name in methods}
    order = list(times)
    rnd = random.Random(16)
    for _ in range(reps):
        rnd.shuffle(order)
        for idle, name in order:
            time.sleep(idle)
            started = time.perf_counter()
            methods[name]()
            times[(idle, name)].append(time.perf_counter() - started)
    child.close()
    tools.shutdown()
    return {f"{idle * 1000:g} ms": {name: statistics.median(times[(idle, name)]) * 1000 for name in methods}
            for idle in idles}


def bench_cold_send(reps: int, idle: float = 0.1) -> dict:
    """What going cold costs a send, and where: ``echo hi`` after ``idle`` seconds with nothing done, right after
    a send to another session (the same path just ran), and after the caller spun its CPU for 1 ms (the CPU is
    awake, our code is not); pexpect after the same idling and right after a round trip on another child.
    Interleaved, ``reps`` each."""
    tools = TerminalTools()
    agent = Agent("bench-cold")
    sids = [tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id for _ in range(2)]
    children = [PexpectPrompt("shell"), PexpectPrompt("shell")]

    def ours(sid: str) -> Callable[[], object]:
        return lambda: tools.call("terminal_send", {"sessionId": sid, "text": "echo hi"}, agent=agent)

    def spin() -> None:
        until = time.perf_counter() + 0.001
        while time.perf_counter() < until:
            pass

    modes: dict[str, tuple[Callable[[], object] | None, Callable[[], object]]] = {
        "ours after idling": (None, ours(sids[0])),
        "ours right after a send to another session": (ours(sids[1]), ours(sids[0])),
        "ours after the caller spun 1 ms": (spin, ours(sids[0])),
        "pexpect after idling": (None, lambda: children[0].round_trip("echo hi")),
        "pexpect right after another child's round trip": (lambda: children[1].round_trip("echo hi"),
                                                           lambda: children[0].round_trip("echo hi")),
    }
    times: dict[str, list[float]] = {name: [] for name in modes}
    order = list(modes)
    rnd = random.Random(16)
    for _ in range(reps):
        rnd.shuffle(order)
        for name in order:
            before, measured = modes[name]
            time.sleep(idle)
            if before is not None:
                before()
            started = time.perf_counter()
            measured()
            times[name].append(time.perf_counter() - started)
    for child in children:
        child.close()
    tools.shutdown()
    return {"idle_s": idle, **{f"{k} ms": statistics.median(v) * 1000 for k, v in times.items()}}


# -- round trip ---------------------------------------------------------------------------------
def interleave(methods: dict[str, Callable[[], object]], reps: int, seed: int = 16) -> dict[str, list[float]]:
    """Time every method ``reps`` times, running each once per round in an order shuffled anew each round
    (seeded: runs are repeatable), so that over the run each method follows every other about equally often.

    (Rotating a fixed order each round is not enough: it keeps the cyclic order, so with six methods each
    one runs right after the same one five times in six and never after some - warm behind a fast one every
    time, or cold behind a sleeping one.)
    """
    shuffle = random.Random(seed).shuffle
    times: dict[str, list[float]] = {name: [] for name in methods}
    order = list(methods)
    for _ in range(reps):
        shuffle(order)
        for name in order:
            started = time.perf_counter()
            methods[name]()
            times[name].append(time.perf_counter() - started)
    return times


class PexpectPrompt:
    """The fastest known-prompt baseline: pexpect with no send delay, expecting a unique prompt."""

    def __init__(self, kind: str) -> None:
        if kind == "shell":
            self.child = pexpect.spawn("bash", ["--noprofile", "--norc"], encoding="utf-8",
                                       env={**os.environ, "PS1": "PEXPECT-PROMPT> ", "TERM": "dumb"})
            self.prompt = "PEXPECT-PROMPT> "
        else:
            self.child = pexpect.spawn(sys.executable, ["-q", "-i"], encoding="utf-8",
                                       env={**os.environ, "PYTHONSTARTUP": "", "TERM": "dumb"})
            self.prompt = ">>> "
        self.child.delaybeforesend = None
        self.child.delayafterclose = 0
        self.child.delayafterterminate = 0
        self.child.expect_exact(self.prompt, timeout=30)

    def round_trip(self, text: str) -> None:
        self.child.sendline(text)
        self.child.expect_exact(self.prompt, timeout=30)

    def close(self) -> None:
        self.child.close(force=True)


class TwoThreadFloor:
    """Not a competitor - a reference: the least our design can do per round trip, measured beside it.

    The same shape as ours (a caller thread hands the text to a loop thread through an eventfd; the loop
    writes it, waits on the PTY with a 1 ms tick, and hands the result back through a lock), with the
    readiness rules cut to one process: the program ran since the write (``schedstat``), it now sleeps in a
    read-type system call on fd 0 (``syscall``, with ``schedstat`` unchanged across the look), and no input
    is left unread (``TIOCINQ``).  No prompt is known.  What ours costs beyond this row is Python on the
    path (validation, the tool layer, output normalising, the general check), not the two hand-offs.
    """

    READ_WAITS = {0, 7, 23, 270, 271}  # read, poll, select, pselect6, ppoll (x86_64)

    def __init__(self, kind: str) -> None:
        import fcntl
        import select
        import termios
        import threading

        argv = ["bash", "--noprofile", "--norc"] if kind == "shell" else [sys.executable, "-q", "-i"]
        self.fd, self.slave = os.openpty()
        self.pid = os.fork()
        if self.pid == 0:
            os.setsid()
            fcntl.ioctl(self.slave, termios.TIOCSCTTY, 0)
            for fd in (0, 1, 2):
                os.dup2(self.slave, fd)
            os.closerange(3, 1024)
            os.execvpe(argv[0], argv, {**os.environ, "TERM": "dumb", "PYTHONSTARTUP": ""})
        os.set_blocking(self.fd, False)
        self.bell = os.eventfd(0, os.EFD_NONBLOCK)
        self.job: tuple[bytes, threading.Lock] | None = None
        self.closing = False
        self.output_seen = False
        self.syscall = os.open(f"/proc/{self.pid}/syscall", os.O_RDONLY)
        self.schedstat = os.open(f"/proc/{self.pid}/task/{self.pid}/schedstat", os.O_RDONLY)
        self.unread = lambda: struct.unpack("i", fcntl.ioctl(self.slave, termios.TIOCINQ, b"\0" * 4))[0]
        self.transit = select.poll()  # (polling the slave hands it the input still in transit, as ours does)
        self.transit.register(self.slave, select.POLLIN)
        self.epoll = select.epoll()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        self.round_trip("")  # (the first prompt)

    def _waiting(self, fence: bytes) -> bool:
        if not fence and not self.output_seen:
            return False  # (the first prompt: not printed yet)
        self.transit.poll(0)
        before = os.pread(self.schedstat, 100, 0)
        if before == fence:
            return False  # (it has not run on our input yet)
        call = os.pread(self.syscall, 200, 0).split()
        return (bool(call) and call[0].isdigit() and int(call[0]) in self.READ_WAITS
                and os.pread(self.schedstat, 100, 0) == before and self.unread() == 0)

    def _loop(self) -> None:
        self.epoll.register(self.bell, 1)
        self.epoll.register(self.fd, 1)
        fence = b""
        while not self.closing:
            for fd, _ in self.epoll.poll(0.001 if self.job else -1):
                if fd == self.bell:
                    os.eventfd_read(self.bell)
                    if self.job is not None:
                        # (the first prompt: no input to fence - the program may be at it already, and then it
                        # never runs again: the first round trip waited for it for ever)
                        fence = os.pread(self.schedstat, 100, 0) if self.job[0] else b""
                        os.write(self.fd, self.job[0])
                else:
                    self._drain()
            if self.job is not None and self._waiting(fence):
                self._drain()
                done, self.job = self.job[1], None
                done.release()

    def _drain(self) -> None:
        try:
            while True:
                size = len(os.read(self.fd, 65536))
                self.output_seen = self.output_seen or size > 0
                if size < 65536:
                    break
        except OSError:
            pass

    def round_trip(self, text: str) -> None:
        import threading

        done = threading.Lock()
        done.acquire()
        self.job = ((text + "\r").encode() if text else b"", done)
        os.eventfd_write(self.bell, 1)
        if not done.acquire(timeout=30):
            raise RuntimeError(f"two-thread floor: no prompt after {text!r} within 30 s")

    def close(self) -> None:
        self.closing = True
        os.eventfd_write(self.bell, 1)
        self.thread.join()
        for fd in (self.fd, self.slave, self.bell, self.syscall, self.schedstat):
            os.close(fd)
        self.epoll.close()
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)


class TmuxPolling:
    """How agent harnesses do it: send-keys, then capture-pane until the output is there.

    ``first`` is the wait before the first capture and ``poll`` the gap between captures: the harness
    default (100 ms, then every 100 ms) and a fair variant (at once, then every 10 ms).
    """

    def __init__(self, kind: str, first: float = TMUX_POLL, poll: float = TMUX_POLL) -> None:
        self.first, self.poll = first, poll
        self.name = f"dshbench{os.getpid()}{kind}{int(poll * 1000)}"
        command = "bash --noprofile --norc" if kind == "shell" else f"{sys.executable} -q"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "160", "-y", "40", command],
                       check=True)
        self.count = 0
        self.kind = kind

    def round_trip(self, text: str) -> None:
        self.count += 1
        marker = f"tm{self.count}x"
        line = f"echo {marker}" if self.kind == "shell" else f"print('{marker}')"
        subprocess.run(["tmux", "send-keys", "-t", self.name, line, "Enter"], check=True)
        wait = self.first
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if wait:
                time.sleep(wait)
            pane = subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True,
                                  text=True).stdout
            if re.search(rf"^{marker}$", pane, re.M):
                return
            wait = self.poll
        raise RuntimeError(f"tmux baseline: {marker!r} did not show in its pane within 30 s")

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def bench_round_trip(reps: int) -> dict:
    tools = TerminalTools()
    agent = Agent("bench")
    out: dict = {}
    for kind, text in (("shell", "echo hi"), ("python", "print(2+2)")):
        sid = tools.call("terminal_open", {"type": kind}, agent=agent).session_id
        ours = lambda: tools.call("terminal_send", {"sessionId": sid, "text": text}, agent=agent)  # noqa: E731
        pexp = PexpectPrompt(kind)
        floor = TwoThreadFloor(kind)
        tmux = TmuxPolling(kind) if shutil.which("tmux") else None
        tmux_fair = TmuxPolling(kind, first=0.0, poll=0.01) if tmux is not None else None
        argv = ["bash", "-c", "echo hi"] if kind == "shell" else [sys.executable, "-c", "print(2+2)"]
        methods: dict[str, Callable[[], object]] = {
            "ours (tools.call)": ours,
            "pexpect, known prompt": lambda: pexp.round_trip(text),
            "subprocess.run (stateless)": lambda: subprocess.run(argv, capture_output=True),
            "reference: two-thread floor": lambda: floor.round_trip(text),
        }
        if tmux is not None and tmux_fair is not None:
            methods["tmux send-keys + 100 ms capture-pane"] = lambda: tmux.round_trip(text)
            methods["tmux send-keys + capture at once, then every 10 ms"] = lambda: tmux_fair.round_trip(text)
        times = interleave(methods, reps)
        # The same two back to back, nothing else in the round: each follows a send of its own or the other's,
        # so both run warm (what the interleaved rows above pay extra is the cost of running cold).
        warm = interleave({"ours (tools.call), back to back with pexpect": ours,
                           "pexpect, back to back with ours": lambda: pexp.round_trip(text)}, reps // 2)
        times.update(warm)
        pexp.close()
        floor.close()
        if tmux is not None and tmux_fair is not None:
            tmux.close()
            tmux_fair.close()
        tools.call("terminal_close", {"sessionId": sid}, agent=agent)
        out[kind] = {name: summary(values) for name, values in times.items()}
    out["prompt-free"] = prompt_free_round_trips(tools, agent, max(20, reps // 10))
    tools.shutdown()
    # Last: unloading the extension closes every session of every owner in the process.
    out["shell"]["ours (%term_send magic)"] = summary(magic_round_trips(reps))
    return out


def magic_round_trips(reps: int) -> list[float]:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "dsh_terminal_magics")
    sink = io.StringIO()
    with redirect_stdout(sink):
        shell.run_line_magic("term_open", "")
        values = []
        for _ in range(reps):
            started = time.perf_counter()
            shell.run_line_magic("term_send", "echo hi")
            values.append(time.perf_counter() - started)
    shell.run_line_magic("unload_ext", "dsh_terminal_magics")
    return values


def prompt_free_round_trips(tools: TerminalTools, agent: Agent, reps: int) -> dict:
    """The same code for bash, python3, node and sqlite3: no prompt is configured anywhere."""
    programs = {"bash": (None, "echo hi"), "python3": (f"{sys.executable} -q", "print(2+2)"),
                "node": ("node", "1+1"), "sqlite3": ("sqlite3", "select 1;")}
    out = {}
    for label, (start, line) in programs.items():
        if start is not None and shutil.which(start.split()[0]) is None:
            out[label] = {"skipped": f"{start.split()[0]} not installed"}
            continue
        sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
        if start is not None:
            r = tools.call("terminal_send", {"sessionId": sid, "text": start}, agent=agent)
            assert r.wait_reason == "stdin_read", (label, r)
        values, reasons = [], set()
        for _ in range(reps):
            started = time.perf_counter()
            r = tools.call("terminal_send", {"sessionId": sid, "text": line}, agent=agent)
            values.append(time.perf_counter() - started)
            reasons.add(r.wait_reason)
        out[label] = {**summary(values), "wait_reasons": sorted(reasons)}
        tools.call("terminal_close", {"sessionId": sid}, agent=agent)
    return out


# -- streaming ---------------------------------------------------------------------------------------
def producer(total: int) -> str:
    return f"yes 'streaming benchmark line 0123456789 abcdefghijklmnopqrstuvwxyz' | head -c {total}"


def bare_pty_read(total: int) -> float:
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp("bash", ["bash", "-c", producer(total)])
    started = time.perf_counter()
    got = 0
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        got += len(data)
    elapsed = time.perf_counter() - started
    os.close(fd)
    os.waitpid(pid, 0)
    return elapsed


def ours_stream(total: int) -> tuple[float, int]:
    """Run in a child process so its peak RSS growth is its own."""
    code = f"""
import time, json
from dsh_terminal_magics import Agent, TerminalTools
tools = TerminalTools(); agent = Agent("stream")
sid = tools.call("terminal_open", {{"type": "shell"}}, agent=agent).session_id
tools.call("terminal_send", {{"sessionId": sid, "text": "true"}}, agent=agent)
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
base = peak = rss()
started = time.perf_counter()
job = tools.call("terminal_send", {{"sessionId": sid, "text": {producer(total)!r}, "run_in_background": True,
                                   "timeout": 3600, "idle": 3600}}, agent=agent).job_id
while tools.jobs.sync.list(agent)[0].status == "running":
    peak = max(peak, rss())
    time.sleep(0.005)
elapsed = time.perf_counter() - started
tools.shutdown()
print(json.dumps([elapsed, peak - base]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    elapsed, growth_kib = json.loads(out.stdout.strip().splitlines()[-1])
    return elapsed, growth_kib


def bench_streaming(total: int, reps: int) -> dict:
    ours, bare, growth = [], [], []
    for _ in range(reps):
        bare.append(bare_pty_read(total))
        elapsed, rss = ours_stream(total)
        ours.append(elapsed)
        growth.append(rss)
    mb = total / 1e6
    return {"bytes": total, "ours_MBps": mb / statistics.median(ours), "bare_MBps": mb / statistics.median(bare),
            "ratio": statistics.median(bare) / statistics.median(ours),  # ours / bare throughput
            "peak_rss_growth_MiB": max(growth) / 1024}


# -- scale ----------------------------------------------------------------------------------------------
def pexpect_bash(delays: bool = False) -> pexpect.spawn:
    """A pexpect bash at a known prompt; ``delays=False`` tunes the delays where they act: no send delay,
    no sleep after close, 10 ms between terminate signals (0 makes ptyprocess give up on a live child)."""
    child = pexpect.spawn("bash", ["--noprofile", "--norc"], env={**os.environ, "PS1": "PX> "}, encoding="utf-8")
    if not delays:
        child.delaybeforesend = None
        # ptyprocess keeps its own close delays: set them where they act (child.ptyproc)
        child.ptyproc.delayafterclose = 0
        child.ptyproc.delayafterterminate = 0.01
    child.expect_exact("PX> ")
    return child


def bench_scale(count: int, samples: int) -> dict:
    """Opening and closing ``count`` sessions: the same shape on both sides (sequential against
    sequential, concurrent against a thread pool of pexpect spawns), interleaved, ``samples`` each."""
    from concurrent.futures import ThreadPoolExecutor

    tools = TerminalTools(config={"maxSessionsPerAgent": 256})  # one agent holds all of them here
    agent = Agent("scale")
    manager = tools.manager
    tools.call("terminal_close", {"sessionId": tools.call("terminal_open", {"type": "shell"}, agent=agent)
                                  .session_id}, agent=agent)
    # Ours above opens through the manager: containment by tracking processes, as bare as pexpect's children.  The
    # tools open agents' sessions with their default containment: a pid namespace each where bubblewrap works.
    contained = TerminalTools(config={"maxSessionsPerAgent": 256})
    times: dict[str, list[float]] = {k: [] for k in (
        "ours sequential", "pexpect sequential", "ours concurrent", "pexpect thread pool",
        "ours sequential, the tools' default containment", "ours close (verified quiescence)",
        "pexpect close (tuned delays)")}
    rss_growth, fds_growth, scrollback = 0.0, 0.0, 0.0

    def ours(concurrent: bool) -> float:
        nonlocal rss_growth, fds_growth, scrollback
        rss0, fds0 = rss_kib(), fd_count()
        started = time.perf_counter()
        if concurrent:
            async def open_all() -> list:
                return await asyncio.gather(*(manager.aio.open(agent, "shell") for _ in range(count)))
            infos = asyncio.run(open_all())
        else:
            infos = [manager.sync.open(agent, "shell") for _ in range(count)]
        elapsed = time.perf_counter() - started
        assert all(i.status == "running" and i.last_wait_reason == "stdin_read" for i in infos)
        rss_growth = (rss_kib() - rss0) / count
        fds_growth = (fd_count() - fds0) / count
        scrollback = sum(len(manager.loop_thread.call(manager.session, agent, i.session_id).scrollback.partial_line)
                         for i in infos) / 1024 / count
        started = time.perf_counter()
        tools.close_owner(agent)
        times["ours close (verified quiescence)"].append(time.perf_counter() - started)
        return elapsed

    def ours_contained() -> float:
        started = time.perf_counter()
        for _ in range(count):
            contained.call("terminal_open", {"type": "shell"}, agent=agent)
        elapsed = time.perf_counter() - started
        contained.close_owner(agent)
        return elapsed

    def theirs(concurrent: bool) -> float:
        started = time.perf_counter()
        if concurrent:
            with ThreadPoolExecutor(max_workers=16) as pool:
                children = list(pool.map(lambda _: pexpect_bash(), range(count)))
        else:
            children = [pexpect_bash() for _ in range(count)]
        elapsed = time.perf_counter() - started
        started = time.perf_counter()
        for child in children:
            child.close(force=True)
        times["pexpect close (tuned delays)"].append(time.perf_counter() - started)
        return elapsed

    for i in range(samples):
        pairs = [("ours sequential", lambda: ours(False)), ("pexpect sequential", lambda: theirs(False)),
                 ("ours concurrent", lambda: ours(True)), ("pexpect thread pool", lambda: theirs(True)),
                 ("ours sequential, the tools' default containment", ours_contained)]
        for name, fn in pairs[i % 2:] + pairs[:i % 2]:  # alternate who goes first
            times[name].append(fn())
    ours_left = leftovers()
    # pexpect with its default delays, for reference: ptyprocess sleeps 0.1 s in every close
    defaults = [pexpect_bash(delays=True) for _ in range(min(count, 20))]
    started = time.perf_counter()
    for child in defaults:
        child.close(force=True)
    default_close_each = (time.perf_counter() - started) / len(defaults)
    tools.shutdown()
    contained.shutdown()
    med = {name: statistics.median(values) for name, values in times.items()}
    return {"sessions": count, "samples": samples, **{f"{k} s": v for k, v in med.items()},
            "sequential_open_ratio": med["ours sequential"] / med["pexpect sequential"],
            "sequential_open_ratio_contained": med["ours sequential, the tools' default containment"]
            / med["pexpect sequential"],
            "default containment": "pid namespace" if sandbox_problem() is None else "tracking",
            "concurrent_open_ratio": med["ours concurrent"] / med["pexpect thread pool"],
            "pexpect close with default delays, per session s": default_close_each,
            "rss_per_session_KiB": rss_growth, "scrollback_per_session_KiB": scrollback,
            "fds_per_session": fds_growth, "leftover_processes": ours_left}


# -- many agents at once ----------------------------------------------------------------------------
def loop_thread_cpu(tools: TerminalTools) -> float:
    """Seconds the package's loop thread has been on a CPU so far (its scheduler stats: the tick-sampled
    utime/stime of ``/proc/.../stat`` overcharge a thread that wakes on timers)."""
    tid = tools.manager.loop_thread.thread.native_id
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def own_cpu() -> float:
    """CPU seconds this process has used so far (all its threads)."""
    times = os.times()
    return times.user + times.system


def processes_cpu(pids: Sequence[int]) -> float:
    """CPU seconds the processes ``pids`` have used so far (those gone count nothing)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def drive(workers: list[Callable[[], object]], seconds: float) -> tuple[list[float], float]:
    """Each worker in its own thread, calling its function in a loop for ``seconds``: every call's latency, and
    the seconds the threads ran (see :func:`load`)."""
    import threading

    latencies: list[list[float]] = [[] for _ in workers]
    gate = threading.Barrier(len(workers) + 1)
    stop_at = [0.0]

    def work(i: int) -> None:
        gate.wait()
        fn, mine = workers[i], latencies[i]
        while True:
            started = time.perf_counter()
            if started >= stop_at[0]:
                return
            fn()
            mine.append(time.perf_counter() - started)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(workers))]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + seconds
    gate.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return [v for per in latencies for v in per], time.perf_counter() - began


def drive_paced(workers: list[Callable[[], object]], seconds: float, period: float) -> tuple[list[float], float]:
    """Each worker sends once every ``period`` seconds (an agent between model turns): latency under load
    that leaves room, unlike :func:`drive`, where latency is just the number of workers over throughput."""
    def paced(fn: Callable[[], object], offset: float) -> Callable[[], object]:
        state = {"next": time.perf_counter() + offset}

        def call() -> object:
            delay = state["next"] - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            state["next"] += period
            started = time.perf_counter()
            fn()
            timed.append(time.perf_counter() - started)
            return None
        return call

    timed: list[float] = []
    drive([paced(fn, period * i / len(workers)) for i, fn in enumerate(workers)], seconds)
    return timed, seconds


def load(*runs: tuple[list[float], float]) -> dict:
    """Throughput and latency over one or more runs of :func:`drive` or :func:`drive_paced`, pooled."""
    flat = [v for latencies, _ in runs for v in latencies]
    seconds = sum(elapsed for _, elapsed in runs)
    return {"sends": len(flat), "sends_per_s": len(flat) / seconds, "p50_ms": pct(flat, 0.5) * 1000,
            "p95_ms": pct(flat, 0.95) * 1000}


def bench_many_agents(count: int, seconds: float, sweep: tuple[int, ...]) -> dict:
    """``count`` agents, each with its own shell, each sending ``echo hi`` in a loop (one thread per agent),
    against ``count`` threads each driving pexpect on a known prompt; then a sweep of agent counts to show
    where the single loop thread saturates (its CPU share beside the throughput).

    Both sets of shells stay open throughout, and ours and pexpect's alternate in windows of half of
    ``seconds`` (ours first, then pexpect first): a slow spell of the machine falls on both sides alike."""
    tools = TerminalTools()
    agents = [Agent(f"agent-{i}") for i in range(count)]
    opened = [tools.call("terminal_open", {"type": "shell"}, agent=a) for a in agents]
    sids = [info.session_id for info in opened]
    children = [PexpectPrompt("shell") for _ in range(count)]

    def ours(i: int) -> Callable[[], object]:
        args = {"sessionId": sids[i], "text": "echo hi"}
        return lambda: tools.call("terminal_send", args, agent=agents[i])

    mine = [ours(i) for i in range(count)]
    theirs: list[Callable[[], object]] = [(lambda c=c: c.round_trip("echo hi")) for c in children]
    half = seconds / 2
    single = load(drive([ours(0)], max(1.0, seconds / 4)))
    single_paced = load(drive_paced([ours(0)], max(2.0, seconds / 2), period=0.1))
    runs: dict[str, list[tuple[list[float], float]]] = {"ours": [], "theirs": [], "ours paced": [],
                                                          "theirs paced": []}
    cpu = 0.0
    # CPU a send, back to back: the whole process's (ours: the loop and the callers; pexpect: its threads) and
    # the shells' own.
    spent: dict[str, list[float]] = {"ours": [0.0, 0.0], "theirs": [0.0, 0.0]}
    shells = {"ours": [info.pid for info in opened], "theirs": [c.child.pid for c in children]}
    for side in ("ours", "theirs", "theirs", "ours"):
        workers = mine if side == "ours" else theirs
        cpu0, own0, shells0 = loop_thread_cpu(tools), own_cpu(), processes_cpu(shells[side])
        runs[side].append(drive(workers, half))
        spent[side][0] += own_cpu() - own0
        spent[side][1] += processes_cpu(shells[side]) - shells0
        if side == "ours":
            cpu += loop_thread_cpu(tools) - cpu0
        runs[f"{side} paced"].append(drive_paced(workers, half, period=0.1))
    many, paced = load(*runs["ours"]), load(*runs["ours paced"])
    many["loop_thread_cpu_percent"] = 100 * cpu / seconds
    many["loop_cpu_us_per_send"] = 1e6 * cpu / max(many["sends"], 1)
    saturation = {}
    for n in sweep:
        cpu0 = loop_thread_cpu(tools)
        row = load(drive([ours(i) for i in range(n)], max(1.0, seconds / 3)))
        row["loop_thread_cpu_percent"] = 100 * (loop_thread_cpu(tools) - cpu0) / max(1.0, seconds / 3)
        saturation[str(n)] = row
    tools.shutdown()
    for c in children:
        c.close()
    them, them_paced = load(*runs["theirs"]), load(*runs["theirs paced"])
    for side, row in (("ours", many), ("theirs", them)):
        row["process_cpu_us_per_send"] = 1e6 * spent[side][0] / max(row["sends"], 1)
        row["shell_cpu_us_per_send"] = 1e6 * spent[side][1] / max(row["sends"], 1)
    return {"agents": count, "seconds": seconds, "single agent, back to back": single,
            "single agent, every 100 ms": single_paced, "ours, back to back": many,
            "pexpect threads, back to back": them, "ours, every 100 ms each": paced,
            "pexpect threads, every 100 ms each": them_paced, "sweep": saturation,
            "paced_p95_vs_single_median": paced["p95_ms"] / single_paced["p50_ms"],
            "throughput_ratio": many["sends_per_s"] / them["sends_per_s"]}


# -- readiness after quiet periods ---------------------------------------------------------------------
def bench_readiness(reps: int, cpu_window: float, compute_window: float) -> dict:
    """``cat``, ``sleep 0; cat`` and ``sleep 0.2; cat``, interleaved: the send returns when cat blocks.

    The quiet-period penalty is median(sleep 0.2; cat - 0.2 s) - median(sleep 0; cat): the same work, only
    the quiet period differs.  Also: python sleeping or computing, then ``input()``; the loop thread's CPU
    while a silent foreground ``sleep`` send waits (``cpu_window`` s), and over the first 1 s and
    ``compute_window`` s of a silent computing program.
    """
    tools = TerminalTools()
    agent = Agent("readiness")
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id

    def run(command: str) -> float:
        started = time.perf_counter()
        r = tools.call("terminal_send", {"sessionId": sid, "text": command}, agent=agent)
        elapsed = time.perf_counter() - started
        assert r.wait_reason == "stdin_read", r
        tools.call("terminal_send", {"sessionId": sid, "text": "", "submit": False, "keys": ["C-d"]}, agent=agent)
        return elapsed

    times: dict[str, list[float]] = {"cat": [], "sleep 0; cat": [], "sleep 0.2; cat (minus 0.2 s)": []}
    # The shell itself stamps the moment it goes to read, after the quiet period ends with a process's exit:
    # bash writes $EPOCHREALTIME to a file, then its `read` builtin blocks (no program to start in between,
    # unlike cat, whose start on a cold CPU is in the figures above).  The delay is result time minus that.
    stamp = Path(f"/tmp/dsh-bench-stamp-{os.getpid()}")
    stamped: dict[str, list[float]] = {"sleep 0": [], "sleep 0.2": []}

    def detected(command: str) -> float:
        text = f"{command}; printf %s \"$EPOCHREALTIME\" > {stamp}; read x"
        r = tools.call("terminal_send", {"sessionId": sid, "text": text}, agent=agent)
        delay = time.time() - float(stamp.read_text())  # (before the C-d: read after it, it held its round trip)
        assert r.wait_reason == "stdin_read", r
        tools.call("terminal_send", {"sessionId": sid, "text": "", "submit": False, "keys": ["C-d"]}, agent=agent)
        return delay

    for _ in range(reps):
        times["cat"].append(run("cat"))
        times["sleep 0; cat"].append(run("sleep 0; cat"))
        times["sleep 0.2; cat (minus 0.2 s)"].append(run("sleep 0.2; cat") - 0.2)
        for command in stamped:
            stamped[command].append(detected(command))
    # In-process quiet periods: the program sleeps or computes, then reads (no process exits, no output to
    # signal it).  It writes time.monotonic() to a file just before input(): the delay is result time minus that.
    waits = {"python time.sleep(0.2); input()": "time.sleep(0.2)", "python time.sleep(2); input()": "time.sleep(2)",
             "python computes 0.3 s; input()": "while time.monotonic() - t < 0.3: pass",
             "python computes 2 s; input()": "while time.monotonic() - t < 2: pass"}
    in_process: dict[str, list[float]] = {label: [] for label in waits}
    for _ in range(max(1, reps // 10)):
        for label, wait in waits.items():
            code = (f"import time; t = time.monotonic()\n{wait}\n"
                    f"open({str(stamp)!r}, 'w').write(repr(time.monotonic())); input()")
            tools.call("terminal_send", {"sessionId": sid, "text": f"{sys.executable} -c \"{code}\""}, agent=agent)
            in_process[label].append(time.monotonic() - float(stamp.read_text()))
            tools.call("terminal_send", {"sessionId": sid, "text": "", "submit": False, "keys": ["C-d"]},
                       agent=agent)
    stamp.unlink(missing_ok=True)
    cpu_sleeping = loop_cpu_while(tools, agent, sid, f"sleep {cpu_window + 30:.0f}", cpu_window)
    computing = f"{sys.executable} -c 'while 1: pass'"
    cpu_computing = {f"first {whole:.0f} s": loop_cpu_while(tools, agent, sid, computing, whole, 0.0)
                     for whole in (1.0, compute_window)}
    tools.shutdown()
    out: dict = {name: summary(values) for name, values in times.items()}
    out["quiet_penalty_ms"] = out["sleep 0.2; cat (minus 0.2 s)"]["median_ms"] - out["sleep 0; cat"]["median_ms"]
    out["vs_cat_alone_ms"] = out["sleep 0.2; cat (minus 0.2 s)"]["median_ms"] - out["cat"]["median_ms"]
    out.update({f"shell {name}; read x: read to result": summary(values) for name, values in stamped.items()})
    out["after_quiet_read_ms"] = out["shell sleep 0.2; read x: read to result"]["median_ms"]
    out["cpu_percent_while_waiting"] = cpu_sleeping
    out["loop CPU % while a silent program computes"] = cpu_computing
    out.update({f"{name}: input() to result": summary(values) for name, values in in_process.items()})
    out["in_process_after_2s_ms"] = out["python time.sleep(2); input(): input() to result"]["median_ms"]
    out["after_computing_ms"] = out["python computes 0.3 s; input(): input() to result"]["median_ms"]
    return out


def loop_cpu_while(tools: TerminalTools, agent: Agent, sid: str, command: str, window: float,
                   skip: float = 1.0) -> float:
    """Loop-thread CPU (% of a core, from its scheduler stats) while a foreground send of ``command`` waits,
    measured for ``window`` seconds after the first ``skip`` seconds; the program is then interrupted."""
    import threading
    waiting = threading.Thread(target=tools.call, args=("terminal_send", {
        "sessionId": sid, "text": command, "idle": window + skip + 60, "timeout": window + skip + 60}),
        kwargs={"agent": agent})
    started = time.monotonic()
    waiting.start()
    time.sleep(max(0.0, started + skip - time.monotonic()))
    cpu0, wall0 = loop_thread_cpu(tools), time.monotonic()
    time.sleep(window)
    cpu = (loop_thread_cpu(tools) - cpu0) / (time.monotonic() - wall0) * 100
    tools.call("terminal_signal", {"sessionId": sid, "signal": "INT"}, agent=agent)
    waiting.join()
    return cpu


# -- kernel responsiveness ---------------------------------------------------------------------------
def bench_kernel(reps: int, flood_bytes: int) -> dict:
    """A real kernel through jupyter_client: the full execute round trip of ``%term_send echo hi`` beside
    ``!echo hi`` and ``%%bash``, and cell latency while a session floods output in the background."""
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="python3")
    km.start_kernel(extra_arguments=["--HistoryManager.enabled=False"])
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)

    def cell(code: str) -> float:
        started = time.perf_counter()
        kc.execute_interactive(code, timeout=60, output_hook=lambda msg: None)
        return time.perf_counter() - started

    cells = {"%term_send echo hi": "%term_send echo hi", "!echo hi": "!echo hi",
             "%%bash echo hi": "%%bash\necho hi", "1 (an empty cell)": "1"}
    try:
        cell("%load_ext dsh_terminal_magics")
        cell("%term_open")
        echo = interleave({name: (lambda code=code: cell(code)) for name, code in cells.items()}, reps)
        idle = [cell("1") for _ in range(reps)]
        cell(f"%term_send --bg {producer(flood_bytes)}")
        flood = []
        for _ in range(reps):
            flood.append(cell("1"))
        cell("%job_kill")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    return {"echo hi, full execute round trip": {name: summary(v) for name, v in echo.items()},
            "idle": summary(idle), "flood": summary(flood), "p95_ratio": pct(flood, 0.95) / pct(idle, 0.95)}


HOSTILE_OUTPUT = ("python3 -c \"import os, time; chunk = ('abc' + chr(27) + '[K' + chr(27) + '[1D').encode() * 6000; "
                  "end = time.time() + {seconds}\nwhile time.time() < end: os.write(1, chunk)\"")


def bench_hostile_flood(reps: int, seconds: float, floods: int) -> dict:
    """Another agent's ``echo hi`` while one agent's program prints what is slow to process (text, erase to
    end of line, cursor back: every byte a line rewrite), and while ``floods`` of that agent's sessions print
    flat out (``yes``), against the same sends with nothing else running."""
    tools = TerminalTools()
    noisy, me = Agent("noisy"), Agent("me")
    mine = tools.call("terminal_open", {"type": "shell"}, agent=me).session_id

    def send() -> float:
        started = time.perf_counter()
        tools.call("terminal_send", {"sessionId": mine, "text": "echo hi"}, agent=me)
        return time.perf_counter() - started

    def paced(until: float) -> list[float]:
        out = []
        while time.perf_counter() < until and len(out) < reps:
            out.append(send())
            time.sleep(0.01)
        return out

    def while_flooding(commands: list[str]) -> list[float]:
        theirs = [tools.call("terminal_open", {"type": "shell"}, agent=noisy).session_id for _ in commands]
        jobs = [tools.call("terminal_send", {"sessionId": sid, "text": command, "run_in_background": True,
                                             "timeout": seconds + 30}, agent=noisy).job_id
                for sid, command in zip(theirs, commands)]
        time.sleep(0.5)  # (the flood under way)
        during = paced(time.perf_counter() + seconds)
        for job in jobs:
            tools.call("job_kill", {"jobId": job}, agent=noisy)
        for sid in theirs:
            tools.call("terminal_close", {"sessionId": sid}, agent=noisy)
        return during

    quiet = paced(time.perf_counter() + seconds)
    during = while_flooding([HOSTILE_OUTPUT.format(seconds=seconds + 5)])
    many = while_flooding(["yes"] * floods)
    tools.shutdown()
    return {"quiet": summary(quiet), "during the flood": summary(during),
            "p95_vs_quiet_p50": pct(during, 0.95) / pct(quiet, 0.5),
            f"during {floods} sessions printing flat out (yes)": summary(many), "floods": floods}


def bench_busy_host(others: int, seconds: float) -> dict:
    """Another agent's ``echo hi`` while one agent opens and closes sessions over and over, on a host running
    ``others`` more processes (``sleep``, started here and ended by pid) against the same with none: what the
    loop does per session must cost what the session runs, not what the machine runs."""
    tools = TerminalTools()
    churner, me = Agent("churn"), Agent("me")
    mine = tools.call("terminal_open", {"type": "shell"}, agent=me).session_id

    def churn_while_sending() -> list[float]:
        stop = threading.Event()

        def churn() -> None:
            while not stop.is_set():
                sid = tools.call("terminal_open", {"type": "shell"}, agent=churner).session_id
                tools.call("terminal_close", {"sessionId": sid}, agent=churner)

        worker = threading.Thread(target=churn)
        worker.start()
        out, until = [], time.perf_counter() + seconds
        while time.perf_counter() < until:
            started = time.perf_counter()
            tools.call("terminal_send", {"sessionId": mine, "text": "echo hi"}, agent=me)
            out.append(time.perf_counter() - started)
            time.sleep(0.005)
        stop.set()
        worker.join()
        return out

    alone = churn_while_sending()
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(others)]
    try:
        busy = churn_while_sending()
    finally:
        for process in sleepers:
            process.kill()
        for process in sleepers:
            process.wait()
    tools.shutdown()
    return {"other processes": others, "churn on a quiet host": summary(alone),
            f"churn with {others} other processes": summary(busy), "max_ms_alone": max(alone) * 1e3,
            "max_ms_busy": max(busy) * 1e3, "p95_ratio": pct(busy, 0.95) / pct(alone, 0.95)}


# -- report ------------------------------------------------------------------------------------------
def verdicts(r: dict) -> list[tuple[str, bool, str]]:
    out = []
    sh = r["round_trip"]["shell"]
    for kind, label in (("shell", "bash echo hi"), ("python", "python print(2+2)")):
        ours = r["round_trip"][kind]["ours (tools.call)"]["median_ms"]
        pexp = r["round_trip"][kind]["pexpect, known prompt"]["median_ms"]
        out.append((f"round trip <= 1.0x pexpect-on-known-prompt ({label}, no prompt configured)", ours <= pexp,
                    f"{ours / pexp:.2f}x ({ours:.2f} vs {pexp:.2f} ms)"))
    ours = sh["ours (tools.call)"]["median_ms"]
    if "tmux send-keys + 100 ms capture-pane" in sh:
        tm = sh["tmux send-keys + 100 ms capture-pane"]["median_ms"]
        out.append((">= 50x faster than 100 ms tmux polling", tm / ours >= 50, f"{tm / ours:.0f}x"))
    free = r["round_trip"]["prompt-free"]
    ok = all(v.get("wait_reasons") == ["stdin_read"] for v in free.values() if "skipped" not in v)
    out.append(("same code, no prompt: bash, python3, node, sqlite3 all stdin_read", ok,
                ", ".join(f"{k} {v.get('median_ms', 0):.2f} ms" for k, v in free.items() if "skipped" not in v)))
    s = r["streaming"]
    out.append(("streaming >= 0.5x bare PTY read loop", s["ratio"] >= 0.5,
                f"{s['ratio']:.2f}x ({s['ours_MBps']:.0f} vs {s['bare_MBps']:.0f} MB/s)"))
    out.append(("peak RSS growth <= 64 MiB", s["peak_rss_growth_MiB"] <= 64, f"{s['peak_rss_growth_MiB']:.1f} MiB"))
    c = r["scale"]
    added_ms = (c["ours sequential, the tools' default containment s"] - c["ours sequential s"]) / c["sessions"] * 1000
    out.append(("open N sessions one by one within 1.5x pexpect one by one", c["sequential_open_ratio"] <= 1.5,
                f"{c['sequential_open_ratio']:.2f}x (through the tools, with their default containment - "
                f"{c['default containment']} - {c['sequential_open_ratio_contained']:.2f}x: {added_ms:.1f} ms more "
                "an open)"))
    out.append(("open N sessions concurrently within 1.5x a pexpect thread pool", c["concurrent_open_ratio"] <= 1.5,
                f"{c['concurrent_open_ratio']:.2f}x"))
    close = c["ours close (verified quiescence) s"]
    out.append(("close all with verified quiescence < 3 s", close < 3, f"{close:.2f} s"))
    out.append(("leftover processes == 0", c["leftover_processes"] == 0, str(c["leftover_processes"])))
    extra = c["rss_per_session_KiB"] - c["scrollback_per_session_KiB"]
    out.append(("<= 256 KiB kernel RSS per idle session beyond scrollback", extra <= 256, f"{extra:.0f} KiB"))
    k = r["kernel"]
    out.append(("cell p95 during flood <= 3x idle", k["p95_ratio"] <= 3, f"{k['p95_ratio']:.2f}x"))
    cells = k["echo hi, full execute round trip"]
    term, bang = cells["%term_send echo hi"]["median_ms"], cells["!echo hi"]["median_ms"]
    bash = cells["%%bash echo hi"]["median_ms"]
    out.append(("%term_send echo hi cell within 1.2x a %%bash cell (real kernel)", term <= 1.2 * bash,
                f"{term / bash:.2f}x ({term:.2f} vs {bash:.2f} ms; !echo hi {bang:.2f} ms)"))
    m = r["many_agents"]
    paced, alone = m["ours, every 100 ms each"], m["single agent, every 100 ms"]
    out.append((f"{m['agents']} agents each sending every 100 ms: p95 <= 3x one agent's median at that pace",
                m["paced_p95_vs_single_median"] <= 3,
                f"{m['paced_p95_vs_single_median']:.2f}x ({paced['p95_ms']:.2f} vs {alone['p50_ms']:.2f} ms; "
                f"pexpect threads {m['pexpect threads, every 100 ms each']['p95_ms']:.2f} ms)"))
    out.append((f"{m['agents']} agents back to back: throughput >= 0.7x pexpect threads", m["throughput_ratio"] >= 0.7,
                f"{m['throughput_ratio']:.2f}x ({m['ours, back to back']['sends_per_s']:.0f} vs "
                f"{m['pexpect threads, back to back']['sends_per_s']:.0f} sends/s)"))
    b = r["busy_host"]
    out.append((f"a send's p95 while sessions open and close, {b['other processes']} other processes on the host, "
                "<= 1.5x the same on a quiet host", b["p95_ratio"] <= 1.5,
                f"{b['p95_ratio']:.2f}x (max {b['max_ms_busy']:.1f} vs {b['max_ms_alone']:.1f} ms)"))
    q = r["readiness"]
    at_once = q["shell sleep 0; read x: read to result"]["median_ms"]
    out.append(("detection after a quiet period (shell: sleep 0.2, then read), read to result <= 2 ms",
                q["after_quiet_read_ms"] <= 2,
                f"{q['after_quiet_read_ms']:.2f} ms (after sleep 0: {at_once:.2f} ms; end to end, sleep 0.2; cat "
                f"minus 0.2 s minus sleep 0; cat: {q['quiet_penalty_ms']:.2f} ms, which includes starting cat "
                "after the quiet period)"))
    short = q["python time.sleep(0.2); input(): input() to result"]["median_ms"]
    out.append(("in-process quiet period: python time.sleep(2) then input(), input() to result <= 2 ms",
                q["in_process_after_2s_ms"] <= 2,
                f"{q['in_process_after_2s_ms']:.2f} ms (after time.sleep(0.2): {short:.2f} ms)"))
    after = q["python computes 2 s; input(): input() to result"]["median_ms"]
    cpu = q["loop CPU % while a silent program computes"]
    out.append(("python computes 0.3 s then input(), input() to result <= 2 ms", q["after_computing_ms"] <= 2,
                f"{q['after_computing_ms']:.2f} ms (after 2 s: {after:.2f} ms; loop CPU while it computes: "
                + ", ".join(f"{k} {v:.1f}%" for k, v in cpu.items()) + ")"))
    out.append(("CPU while a silent send waits < 1% of a core", q["cpu_percent_while_waiting"] < 1,
                f"{q['cpu_percent_while_waiting']:.2f}%"))
    return out


def commit() -> str:
    """The commit measured (``+changes`` when the package or the bench differ from it), or ``?``."""
    root = RESULTS.parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--", "dsh_terminal_magics", "bench/run.py"],
                                 cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + ("+changes" if changed else "")


def bash_version() -> str:
    out = subprocess.run(["bash", "-c", "echo $BASH_VERSION"], capture_output=True, text=True).stdout.strip()
    return out.split("(")[0] or "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI)")
    parser.add_argument("--check", action="store_true", help="exit with status 1 when any target misses")
    parser.add_argument("--readme", action="store_true", help="put this run's tables into README.md")
    args = parser.parse_args()
    q = args.quick
    results = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Linux {platform.release()}, "
                   f"Python {platform.python_version()}, bash {bash_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit(),
        "command": "python3 bench/run.py" + (" --quick" if q else "") + (" --check" if args.check else ""),
    }
    results["idle_costs"] = bench_idle_costs(20 if q else 200)
    results["round_trip"] = bench_round_trip(12 if q else 400)
    results["cold_send"] = bench_cold_send(5 if q else 40)
    results["idle_sweep"] = bench_idle_sweep(3 if q else 40)
    results["streaming"] = bench_streaming(20_000_000 if q else 200_000_000, 1 if q else 3)
    results["scale"] = bench_scale(20 if q else 200, 1 if q else 3)
    results["kernel"] = bench_kernel(20 if q else 100, 50_000_000 if q else 2_000_000_000)
    results["hostile_flood"] = bench_hostile_flood(20 if q else 200, 1.0 if q else 5.0, 4 if q else 32)
    results["busy_host"] = bench_busy_host(200 if q else 2000, 1.0 if q else 5.0)
    results["readiness"] = bench_readiness(6 if q else 100, 1.0 if q else 10.0, 2.0 if q else 60.0)
    results["many_agents"] = bench_many_agents(4 if q else 64, 1.0 if q else 10.0, (2,) if q else (1, 8, 16, 32))
    results["verdicts"] = [{"target": t, "pass": ok, "measured": m} for t, ok, m in verdicts(results)]
    results["finished"] = time.strftime("%H:%M UTC", time.gmtime())
    RESULTS.mkdir(exist_ok=True)
    name = "quick" if q else "latest"
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=1))
    from report import render, update_readme  # (bench/ is the script's directory)

    tables = render(results)
    (RESULTS / f"{name}.md").write_text(tables)
    if args.readme:
        update_readme(RESULTS.parent.parent / "README.md", tables)
    print(json.dumps({k: v for k, v in results.items() if k != "verdicts"}, indent=1))
    print()
    for v in results["verdicts"]:
        print(f"{'PASS' if v['pass'] else 'FAIL'}  {v['target']}: {v['measured']}")
    return 1 if args.check and not all(v["pass"] for v in results["verdicts"]) else 0


if __name__ == "__main__":
    sys.exit(main())
