from __future__ import annotations

from typing import Iterator

import pytest

from dsh_terminal_magics import TerminalTools


@pytest.fixture
def tools() -> Iterator[TerminalTools]:
    t = TerminalTools()
    yield t
    t.shutdown()


@pytest.fixture
def shell(tools, agent) -> str:
    return tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
