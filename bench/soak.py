"""Soak: many open/send/read/background/close cycles, then a bounded mixed run; resources must stay flat.

    python3 bench/soak.py                       # 1,000 cycles + 15-minute mixed run
    python3 bench/soak.py --cycles 200 --minutes 0.25   # the short version the test suite runs

Reports the kernel-side figures before and after (fds, threads, RSS, zombie
children) and the drift.  Bounded and self-stopping.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time

from dsh_terminal_magics import Agent, TerminalTools


def resources() -> dict[str, int]:
    rss = 0
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    me = os.getpid()
    zombies = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == "Z" and int(fields[1]) == me:
                zombies += 1
    return {"fds": len(os.listdir("/proc/self/fd")), "threads": threading.active_count(), "rss_kib": rss,
            "zombies": zombies}


def settled(before: dict, within: float = 10.0) -> dict:
    """:func:`resources` once the thread count is back to ``before``'s and no /proc reader thread is left (or
    after ``within`` seconds, with the names of the threads still there): a close's scan for a gone shell's
    orphans runs in a thread of its own, which ends just after the close has its answer - beside two CPU hogs,
    one was still there at the count -, and the guarded /proc reads' worker ends after two idle seconds."""
    deadline = time.monotonic() + within
    while (threading.active_count() > before["threads"] or reader_threads()) and time.monotonic() < deadline:
        time.sleep(0.05)
    after = resources()
    if after["threads"] > before["threads"]:
        after["thread_names"] = sorted(t.name for t in threading.enumerate())
    return after


def reader_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "dsh-terminal-proc-read"]


def one_cycle(tools: TerminalTools, agent: Agent, i: int) -> None:
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    r = tools.call("terminal_send", {"sessionId": sid, "text": f"echo cycle-{i}"}, agent=agent)
    assert r.wait_reason == "stdin_read", r
    page = tools.call("terminal_read", {"sessionId": sid, "count": 5}, agent=agent)
    assert f"cycle-{i}" in page.text
    job = tools.call("terminal_send", {"sessionId": sid, "text": "seq 1 50", "run_in_background": True},
                     agent=agent).job_id
    while tools.call("job_output", {"jobId": job}, agent=agent).status == "running":
        time.sleep(0.002)
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)


def cycles(count: int) -> None:
    tools = TerminalTools()
    agent = Agent("soak-cycles")
    for i in range(count):
        one_cycle(tools, agent, i)
    tools.shutdown()


def mixed_worker(tools: TerminalTools, seconds: float, seed: int, errors: list[str]) -> None:
    rng = random.Random(seed)
    agent = Agent(f"mixed-{seed}")
    deadline = time.monotonic() + seconds
    sid = tools.call("terminal_open", {"type": rng.choice(["shell", "python"])}, agent=agent).session_id
    kind = tools.call("terminal_list", {}, agent=agent).root[0].type
    try:
        while time.monotonic() < deadline:
            action = rng.random()
            if action < 0.5:
                text = "echo mixed $RANDOM" if kind == "shell" else "print(sum(range(1000)))"
                r = tools.call("terminal_send", {"sessionId": sid, "text": text}, agent=agent)
                if r.wait_reason != "stdin_read":
                    errors.append(f"{seed}: {r.wait_reason}")
            elif action < 0.7:
                tools.call("terminal_read", {"sessionId": sid, "count": rng.randint(1, 200)}, agent=agent)
            elif action < 0.85 and kind == "shell":
                job = tools.call("terminal_send", {"sessionId": sid, "text": "seq 1 2000 | tail -3",
                                                   "run_in_background": True}, agent=agent).job_id
                if rng.random() < 0.3:
                    tools.call("job_kill", {"jobId": job}, agent=agent)
                while tools.call("job_output", {"jobId": job}, agent=agent).status == "running":
                    time.sleep(0.005)
            else:
                tools.call("terminal_close", {"sessionId": sid}, agent=agent)
                sid = tools.call("terminal_open", {"type": kind}, agent=agent).session_id
    except Exception as exc:  # reported, not raised: the run must finish and clean up
        errors.append(f"{seed}: {type(exc).__name__}: {exc}")
    finally:
        tools.close_owner(agent)


def mixed(minutes: float, workers: int = 4) -> list[str]:
    tools = TerminalTools()
    errors: list[str] = []
    threads = [threading.Thread(target=mixed_worker, args=(tools, minutes * 60, seed, errors))
               for seed in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tools.shutdown()
    return errors


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=15.0)
    args = parser.parse_args()
    one_cycle_tools = TerminalTools()
    one_cycle(one_cycle_tools, Agent("warm-up"), -1)  # start the loop thread and watchdog first
    one_cycle_tools.shutdown()
    before = settled(resources())  # (the /proc reader thread of the warm-up's looks ends once idle)
    started = time.monotonic()
    cycles(args.cycles)
    after_cycles = resources()
    cycle_seconds = time.monotonic() - started
    errors = mixed(args.minutes)
    after = settled(before)
    report = {"cycles": args.cycles, "cycle_seconds": round(cycle_seconds, 1), "mixed_minutes": args.minutes,
              "before": before, "after_cycles": after_cycles, "after_mixed": after,
              "drift": {k: after[k] - before[k] for k in before}, "mixed_errors": errors}
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
