"""The MCP server over stdio, driven by the SDK's own client and by raw JSON-RPC lines."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from mcp import Client, StdioServerParameters

from dsh_terminal_magics import TerminalTools

from tests.conftest import wait_for
from tests.integrations.conftest import alive, cancel_a_sleep_then_send, run

pytestmark = pytest.mark.timeout(120)
SERVER = StdioServerParameters(command=sys.executable, args=["-m", "dsh_terminal_magics.mcp"])


def test_stdio_session_lifecycle_and_eof_closes_the_shells():
    ours = TerminalTools()
    try:
        schemas = ours.schemas("json-schema")
    finally:
        ours.shutdown()

    async def body():
        async with Client(SERVER) as client:
            listed = (await client.list_tools()).tools
            opened = await client.call_tool("terminal_open", {"type": "shell"})
            sid = opened.structured_content["sessionId"]
            asked = await client.call_tool("terminal_send", {"sessionId": sid, "text": "read -p 'name? ' n"})
            answered = await client.call_tool("terminal_send", {"sessionId": sid, "text": "bob"})
            shown = await client.call_tool("terminal_send", {"sessionId": sid, "text": "echo hi-$n-$((6*7))"})
            unknown = await client.call_tool("terminal_close", {"sessionId": "t-0000000000000000"})
            second = await client.call_tool("terminal_open", {"type": "shell"})
            closed = await client.call_tool("terminal_close", {"sessionId": sid})
            return listed, opened, asked, answered, shown, unknown, second, closed

    listed, opened, asked, answered, shown, unknown, second, closed = run(body)
    assert [t.name for t in listed] == [s["title"] for s in schemas]
    assert all(t.input_schema == {k: v for k, v in s.items() if k not in ("title", "description")}
               for t, s in zip(listed, schemas))
    assert asked.structured_content["waitReason"] == "stdin_read"
    assert asked.structured_content["viewport"].endswith("name? ")
    assert answered.structured_content["exitCode"] == 0
    assert "hi-bob-42" in shown.structured_content["viewport"]
    assert unknown.is_error and "unknown terminal session" in unknown.content[0].text
    assert closed.structured_content["outcome"] == "closed"
    # The client closed stdin when it left: the session it did not close is gone within 5 s.
    left = time.monotonic()
    wait_for(lambda: not alive(second.structured_content["pid"]), timeout=5)
    assert time.monotonic() - left < 5


def test_stdio_cancellation_interrupts_the_program():
    async def body():
        async with Client(SERVER) as client:
            return await cancel_a_sleep_then_send(client)

    assert "N-42" in run(body).structured_content["viewport"]


def test_stdout_carries_protocol_messages_only():
    """Raw JSON-RPC over the pipe: every line the server writes is a JSON-RPC message."""
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "terminal_open",
                                                                       "arguments": {"type": "shell"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "terminal_open",
                                                                       "arguments": {"type": 5}}},
        {"jsonrpc": "2.0", "id": 4, "method": "no/such/method"},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/list"},
    ]
    proc = subprocess.Popen([sys.executable, "-m", "dsh_terminal_magics.mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages[:5]) + "this is not json\n"
                         + '{"jsonrpc": "1.0", "id": 9, "method": "x"}\n' + json.dumps(messages[5]) + "\n")
        proc.stdin.flush()
        by_id: dict[int | None, dict] = {}
        unnamed: list[dict] = []
        while not {1, 2, 3, 4, 5} <= set(by_id):
            line = proc.stdout.readline()
            assert line, f"server ended early: {proc.stderr.read()[-2000:]}"
            reply = json.loads(line)  # fails on any stray output
            if reply.get("id") is None and "error" in reply:
                unnamed.append(reply["error"])
            elif "id" in reply:
                by_id[reply["id"]] = reply
        proc.stdin.close()  # the client leaves
        rest = proc.stdout.read()
        assert proc.wait(timeout=30) == 0  # EOF ends the server cleanly
    finally:
        proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            stream.close()
    assert all(json.loads(line) for line in rest.splitlines() if line.strip())
    assert by_id[2]["result"]["isError"] is False
    assert by_id[3]["result"]["isError"] is True and "argument 'type'" in by_id[3]["result"]["content"][0]["text"]
    assert "error" in by_id[4]
    assert len(by_id[5]["result"]["tools"]) == 10
    # a line that is no message gets JSON-RPC's error for it (id null), and the server goes on (5 came after)
    assert [e["code"] for e in unnamed] == [-32700, -32600], unnamed
    assert "not JSON" in unnamed[0]["message"] and "no JSON-RPC 2.0 message" in unnamed[1]["message"]
    pid = by_id[2]["result"]["structuredContent"]["pid"]
    assert not alive(pid)


def test_the_command_line_takes_the_tools_config(tmp_path):
    config = tmp_path / "tools.json"
    config.write_text(json.dumps({"enableTerminalExtensions": False, "enableRunInBackground": False,
                                  "maxResultBytes": 300}))
    server = StdioServerParameters(command=sys.executable,
                                   args=["-m", "dsh_terminal_magics.mcp", "--config", str(config)])

    async def body():
        async with Client(server) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            sid = (await client.call_tool("terminal_open", {"type": "shell"})).structured_content["sessionId"]
            long = await client.call_tool("terminal_send", {"sessionId": sid, "text": "seq 1 500"})
            await client.call_tool("terminal_close", {"sessionId": sid})
            return names, long

    names, long = run(body)
    assert names == ["terminal_open", "terminal_send", "terminal_read", "terminal_signal", "terminal_close",
                     "terminal_list", "job_output", "job_kill"]
    assert len(long.content[0].text.encode()) <= 300 and not long.is_error  # capped like call_text
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"maxResultBytes": "lots"}))
    out = subprocess.run([sys.executable, "-m", "dsh_terminal_magics.mcp", "--config", str(bad)],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and "maxResultBytes" in out.stderr and out.stdout == ""
