"""The benchmark suite runs end to end (quick sizes) so it cannot rot; timings are reported, never asserted."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmark_runs_and_reports_every_target():
    out = subprocess.run([sys.executable, "bench/run.py", "--quick"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    verdict_lines = [line for line in out.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    results = json.loads((ROOT / "bench" / "results" / "quick.json").read_text())
    assert len(verdict_lines) == len(results["verdicts"]) == 20, out.stdout[-3000:]
    assert results["scale"]["leftover_processes"] == 0  # correctness, not speed
    assert results["hostile_flood"]["during the flood"]["n"] > 0
    assert results["busy_host"]["churn with 200 other processes"]["n"] > 0
    free = results["round_trip"]["prompt-free"]
    assert all(v["wait_reasons"] == ["stdin_read"] for v in free.values() if "skipped" not in v)
    tables = (ROOT / "bench" / "results" / "quick.md").read_text()
    assert tables == _report().render(results)
    assert f"at commit `{results['commit']}`" in tables
    if (ROOT / ".git").exists():
        assert results["commit"] != "?"
    for verdict in results["verdicts"]:
        assert f"| {verdict['target']} | {verdict['measured']} | {'pass' if verdict['pass'] else '**missed**'} |" \
            in tables
    ours = results["round_trip"]["shell"]["ours (tools.call)"]
    assert f"| bash, `echo hi` | **ours, `tools.call`** (no prompt known) | {ours['median_ms']:.2f} |" in tables


def _report():
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    assert spec is not None and spec.loader is not None
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    return report


def test_the_readme_block_is_replaced_whole_and_only_between_its_markers(tmp_path):
    report = _report()
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{report.BEGIN}\nold table\nold line\n{report.END}\nafter\n")
    report.update_readme(readme, "| new |\n")
    assert readme.read_text() == f"before\n{report.BEGIN}\n| new |\n{report.END}\nafter\n"
    report.update_readme(readme, "second\n")
    assert readme.read_text() == f"before\n{report.BEGIN}\nsecond\n{report.END}\nafter\n"
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="no <!-- bench:begin -->"):
        report.update_readme(readme, "x\n")
    assert readme.read_text() == "no markers\n"


def test_interleaving_puts_every_method_right_after_every_other():
    """A baseline must not always run right after the same method (warm behind a fast one, cold behind a
    sleeping one): over a run, every ordered pair of methods occurs back to back."""
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    ran: list[str] = []
    names = ["ours", "pexpect", "floor", "tmux"]
    times = bench.interleave({name: (lambda name=name: ran.append(name)) for name in names}, 200)
    assert {name: len(values) for name, values in times.items()} == {name: 200 for name in names}
    pairs = Counter(zip(ran, ran[1:]))
    assert all(pairs[(a, b)] >= 20 for a in names for b in names if a != b), pairs
