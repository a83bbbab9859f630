"""The MCP server over streamable HTTP, driven by the SDK's own client (no mocks of MCP)."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from dsh_terminal_magics import Agent
from dsh_terminal_magics.errors import ConfigError
from dsh_terminal_magics.mcp import HttpServer
from dsh_terminal_magics.mcp.http import RECONNECT_GRACE
from dsh_terminal_magics.tools.models import ForegroundSendResult

from tests.conftest import wait_for
from tests.integrations.conftest import alive, cancel_a_sleep_then_send, run

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tools):
    s = HttpServer(tools)
    s.start()
    yield s
    s.stop()


def test_lists_our_tools_with_our_schemas_and_instructions(server, tools):
    async def body():
        async with server.client() as client:
            listed = (await client.list_tools()).tools
            return client.protocol_version, client.instructions, listed

    version, instructions, listed = run(body)
    ours = tools.schemas("json-schema")
    assert [t.name for t in listed] == [s["title"] for s in ours]
    for tool, schema in zip(listed, ours):
        assert tool.description == schema["description"]
        assert tool.input_schema == {k: v for k, v in schema.items() if k not in ("title", "description")}
        assert tool.output_schema == tools.output_schemas()[tool.name]
    assert instructions == tools.system_prompt_sections()[0]["text"]
    assert version == "2025-11-25"  # the sessionless revision was refused; a session-bearing one negotiated


def test_open_answer_a_question_and_close(server, tools):
    async def body():
        async with server.client() as client:
            opened = await client.call_tool("terminal_open", {"type": "shell"})
            sid = opened.structured_content["sessionId"]
            asked = await client.call_tool("terminal_send", {"sessionId": sid, "text": "read -p 'name? ' n"})
            answered = await client.call_tool("terminal_send", {"sessionId": sid, "text": "echo hi-$n-$((6*7))"})
            listed = await client.call_tool("terminal_list", {})
            closed = await client.call_tool("terminal_close", {"sessionId": sid})
            return opened, asked, answered, listed, closed

    opened, asked, answered, listed, closed = run(body)
    assert not opened.is_error and opened.structured_content["status"] == "running"
    assert asked.structured_content["waitReason"] == "stdin_read"
    assert asked.structured_content["viewport"].endswith("name? ")
    # The answer went to `read`; the shell then ran nothing else (the echo line was the answer).
    assert answered.structured_content["waitReason"] == "stdin_read"
    # Text content is exactly the capped text a model sees for that result.
    fg = ForegroundSendResult.model_validate(asked.structured_content)
    assert asked.content[0].text == tools.render(fg)
    assert listed.structured_content == {"sessions": [
        {k: opened.structured_content[k] for k in ("sessionId", "name", "type", "pid", "status")}]}
    assert closed.structured_content == {"sessionId": opened.structured_content["sessionId"], "outcome": "closed"}
    wait_for(lambda: not alive(opened.structured_content["pid"]), timeout=10)


def test_a_read_p_question_then_the_next_command(server):
    async def body():
        async with server.client() as client:
            sid = (await client.call_tool("terminal_open", {"type": "shell"})).structured_content["sessionId"]
            asked = await client.call_tool("terminal_send",
                                           {"sessionId": sid, "text": "read -p 'name? ' n; echo hi-$n"})
            answered = await client.call_tool("terminal_send", {"sessionId": sid, "text": "bob"})
            after = await client.call_tool("terminal_send", {"sessionId": sid, "text": "echo N-$((6*7))"})
            await client.call_tool("terminal_close", {"sessionId": sid})
            return asked, answered, after

    asked, answered, after = run(body)
    assert asked.structured_content["waitReason"] == "stdin_read"
    assert "hi-bob" in answered.structured_content["viewport"]
    assert answered.structured_content["exitCode"] == 0
    assert "N-42" in after.structured_content["viewport"]


def test_errors_are_results_and_the_server_keeps_serving(server, tools):
    async def body():
        async with server.client() as client:
            unknown_id = await client.call_tool("terminal_send", {"sessionId": "t-0000000000000000", "text": "x"})
            bad_args = await client.call_tool("terminal_send", {"sessionId": 7})
            unknown_tool = await client.call_tool("no_such_tool", {})
            still = await client.call_tool("terminal_list", {})
            return unknown_id, bad_args, unknown_tool, still

    unknown_id, bad_args, unknown_tool, still = run(body)
    other = Agent("direct")
    for result, direct in ((unknown_id, tools.call_text("terminal_send", {"sessionId": "t-0000000000000000",
                                                                          "text": "x"}, agent=other)),
                           (bad_args, tools.call_text("terminal_send", {"sessionId": 7}, agent=other)),
                           (unknown_tool, tools.call_text("no_such_tool", {}, agent=other))):
        assert result.is_error and result.structured_content is None
        assert result.content[0].text == direct  # the same message TerminalTools gives
    assert "unknown terminal session" in unknown_id.content[0].text
    assert "missing required argument 'text'" in bad_args.content[0].text
    assert not still.is_error and still.structured_content == {"sessions": []}


def test_two_clients_are_isolated(server):
    async def body():
        async with server.client() as a, server.client() as b:
            sid = (await a.call_tool("terminal_open", {"type": "shell"})).structured_content["sessionId"]
            seen_by_b = await b.call_tool("terminal_list", {})
            b_sends = await b.call_tool("terminal_send", {"sessionId": sid, "text": "echo stolen"})
            b_closes = await b.call_tool("terminal_close", {"sessionId": sid})
            seen_by_a = await a.call_tool("terminal_list", {})
            await a.call_tool("terminal_close", {"sessionId": sid})
            return sid, seen_by_b, b_sends, b_closes, seen_by_a

    sid, seen_by_b, b_sends, b_closes, seen_by_a = run(body)
    assert seen_by_b.structured_content == {"sessions": []}
    assert b_sends.is_error and "unknown terminal session" in b_sends.content[0].text
    assert b_closes.is_error
    assert [s["sessionId"] for s in seen_by_a.structured_content["sessions"]] == [sid]
    # Both left (DELETE) and are forgotten - by the server, which may finish that after the clients return.
    wait_for(lambda: len(server.clients) == 0, timeout=10)


def test_a_client_that_leaves_has_its_shells_closed_within_5s(server):
    async def body():
        async with server.client() as client:
            opened = await client.call_tool("terminal_open", {"type": "shell"})
            job = await client.call_tool("terminal_send", {"sessionId": opened.structured_content["sessionId"],
                                                           "text": "sleep 100", "run_in_background": True})
            assert len(server.clients) == 1
            return opened.structured_content["pid"], job.structured_content["jobId"]

    pid, job_id = run(body)
    left = time.monotonic()
    wait_for(lambda: not alive(pid), timeout=5)
    assert time.monotonic() - left < 5
    assert server.clients == {}


def test_a_client_killed_without_goodbye_has_its_shells_closed_within_5s(server):
    """A client process killed outright never sends DELETE; its event stream drops and the server notices."""
    script = ("import asyncio, sys, httpx2\nfrom mcp import Client\n"
              "from mcp.client.streamable_http import streamable_http_client\n"
              "async def main():\n"
              f"    async with httpx2.AsyncClient(headers={server.headers!r}) as http, "
              f"Client(streamable_http_client({server.url!r}, http_client=http)) as c:\n"
              "        r = await c.call_tool('terminal_open', {'type': 'shell'})\n"
              "        print(r.structured_content['pid'], flush=True)\n"
              "        await asyncio.sleep(600)\n"
              "asyncio.run(main())\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(proc.stdout.readline())
        assert alive(pid) and len(server.clients) == 1
        wait_for(lambda: all(c.streams_seen for c in server.clients.values()), timeout=10)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    killed = time.monotonic()
    wait_for(lambda: not alive(pid), timeout=8)
    assert time.monotonic() - killed < 5
    wait_for(lambda: server.clients == {}, timeout=5)


def test_cancelling_a_send_interrupts_the_program(server):
    async def body():
        async with server.client() as client:
            return await cancel_a_sleep_then_send(client)

    after = run(body)
    assert "N-42" in after.structured_content["viewport"]


def test_long_sends_report_progress(server):
    seen: list[tuple[float, str | None]] = []

    async def progress(value, total, message):
        seen.append((value, message))

    async def body():
        async with server.client() as client:
            sid = (await client.call_tool("terminal_open", {"type": "shell"})).structured_content["sessionId"]
            r = await client.call_tool("terminal_send", {"sessionId": sid, "text": "sleep 2.5; echo done"},
                                       progress_callback=progress)
            await client.call_tool("terminal_close", {"sessionId": sid})
            return r

    r = run(body)
    assert "done" in r.structured_content["viewport"]
    assert len(seen) >= 2 and seen[0][0] < seen[-1][0]
    assert "still running" in (seen[0][1] or "")


def test_token_and_dns_rebinding(tools):
    """A token is made by default, on loopback too: every user of the machine can reach a loopback port, and
    a client is a shell as the kernel's user.  Serving without one is an explicit choice, and loopback only."""
    with pytest.raises(ConfigError, match="needs a token"):
        HttpServer(tools, host="0.0.0.0", token=False)
    with pytest.raises(ConfigError, match="the token is empty"):
        HttpServer(tools, token=" ")
    server = HttpServer(tools)
    assert server.token and len(server.token) >= 32 and server.headers == {"Authorization": f"Bearer {server.token}"}
    assert f'--header "Authorization: Bearer {server.token}"' in server.client_configs()
    server.start()
    try:
        refused = httpx2.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                              headers={"Accept": "application/json, text/event-stream"})
        assert refused.status_code == 401 and "bearer token" in refused.text
        auth = {"Authorization": f"Bearer {server.token}"}
        rebound = httpx2.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                              headers={**auth, "Host": "evil.example:80",
                                       "Accept": "application/json, text/event-stream"})
        assert rebound.status_code in (403, 421)

        async def body():
            async with httpx2.AsyncClient(headers=auth) as http:
                async with Client(streamable_http_client(server.url, http_client=http)) as client:
                    return await client.call_tool("terminal_list", {})

        assert run(body).structured_content == {"sessions": []}
    finally:
        server.stop()


def test_serving_without_a_token_is_an_explicit_choice_on_loopback(tools):
    server = HttpServer(tools, token=False)
    server.start()
    try:
        assert server.token is None and server.headers == {} and "Bearer" not in server.client_configs()

        async def body():
            async with Client(server.url) as client:
                return await client.call_tool("terminal_list", {})

        assert run(body).structured_content == {"sessions": []}
    finally:
        server.stop()


def test_the_sessionless_revision_is_refused_with_the_revisions_served(server):
    reply = httpx2.post(server.url, json={"jsonrpc": "2.0", "id": 9, "method": "server/discover", "params": {}},
                        headers={"MCP-Protocol-Version": "2026-07-28", **server.headers,
                                 "Accept": "application/json, text/event-stream"})
    assert reply.status_code == 400
    error = reply.json()
    assert error["id"] == 9 and error["error"]["code"] == -32022
    assert "2025-11-25" in error["error"]["data"]["supported"]


def test_the_command_line_prints_the_url_first(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "dsh_terminal_magics.mcp", "--http", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        header, _, token = proc.stdout.readline().strip().partition(": ")
        assert header == "Authorization" and token.startswith("Bearer ")
        refused = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                              headers={"Accept": "application/json, text/event-stream"})
        assert refused.status_code == 401

        async def body():
            async with httpx2.AsyncClient(headers={"Authorization": token}) as http:
                async with Client(streamable_http_client(url, http_client=http)) as client:
                    return await client.call_tool("terminal_list", {})

        assert run(body).structured_content == {"sessions": []}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        proc.stdout.close()
        proc.stderr.close()
    bad = subprocess.run([sys.executable, "-m", "dsh_terminal_magics.mcp", "--http", "--host", "0.0.0.0",
                          "--token", "none"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "needs a token" in bad.stderr and bad.stdout == ""


def test_a_quiet_client_keeps_its_terminals(server):
    """Only a client that is gone loses its sessions: one that just says nothing for a while keeps them."""
    async def body():
        async with server.client() as client:
            opened = await client.call_tool("terminal_open", {"type": "shell"})
            sid = opened.structured_content["sessionId"]
            await client.call_tool("terminal_send", {"sessionId": sid, "text": "export KEPT=yes"})
            await asyncio.sleep(RECONNECT_GRACE + 1.5)  # past the reconnect grace, with no request in flight
            later = await client.call_tool("terminal_send", {"sessionId": sid, "text": "echo kept-$KEPT"})
            await client.call_tool("terminal_close", {"sessionId": sid})
            return later

    later = run(body)
    assert not later.is_error and "kept-yes" in later.structured_content["viewport"]


def test_cancelling_interrupts_the_program_with_policies_in_place(tools):
    """With policies or observers the call runs in a worker thread; cancelling still interrupts the program."""
    seen = []
    tools.observers.append(lambda call, result, error: seen.append(call.name))
    server = HttpServer(tools)
    server.start()
    try:
        async def body():
            async with server.client() as client:
                return await cancel_a_sleep_then_send(client)

        after = run(body)
    finally:
        server.stop()
    assert "N-42" in after.structured_content["viewport"]
    assert seen.count("terminal_send") == 2  # the interrupted send and the next one, both observed


def test_bad_addresses_are_one_clear_error_and_leave_nothing_listening(tools):
    with pytest.raises(ConfigError, match="port must be an integer from 0 to 65535"):
        HttpServer(tools, port=70000)
    first = HttpServer(tools)
    first.start()
    try:
        taken = HttpServer(tools, port=first.port)
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            taken.start()
        assert taken.clients == {} and taken._serving is None
    finally:
        first.stop()


def test_idle_connections_cannot_use_up_the_kernels_descriptors(tools, monkeypatch):
    """uvicorn keeps a connection that never sends a request open for ever, and takes every one: a local
    process (a program in a session, on the kernel's loopback) held 4000 of the kernel's fds with idle
    connections, without a token - and past its limit no session opens, no /proc file is read.  Now past
    MAX_CONNECTIONS the oldest idle one is closed (a client that sends requests still gets in), and an idle one
    is closed after FIRST_REQUEST_TIMEOUT."""
    import os
    import socket

    from dsh_terminal_magics.mcp import http as http_module

    monkeypatch.setattr(http_module, "FIRST_REQUEST_TIMEOUT", 1.0)
    server = HttpServer(tools)
    server.start()
    idle: list[socket.socket] = []
    try:
        fds_before = len(os.listdir("/proc/self/fd"))
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(300)]
        wait_for(lambda: len(os.listdir("/proc/self/fd")) - len(idle) - fds_before
                 <= http_module.MAX_CONNECTIONS + 8, timeout=10)

        async def body():
            async with server.client() as client:
                return await client.call_tool("terminal_list", {})

        assert run(body).structured_content == {"sessions": []}  # (while the idle ones are still held)
        for sock in idle:
            sock.settimeout(10)
        assert [sock.recv(1) for sock in idle] == [b""] * len(idle)  # every one closed by the server
    finally:
        for sock in idle:
            sock.close()
        server.stop()
