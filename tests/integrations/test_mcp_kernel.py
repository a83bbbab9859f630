"""``%term_mcp`` in a real ipykernel: an outside MCP client drives a terminal the notebook watches."""
from __future__ import annotations

import re

import httpx2
import pytest
from mcp import Client
from mcp.types import Implementation
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import wait_for
from tests.integrations.conftest import alive, run
from tests.notebook.test_kernel import Kernel

pytestmark = pytest.mark.timeout(180)
#: A client's name with an OSC 52 clipboard write in it.
EVIL_NAME = Implementation(name="evil\x1b]52;c;aGk=\x07", version="1")


@pytest.fixture
def kernel():
    k = Kernel()
    yield k
    k.stop()


def test_an_outside_client_drives_a_terminal_the_notebook_watches(kernel):
    status, out = kernel.run("%load_ext dsh_terminal_magics\nserver = %term_mcp start")
    assert status == "ok", out
    url = re.search(r"MCP server \(streamable HTTP\) at (http://127\.0\.0\.1:\d+/mcp)", out).group(1)
    token = re.search(r"clients send: Authorization: Bearer (\S+)", out).group(1)
    assert f"claude mcp add --transport http dsh-terminal {url} --header \"Authorization: Bearer {token}\"" in out
    assert "[mcp_servers.dsh-terminal]" in out

    async def drive():  # the kernel is idle meanwhile: the server runs on the package loop, not in a cell
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http, \
                Client(streamable_http_client(url, http_client=http), client_info=EVIL_NAME) as client:
            opened = await client.call_tool("terminal_open", {"type": "shell", "name": "outside"})
            sid = opened.structured_content["sessionId"]
            sent = await client.call_tool("terminal_send", {"sessionId": sid, "text": "echo from-outside-$((6*7))"})
            status, shown = kernel.run("a = server.agents[0]\n%term_view --agent a --text\n%term_mcp")
            mine = kernel.run("%term_ls")[1]
            return opened.structured_content["pid"], sent, status, shown, mine

    pid, sent, status, shown, mine = run(drive, timeout=120)
    assert "from-outside-42" in sent.structured_content["viewport"]
    assert status == "ok" and "from-outside-42" in shown, shown  # the notebook sees the client's terminal
    assert "1 client(s)" in shown and "1 session(s)" in shown
    # the name a client gives itself is data: shown quoted, its escape sequence never reaches a terminal
    assert "\x1b" not in shown and "'evil\\x1b]52;c;aGk=\\x07'" in shown, shown
    assert "outside" not in mine  # ...but the client's session is not the notebook's own
    wait_for(lambda: not alive(pid), timeout=5)  # the client left: its shell is closed
    status, out = kernel.run("%term_mcp stop")
    assert status == "ok" and "MCP server stopped" in out
    status, out = kernel.run("%term_mcp")
    assert "no MCP server running" in out
