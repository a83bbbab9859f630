"""The benchmark suite runs end to end (quick sizes) so it cannot rot; timings are reported, never asserted."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmark_runs_and_reports_every_target():
    out = subprocess.run([sys.executable, "bench/run.py", "--quick"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    verdict_lines = [line for line in out.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    results = json.loads((ROOT / "bench" / "results" / "quick.json").read_text())
    assert len(verdict_lines) == len(results["verdicts"]) == 19, out.stdout[-3000:]
    assert results["scale"]["leftover_processes"] == 0  # correctness, not speed
    free = results["round_trip"]["prompt-free"]
    assert all(v["wait_reasons"] == ["stdin_read"] for v in free.values() if "skipped" not in v)
