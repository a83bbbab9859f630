"""The short soak: open/send/read/background/close cycles and a mixed run leave resources flat."""
from __future__ import annotations

import subprocess
import sys
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_short_soak_is_flat():
    out = subprocess.run([sys.executable, "bench/soak.py", "--cycles", "150", "--minutes", "0.25"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["mixed_errors"] == []
    drift = report["drift"]
    assert (drift["fds"], drift["threads"], drift["zombies"]) == (0, 0, 0), report
    assert drift["rss_kib"] < 64 * 1024, report  # bounded buffers: no growth with use
