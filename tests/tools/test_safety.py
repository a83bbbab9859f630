"""Safe to hand to a model: a scrubbed environment, call_text that never raises, displays that cannot be
fooled."""
from __future__ import annotations

import errno
import resource

import pytest

from dsh_terminal_magics import Agent, TerminalError, TerminalTools
from dsh_terminal_magics.tools.policies import Deny

SECRETS = {"OPENAI_API_KEY": "sk-test", "JUPYTERHUB_API_TOKEN": "tok", "MY_SECRET_VALUE": "s",
           "DB_PASSWORD": "pw", "AWS_CREDENTIALS": "c", "harmless_key_name": "k"}


def env_of(tools: TerminalTools, agent: Agent) -> dict[str, str]:
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    text = tools.call("terminal_send", {"sessionId": sid, "text": "env -0 | base64 -w0; echo"}, agent=agent).viewport
    tools.call("terminal_close", {"sessionId": sid}, agent=agent)
    import base64
    blob = [line for line in text.splitlines() if line and not line.startswith("$")][0]
    pairs = base64.b64decode(blob).split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


@pytest.fixture
def secret_env(monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SOME_PROJECT_SETTING", "visible-to-all-only")


def test_an_agents_session_sees_no_secrets_and_only_the_core(secret_env):
    tools = TerminalTools()
    try:
        env = env_of(tools, Agent("model"))
    finally:
        tools.shutdown()
    assert not set(SECRETS) & set(env), set(SECRETS) & set(env)
    assert "PATH" in env and "HOME" in env and env["TERM"] == "xterm-256color"
    assert "SOME_PROJECT_SETTING" not in env  # inherit: core
    # the bookkeeping token says nothing about the session id
    assert all(not v.startswith("t-") and "t-" not in v for k, v in env.items() if k.startswith("DSH_"))


def test_policy_set_include_only_and_inherit_all(secret_env):
    config = {"shellEnvironmentPolicy": {"inherit": "all", "exclude": ["SOME_*"], "set": {"GREETING": "hi"},
                                         "includeOnly": ["PATH", "HOME", "*_KEY", "SOME_*"]}}
    tools = TerminalTools(config=config)
    try:
        env = env_of(tools, Agent("model"))
    finally:
        tools.shutdown()
    assert env["GREETING"] == "hi" and "PATH" in env and "HOME" in env
    assert "OPENAI_API_KEY" not in env  # default excludes apply before includeOnly
    assert "SOME_PROJECT_SETTING" not in env
    assert "JUPYTERHUB_API_TOKEN" not in env


def test_the_notebook_users_own_sessions_inherit_everything(secret_env):
    user = Agent("notebook")
    tools = TerminalTools(user=user)
    try:
        env = env_of(tools, user)
        agent_env = env_of(tools, Agent("model"))
    finally:
        tools.shutdown()
    assert env["OPENAI_API_KEY"] == "sk-test" and env["SOME_PROJECT_SETTING"] == "visible-to-all-only"
    assert "OPENAI_API_KEY" not in agent_env


OUTER_TERMINAL = {"GPG_TTY": "/dev/pts/97", "SSH_TTY": "/dev/pts/97", "TMUX": "/tmp/tmux-0/default,4242,0",
                  "TMUX_PANE": "%3", "STY": "77.pts-1.host",
                  "TERM_PROGRAM": "iTerm.app", "KITTY_WINDOW_ID": "1", "LC_TERMINAL": "iTerm2", "COLUMNS": "33",
                  "LINES": "7", "VTE_VERSION": "7600"}


def test_no_session_sees_the_terminal_the_kernel_was_started_from(monkeypatch):
    """Jupyter started inside tmux (or kitty, iTerm2, screen): its variables describe that terminal, not the
    session's.  ``TMUX`` pointed a session's ``tmux`` at the user's own server - ``tmux kill-server`` in the
    session ended it - ``GPG_TTY`` sent gpg's passphrase dialog there, and ``LC_TERMINAL`` passed even the
    agents' ``inherit: core``.  ``COLUMNS`` and
    ``LINES`` overrode the PTY's size in the programs that read them first (Python's ``shutil``)."""
    for key, value in OUTER_TERMINAL.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TMUXINATOR_CONFIG", "kept")  # (only the names themselves, or their families, go)
    user = Agent("notebook")
    tools = TerminalTools(user=user)
    try:
        envs = [env_of(tools, user), env_of(tools, Agent("model"))]
        sid = tools.call("terminal_open", {"type": "python"}, agent=user).session_id
        size = tools.call("terminal_send", {"sessionId": sid, "text": "import shutil; shutil.get_terminal_size()"},
                          agent=user).viewport
    finally:
        tools.shutdown()
    assert [set(OUTER_TERMINAL) & set(env) for env in envs] == [set(), set()], envs
    assert envs[0]["TMUXINATOR_CONFIG"] == "kept"
    assert "os.terminal_size(columns=160, lines=40)" in size, size


def test_bad_environment_policy_is_refused_at_load():
    with pytest.raises(TerminalError, match="shellEnvironmentPolicy"):
        TerminalTools(config={"shellEnvironmentPolicy": {"inherit": "some"}})


@pytest.fixture
def tools_and_session():
    tools = TerminalTools(config={"maxResultBytes": 512})
    agent = Agent("caller")
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id
    yield tools, agent, sid
    tools.shutdown()


@pytest.mark.parametrize("name, args", [
    ("terminal_send", {"text": "echo \ud800"}),
    ("terminal_send", {"text": "", "keys": ["\udfff"]}),
    ("terminal_open", {"type": "shell", "cwd": "a\x00b"}),
    ("terminal_open", {"type": "shell", "name": "n\x00"}),
    ("terminal_record", {"action": "start", "path": "x\x00y.cast"}),
    ("terminal_read", {"sessionId": "t-\x00"}),
])
def test_call_text_turns_every_bad_input_into_capped_text(tools_and_session, name, args):
    tools, agent, sid = tools_and_session
    if name not in ("terminal_open", "terminal_read"):
        args = {"sessionId": sid, **args}
    text = tools.call_text(name, args, agent=agent)
    assert isinstance(text, str) and text.startswith("[error]") and len(text.encode()) <= 512
    with pytest.raises(TerminalError):
        tools.call(name, args, agent=agent)
    assert tools.call("terminal_send", {"sessionId": sid, "text": "echo ok"}, agent=agent).exit_code == 0


@pytest.mark.parametrize("verdict", [Deny(None), Deny(12345), 42, "nope", Deny("x" * 5000)])
def test_policies_returning_odd_things_come_back_as_text(tools_and_session, verdict):
    tools, agent, sid = tools_and_session
    tools.add_policy(name="odd", before=lambda call: verdict)
    text = tools.call_text("terminal_list", {}, agent=agent)
    assert isinstance(text, str) and text.startswith(("[denied] [policy: odd]", "[error]"))
    assert len(text.encode()) <= 512
    with pytest.raises(TerminalError):
        tools.call("terminal_list", {}, agent=agent)


def test_emfile_is_an_error_text_that_says_so(tools_and_session):
    tools, agent, _ = tools_and_session
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    import os
    held = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as exc:
            assert exc.errno == errno.EMFILE
        for fd in held[-3:]:  # a few free: enough for the call itself, not for a PTY session
            os.close(fd)
        held = held[:-3]
        text = tools.call_text("terminal_open", {"type": "shell"}, agent=agent)
        assert text.startswith("[error]") and "too many open files" in text, text
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
