from __future__ import annotations

from typing import Iterator

import pytest
from IPython.testing import globalipapp

from dsh_terminal_magics.notebook.magics import loaded_magics


def interactive_shell():
    """The test InteractiveShell (created once per process)."""
    return globalipapp.start_ipython() or globalipapp.get_ipython()


@pytest.fixture
def ip() -> Iterator[object]:
    shell = interactive_shell()
    shell.run_line_magic("load_ext", "dsh_terminal_magics")
    yield shell
    shell.run_line_magic("unload_ext", "dsh_terminal_magics")
    shell.config.pop("TerminalMagics", None)  # %config values must not leak into the next test


@pytest.fixture
def magics(ip):
    return loaded_magics(ip)
