"""The README's benchmark tables, rendered from one run's results (``bench/results/*.json``).

    python3 bench/run.py --check --readme   # a full run, then its tables into README.md

``render(results)`` gives the Markdown; ``update_readme(path, text)`` puts it
between the ``<!-- bench:begin -->`` and ``<!-- bench:end -->`` lines of the
README, so every figure in that block comes from the one run it names.
"""
from __future__ import annotations

import re
from pathlib import Path

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"

#: Round-trip rows as the README shows them: (session, key in the results, how the row reads).
ROUND_TRIP_ROWS = [
    ("shell", "ours (tools.call)", "**ours, `tools.call`** (no prompt known)"),
    ("shell", "pexpect, known prompt", "pexpect, `delaybeforesend=None`, known unique prompt"),
    ("shell", "reference: two-thread floor", "reference: the two-thread floor"),
    ("shell", "ours (%term_send magic)", "ours, `%term_send` in an InteractiveShell (streams to a cell)"),
    ("shell", "subprocess.run (stateless)", "`subprocess.run` (stateless)"),
    ("shell", "tmux send-keys + 100 ms capture-pane",
     "tmux `send-keys`, `capture-pane` after 100 ms, then every 100 ms"),
    ("shell", "tmux send-keys + capture at once, then every 10 ms",
     "tmux `send-keys`, `capture-pane` at once, then every 10 ms"),
    ("shell", "ours (tools.call), back to back with pexpect", "ours, warm (back to back with pexpect only)"),
    ("shell", "pexpect, back to back with ours", "pexpect, warm (back to back with ours only)"),
    ("python", "ours (tools.call)", "**ours, `tools.call`**"),
    ("python", "pexpect, known prompt", "pexpect, known prompt"),
    ("python", "reference: two-thread floor", "reference: the two-thread floor"),
    ("python", "subprocess.run (stateless)", "`subprocess.run` (stateless)"),
    ("python", "tmux send-keys + 100 ms capture-pane", "tmux, 100 ms polling"),
    ("python", "tmux send-keys + capture at once, then every 10 ms", "tmux, capture at once, then every 10 ms"),
    ("python", "ours (tools.call), back to back with pexpect", "ours, warm (back to back with pexpect only)"),
    ("python", "pexpect, back to back with ours", "pexpect, warm (back to back with ours only)"),
]
SESSION_LABEL = {"shell": "bash, `echo hi`", "python": "python3, `print(2+2)`"}


def render(results: dict) -> str:
    """The Markdown for one run: what ran, round trips, cells in a real kernel, many agents, targets."""
    parts = [_run_line(results), _round_trips(results["round_trip"]), _kernel_cells(results["kernel"]),
             _many_agents(results["many_agents"]), _under_load(results), _targets(results["verdicts"])]
    return "\n\n".join(parts) + "\n"


def update_readme(readme: Path, text: str) -> None:
    """Replace what stands between the README's bench markers with ``text`` (raises when a marker is missing)."""
    content = readme.read_text()
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if pattern.search(content) is None:
        raise ValueError(f"{readme} has no {BEGIN} ... {END} block to replace")
    readme.write_text(pattern.sub(lambda _: f"{BEGIN}\n{text}{END}", content, count=1))


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _run_line(r: dict) -> str:
    missed = [v for v in r["verdicts"] if not v["pass"]]
    return (f"Run: `{r['command']}`, {r.get('started', r['date'])} to {r.get('finished', '?')}, at commit "
            f"`{r.get('commit', '?')}`, on {r['machine']}. Every figure in this block is from that one run (which "
            f"writes them to `bench/results/latest.json`); it missed {len(missed)} of {len(r['verdicts'])} targets.")


def _round_trips(rt: dict) -> str:
    n = rt["shell"]["ours (tools.call)"]["n"]
    lines = [f"**Round trip** (call to result, ms; {n} interleaved repetitions each in a shuffled order, the warm "
             "rows half as many):", "", "| session | method | median | p95 |", "|---|---|---|---|"]
    for kind, key, label in ROUND_TRIP_ROWS:
        row = rt[kind].get(key)
        if row is not None:
            lines.append(f"| {SESSION_LABEL[kind]} | {label} | {_ms(row['median_ms'])} | {_ms(row['p95_ms'])} |")
    free = ", ".join(f"{name} {_ms(v['median_ms'])} ms" for name, v in rt["prompt-free"].items()
                     if "skipped" not in v)
    lines += ["", f"The same code with no prompt configured, programs started from a shell session (median, back "
                  f"to back, every reply `stdin_read`): {free}."]
    return "\n".join(lines)


def _kernel_cells(k: dict) -> str:
    cells = k["echo hi, full execute round trip"]
    lines = ["**In a real kernel** (`jupyter_client`, a cell's full execute round trip, ms):", "",
             "| cell | median | p95 |", "|---|---|---|"]
    lines += [f"| `{name}` | {_ms(v['median_ms'])} | {_ms(v['p95_ms'])} |" for name, v in cells.items()]
    lines += [f"| an empty cell during another session's flood | {_ms(k['flood']['median_ms'])} | "
              f"{_ms(k['flood']['p95_ms'])} |"]
    return "\n".join(lines)


def _many_agents(m: dict) -> str:
    agents = m["agents"]

    def cell(row: dict) -> str:
        return f"{row['sends_per_s']:.0f}/s, {_ms(row['p50_ms'])} ms, {_ms(row['p95_ms'])} ms"

    lines = [f"**Many agents** (each its own `Agent`, shell and thread; {m['seconds']:.0f} s each, as two windows "
             "alternating with pexpect's; sends/s, p50, p95):", "",
             "| load | ours | pexpect threads on known prompts |", "|---|---|---|",
             f"| 1 agent, back to back | {cell(m['single agent, back to back'])} | — |",
             f"| 1 agent, one send every 100 ms | {cell(m['single agent, every 100 ms'])} | — |",
             f"| {agents} agents, each one send every 100 ms | {cell(m['ours, every 100 ms each'])} | "
             f"{cell(m['pexpect threads, every 100 ms each'])} |",
             f"| {agents} agents, back to back | **{cell(m['ours, back to back'])}** | "
             f"{cell(m['pexpect threads, back to back'])} |"]
    ours, theirs = m["ours, back to back"], m["pexpect threads, back to back"]
    if "process_cpu_us_per_send" in ours:
        lines += ["", f"CPU a send, {agents} agents back to back: this process {ours['process_cpu_us_per_send']:.0f} µs "
                  f"(the loop thread {ours['loop_cpu_us_per_send']:.0f}) against pexpect's threads "
                  f"{theirs['process_cpu_us_per_send']:.0f} µs; the shells' own {ours['shell_cpu_us_per_send']:.0f} "
                  f"against {theirs['shell_cpu_us_per_send']:.0f} µs (ours draw an `xterm` prompt that carries the "
                  "exit-code marker; pexpect's shells a bare `dumb` one)." + _cores_busy(ours, theirs)]
    sweep = {**m.get("sweep", {}), str(agents): m["ours, back to back"]}
    lines += ["", "Ours back to back by number of agents (sends/s; share of the time the loop thread is on a CPU): "
              + "; ".join(f"{n}: {row['sends_per_s']:.0f}/s, {row.get('loop_thread_cpu_percent', 0):.0f} %"
                          for n, row in sweep.items()) + "."]
    return "\n".join(lines)


def _cores(row: dict) -> float:
    """The CPUs a back-to-back run kept busy: CPU a send times sends a second."""
    return float(row["process_cpu_us_per_send"]) * float(row["sends_per_s"]) / 1e6


def _cores_busy(ours: dict, theirs: dict) -> str:
    """The cores each side's process kept busy, and what about one core for ours means."""
    cores = _cores(ours)
    text = f" Cores busy in the process: ours {cores:.2f}, pexpect's threads {_cores(theirs):.2f}"
    if 0.9 <= cores <= 1.1:
        text += (" - ours at about one: every send's Python, the loop's and its caller's, runs under the one "
                 "interpreter lock, so its throughput is about one over its CPU a send")
    return text + "."


PEXPECT_WARMED = "pexpect right after another child's round trip ms"


def _cold_send(c: dict, sweep: dict) -> str:
    """The line on what going cold costs a send, which part of it warms it up, and after how much idling."""
    idle = f"{c['idle_s'] * 1000:.0f} ms"
    line = (f"- **A send after {idle} of idling** (`echo hi`, median): ours {_ms(c['ours after idling ms'])} ms; "
            f"right after a send to another session {_ms(c['ours right after a send to another session ms'])} ms; "
            f"after the caller spun its CPU for 1 ms first {_ms(c['ours after the caller spun 1 ms ms'])} ms. "
            f"pexpect {_ms(c['pexpect after idling ms'])} ms, right after another child's round trip "
            f"{_ms(c[PEXPECT_WARMED])} ms.")
    line += (" By idling before the send (ours against pexpect): " + "; ".join(
        f"{gap} {_ms(v['ours'])} vs {_ms(v['pexpect'])} ms" for gap, v in sweep.items()) + ".")
    return line + (" What goes cold is the code and data a send runs through (a CPU kept busy meanwhile does "
                   "not help: its other work evicts them) and the idle CPU the other thread must be woken on: the "
                   "longer the path, and the more threads it crosses, the more it pays.")


def _under_load(r: dict) -> str:
    """Idling's cost on this machine, another agent's sends during floods and session churn, and detection."""
    idle, flood, busy, q = r["idle_costs"], r["hostile_flood"], r["busy_host"], r["readiness"]
    storm = next((v for k, v in flood.items() if k.startswith("during ") and k != "during the flood"), None)
    churn = [v for k, v in busy.items() if k.startswith("churn ")]
    lines = [
        f"- **What idling costs here**: waking a thread that waits in `epoll` takes "
        f"{_ms(idle['wake after 0.2 ms idle ms'])} ms after 0.2 ms of idling and "
        f"{_ms(idle['wake after 10 ms idle ms'])} ms after 10 ms and "
        f"{_ms(idle['wake after 100 ms idle ms'])} ms after 100 ms (this VM's idle CPUs halt); "
        f"the same unit of interpreter work takes "
        f"{_ms(idle['work after 10 ms asleep ms'])} ms right after its thread slept 10 ms against "
        f"{_ms(idle['work back to back ms'])} ms back to back ({idle['cold_work_factor']:.2f}x slower cold).",
        _cold_send(r["cold_send"], r["idle_sweep"]),
        f"- **Another agent's flood** (a program rewriting a line flat out), while an agent sends `echo hi` every "
        f"10 ms: {_ms(flood['during the flood']['median_ms'])} ms (p95 {_ms(flood['during the flood']['p95_ms'])})"
        f" against {_ms(flood['quiet']['median_ms'])} ms quiet"
        + (f"; during {flood['floods']} sessions printing flat out (`yes`): {_ms(storm['median_ms'])} ms "
           f"(p95 {_ms(storm['p95_ms'])})." if storm is not None else "."),
        f"- **Sessions opening and closing** all along, an agent's `echo hi` every 5 ms: p95 "
        f"{_ms(churn[0]['p95_ms'])} ms on a quiet host, {_ms(churn[1]['p95_ms'])} ms with "
        f"{busy['other processes']} more processes on it.",
        f"- **Detection**: `sleep 0.2; read x` - from `read` beginning to the result "
        f"{_ms(q['after_quiet_read_ms'])} ms (after `sleep 0`: "
        f"{_ms(q['shell sleep 0; read x: read to result']['median_ms'])} ms); loop CPU while a silent `sleep` "
        f"send waits {q['cpu_percent_while_waiting']:.2f} % of a core.",
    ]
    return "\n".join(lines)


def _targets(verdicts: list[dict]) -> str:
    lines = ["**Targets** (`--check` exits 1 when any is missed):", "", "| target | measured | |", "|---|---|---|"]
    lines += [f"| {v['target']} | {v['measured']} | {'pass' if v['pass'] else '**missed**'} |" for v in verdicts]
    return "\n".join(lines)
