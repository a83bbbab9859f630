"""The committed notebooks are clean, and the Binder requirements install and load the extension."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_six_notebooks_exist():
    assert [p.name for p in NOTEBOOKS] == ["01-quickstart.ipynb", "02-repls-and-prompts.ipynb",
                                           "03-background-jobs.ipynb", "04-agent-loop.ipynb",
                                           "05-teaching-demo.ipynb", "06-agent-frameworks.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_hygiene(path):
    nb = nbformat.read(path, as_version=4)
    assert "widgets" not in nb.metadata
    text = path.read_text()
    for personal in ("/root", "/work/", "/home/"):
        assert personal not in text, f"{path.name} mentions {personal}"
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert code_cells and all(c.get("execution_count") for c in code_cells), "notebook must be executed"


def test_binder_requirements_install_into_a_fresh_venv(tmp_path):
    requirements = (ROOT / "binder" / "requirements.txt").read_text().split()
    assert ".[frameworks]" in requirements  # notebook 06 needs the MCP SDK and the frameworks
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # (--no-compile: byte-compiling the hundred-odd packages was 40 % of the install; imports compile what they use)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-compile", "-r", "binder/requirements.txt"],
                   cwd=ROOT, check=True, timeout=900,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    code = ("from IPython.core.interactiveshell import InteractiveShell; ip = InteractiveShell.instance(); "
            "ip.run_line_magic('load_ext', 'dsh_terminal_magics'); "
            "r = ip.run_line_magic('term_open', ''); s = ip.run_line_magic('term_send', 'echo binder-ok'); "
            "ip.run_line_magic('unload_ext', 'dsh_terminal_magics'); print('RESULT', s.exit_code); "
            "import dsh_terminal_magics.mcp, dsh_terminal_magics.integrations.pydantic_ai, "
            "dsh_terminal_magics.integrations.langchain, dsh_terminal_magics.integrations.openai_agents; "
            "print('FRAMEWORKS OK')")
    out = subprocess.run([str(python), "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "binder-ok" in out.stdout and "RESULT 0" in out.stdout and "FRAMEWORKS OK" in out.stdout
