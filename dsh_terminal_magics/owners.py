"""Owners and opaque ids.

An :class:`Agent` is an owner: authority is the object itself, never its name.
Two agents named ``"a"`` are two owners.
"""
from __future__ import annotations

import secrets
from typing import Any


class Agent:
    """The initiating owner of sessions and jobs.

    Identity is the fence: pass the same object to every call.  The name is
    only a label for people.  Used as a context manager (``with Agent("x") as
    a:``) it closes every session and job it owns when the block ends, once it
    has been bound to a :class:`~dsh_terminal_magics.TerminalTools`.
    """

    __slots__ = ("name", "_scope_closers", "__weakref__")

    def __init__(self, name: str = "agent") -> None:
        if not isinstance(name, str):
            raise TypeError(f"Agent name must be a str, got {type(name).__name__}")
        self.name = name
        self._scope_closers: list[Any] = []

    def __repr__(self) -> str:
        return f"Agent({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()

    async def __aenter__(self) -> "Agent":
        return self

    async def __aexit__(self, *exc: object) -> None:
        for closer in list(self._scope_closers):
            await closer.aclose_owner(self)

    def close_all(self) -> None:
        """Close every session and job this agent owns in every bound tool set."""
        for closer in list(self._scope_closers):
            closer.close_owner(self)

    def _bind(self, closer: Any) -> None:
        if not any(c is closer for c in self._scope_closers):
            self._scope_closers.append(closer)


def new_id(prefix: str) -> str:
    """Return an opaque, unguessable id: ``prefix`` + 64 random bits in hex (e.g. ``t-1f0c…``)."""
    return f"{prefix}-{secrets.token_hex(8)}"
