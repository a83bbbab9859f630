"""Helpers for the protocol and framework tests: processes found in /proc, async bodies run to completion."""
from __future__ import annotations

import asyncio
import os
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
