"""The package type-checks (mypy with the pydantic plugin, settings in pyproject.toml)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_is_clean():
    out = subprocess.run([sys.executable, "-m", "mypy", "dsh_terminal_magics"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
