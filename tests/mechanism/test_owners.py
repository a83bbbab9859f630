"""The owner fence: identity, never names; a foreign id looks exactly like an unknown one."""
from __future__ import annotations

import pytest

from dsh_terminal_magics import Agent, TerminalError
from dsh_terminal_magics.errors import UnknownSessionError
from dsh_terminal_magics.mechanism import SendRequest


def test_second_owner_cannot_touch_the_first_owners_session(manager):
    alice, mallory = Agent("a"), Agent("a")  # same name, different owners
    info = manager.sync.open(alice, "shell")
    sid = info.session_id
    try:
        calls = [
            lambda: manager.sync.send(mallory, sid, SendRequest("echo pwned")),
            lambda: manager.sync.read(mallory, sid),
            lambda: manager.sync.signal(mallory, sid, "SIGINT"),
            lambda: manager.sync.close(mallory, sid),
        ]
        unknown = str(UnknownSessionError(sid))
        for call in calls:
            with pytest.raises(UnknownSessionError) as err:
                call()
            assert str(err.value) == unknown
        with pytest.raises(UnknownSessionError) as err:
            manager.sync.read(alice, "t-0000000000000000")
        assert "no session with this id" in str(err.value)
        assert manager.sync.list(mallory) == []
        assert [s.session_id for s in manager.sync.list(alice)] == [sid]
        assert "pwned" not in "\n".join(manager.sync.read(alice, sid).lines)
    finally:
        manager.sync.close(alice, sid)


def test_ids_are_opaque_and_long(manager, agent):
    info = manager.sync.open(agent, "shell")
    try:
        prefix, hexpart = info.session_id.split("-")
        assert len(hexpart) == 16 and int(hexpart, 16) >= 0
        assert len(info.session_id.encode()) < 64
    finally:
        manager.sync.close(agent, info.session_id)


def test_no_owner_is_refused(manager):
    with pytest.raises(TerminalError, match="terminal tools require an initiating agent"):
        manager.sync.open(None, "shell")
