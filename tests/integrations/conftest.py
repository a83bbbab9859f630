"""Helpers for the protocol and framework tests: processes found in /proc, async bodies run to completion."""
from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Awaitable, Callable, Iterator

import pytest

from dsh_terminal_magics import TerminalTools


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live (non-zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def children_named(parent: int, argv: list[str]) -> list[int]:
    """Live descendants of ``parent`` whose command line is exactly ``argv``."""
    found, frontier = [], [parent]
    table: dict[int, tuple[int, list[str]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            except (OSError, ValueError, IndexError):
                continue
            table[int(entry)] = (ppid, cmd)
    while frontier:
        pid = frontier.pop()
        for child, (ppid, cmd) in table.items():
            if ppid == pid:
                frontier.append(child)
                if cmd == argv and alive(child):
                    found.append(child)
    return found


async def cancel_a_sleep_then_send(client: Any) -> Any:
    """Over an MCP ``client``: start ``sleep 100`` in a new shell, cancel the call once the sleep runs,
    wait until the sleep is gone (the cancel interrupted it), then send ``echo N-$((6*7))``; returns that
    result (the shell is closed)."""
    opened = await client.call_tool("terminal_open", {"type": "shell"})
    sid, shell = opened.structured_content["sessionId"], opened.structured_content["pid"]
    call = asyncio.ensure_future(client.call_tool("terminal_send", {"sessionId": sid, "text": "sleep 100"}))
    deadline = time.monotonic() + 20
    while not children_named(shell, ["sleep", "100"]):
        assert time.monotonic() < deadline, "sleep 100 never started"
        await asyncio.sleep(0.02)
    sleeper = children_named(shell, ["sleep", "100"])[0]
    call.cancel()
    deadline = time.monotonic() + 10
    while alive(sleeper):
        assert time.monotonic() < deadline, "cancelling did not interrupt sleep 100"
        await asyncio.sleep(0.02)
    after = await client.call_tool("terminal_send", {"sessionId": sid, "text": "echo N-$((6*7))"})
    await client.call_tool("terminal_close", {"sessionId": sid})
    return after


def run(body: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
    """Run an async test body on a fresh event loop, failing after ``timeout`` seconds."""
    async def bounded() -> Any:
        return await asyncio.wait_for(body(), timeout)
    return asyncio.run(bounded())


@pytest.fixture
def tools() -> Iterator[TerminalTools]:
    t = TerminalTools()
    yield t
    t.shutdown()
