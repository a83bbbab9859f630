from __future__ import annotations

import pytest


@pytest.fixture
def shell(tools, agent) -> str:
    return tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
