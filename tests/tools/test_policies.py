"""Policies around tool calls: every outcome, the cap after each, block shapes, bad policies."""
from __future__ import annotations

import asyncio
import threading

import pytest

from dsh_terminal_magics import Agent, TerminalError, TerminalTools
from dsh_terminal_magics.tools import MARKER
from dsh_terminal_magics.notebook.confirmation import LAST_PROMPT, confirm_in_notebook
from dsh_terminal_magics.tools.policies import (Deny, PolicyDenied, PolicyError, Replace, Rewrite,
                                                ShortCircuit, confirm_commands, deny_commands)
from tests.conftest import wait_for

LONG = "policy text " * 100


def size(text: str) -> int:
    return len(text.encode())


@pytest.fixture
def capped():
    made = []

    def make(cap: int) -> TerminalTools:
        t = TerminalTools(config={"maxResultBytes": cap})
        made.append(t)
        return t

    yield make
    for t in made:
        t.shutdown()


def open_shell(tools, agent):
    return tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id


@pytest.mark.parametrize("cap", [64, 200])
def test_deny_is_capped_and_executes_nothing(capped, agent, cap):
    tools = capped(cap)
    sid = open_shell(tools, agent)
    tools.add_policy(name="no-rm", before=lambda call: Deny("rm is not allowed " + LONG)
                     if "rm" in call.args.get("text", "") else None)
    text = tools.call_text("terminal_send", {"sessionId": sid, "text": "rm -rf /tmp/x; touch /tmp/dsh-denied"},
                           agent=agent)
    assert text.startswith("[denied] [policy: no-rm]") and size(text) <= cap and MARKER in text
    with pytest.raises(PolicyDenied):
        tools.call("terminal_send", {"sessionId": sid, "text": "rm x"}, agent=agent)
    page = tools.call("terminal_read", {"sessionId": sid}, agent=agent)
    assert "rm -rf" not in page.text  # never reached the terminal


@pytest.mark.parametrize("cap", [64, 200])
def test_short_circuit_and_replace_are_capped(capped, agent, cap):
    tools = capped(cap)
    sid = open_shell(tools, agent)
    tools.add_policy(name="cache", before=lambda call: ShortCircuit("cached: " + LONG)
                     if call.args.get("text") == "expensive" else None)
    tools.add_policy(name="redact", after=lambda call, result: Replace("redacted " + LONG)
                     if call.args.get("text") == "secret" else None)
    short = tools.call_text("terminal_send", {"sessionId": sid, "text": "expensive"}, agent=agent)
    assert short.startswith("[policy: cache] [short-circuit]") and size(short) <= cap and MARKER in short
    replaced = tools.call_text("terminal_send", {"sessionId": sid, "text": "secret"}, agent=agent)
    assert replaced.startswith("[policy: redact] [replaced]") and size(replaced) <= cap
    small = tools.call_text("terminal_send", {"sessionId": sid, "text": "echo ok"}, agent=agent)
    assert small.startswith("[wait: stdin_read]") and size(small) <= cap


def test_rewrite_and_around(capped, agent):
    tools = capped(4096)
    sid = open_shell(tools, agent)
    seen = []

    def around(call, proceed):
        seen.append(("before", call.args["text"]))
        result = proceed()
        seen.append(("after", result.exit_code))
        return result

    tools.add_policy(name="safe-ls", before=lambda call: Rewrite({**call.args, "text": "ls -1 /"})
                     if call.args.get("text") == "ls" else None)
    tools.add_policy(name="audit", around=around)
    r = tools.call("terminal_send", {"sessionId": sid, "text": "ls"}, agent=agent)
    assert "ls -1 /" in r.viewport and seen == [("before", "ls -1 /"), ("after", 0)]


def test_multi_block_results_keep_their_shape(capped, agent):
    tools = capped(64)
    sid = open_shell(tools, agent)
    blocks = [{"type": "text", "text": LONG}, {"type": "image", "source": {"type": "base64", "data": "AAAA"}}]
    tools.add_policy(name="screenshot", after=lambda call, result: Replace(blocks)
                     if call.name == "terminal_read" else None)
    assert tools.call_text("terminal_read", {"sessionId": sid}, agent=agent) == blocks


@pytest.mark.parametrize("policy_kwargs,message", [
    ({"before": lambda call: 1 / 0}, "policy 'bad' before raised ZeroDivisionError"),
    ({"before": lambda call: "nope"}, "policy 'bad' before returned str"),
    ({"before": lambda call: Rewrite({"sessionId": "$SID", "text": 5})},
     "policy 'bad' rewrote the arguments into invalid ones"),
    ({"before": lambda call: ShortCircuit(42)}, "policy 'bad' before returned int"),
    ({"after": lambda call, result: "replace me"}, "policy 'bad' after returned str"),
    ({"around": lambda call, proceed: None}, "policy 'bad' around returned NoneType"),
])
def test_bad_policies_are_clear_errors_and_leave_nothing(capped, agent, policy_kwargs, message):
    tools = capped(4096)
    sid = open_shell(tools, agent)
    before = tools.call("terminal_list", agent=agent)
    tools.add_policy(name="bad", tools=["terminal_send"], **policy_kwargs)
    with pytest.raises(PolicyError, match=message.replace("(", r"\(")):
        tools.call("terminal_send", {"sessionId": sid, "text": "echo hi"}, agent=agent)
    assert tools.call_text("terminal_send", {"sessionId": sid, "text": "echo hi"}, agent=agent).startswith(
        "[error]\npolicy 'bad'")
    assert tools.call("terminal_list", agent=agent) == before
    tools.policies.clear()
    r = tools.call("terminal_send", {"sessionId": sid, "text": "echo still-fine"}, agent=agent)
    assert r.wait_reason == "stdin_read" and r.session_status == "running"


def test_ready_made_deny_list(capped, agent):
    tools = capped(4096)
    sid = open_shell(tools, agent)
    tools.add_policy(deny_commands([r"\brm\s+-rf\s+/(\s|$)", r"\bmkfs\b"]))
    text = tools.call_text("terminal_send", {"sessionId": sid, "text": "rm -rf / --no-preserve-root"}, agent=agent)
    assert text.startswith("[denied] [policy: deny-list]")
    assert tools.call("terminal_send", {"sessionId": sid, "text": "echo rm -rf /tmp/x"}, agent=agent).exit_code == 0


def test_deny_list_sees_what_keys_type(capped, agent):
    """The pattern matches the whole payload as typed: text, then the characters the keys send."""
    tools = capped(4096)
    sid = open_shell(tools, agent)
    tools.add_policy(deny_commands([r"rm -rf /\r"]))
    keys = ["r", "m", "Space", "-", "r", "f", "Space", "/", "Enter"]
    text = tools.call_text("terminal_send", {"sessionId": sid, "text": "", "submit": False, "keys": keys},
                           agent=agent)
    assert text.startswith("[denied] [policy: deny-list]")
    text = tools.call_text("terminal_send", {"sessionId": sid, "text": "rm -rf", "keys": ["Space", "/", "Enter"],
                                             "submit": False}, agent=agent)
    assert text.startswith("[denied] [policy: deny-list]")
    assert tools.call("terminal_send", {"sessionId": sid, "text": "echo fine"}, agent=agent).exit_code == 0


def test_confirmation_asks_and_obeys(capped, agent):
    tools = capped(4096)
    sid = open_shell(tools, agent)
    answers = iter([False, True])
    asked = []
    tools.add_policy(confirm_commands([r"^git push"], ask=lambda call: asked.append(call.args["text"])
                                      or next(answers)))
    assert tools.call_text("terminal_send", {"sessionId": sid, "text": "git push origin"}, agent=agent).startswith(
        "[denied] [policy: confirm]")
    r = tools.call("terminal_send", {"sessionId": sid, "text": "git push --help >/dev/null 2>&1; echo asked"},
                   agent=agent)
    assert "asked" in r.viewport and asked == ["git push origin",
                                               "git push --help >/dev/null 2>&1; echo asked"]
    assert tools.call("terminal_send", {"sessionId": sid, "text": "echo no question"}, agent=agent).exit_code == 0
    assert len(asked) == 2


def test_confirmation_widget_answered_from_another_thread(capped, agent, monkeypatch):
    import comm

    class Recorder:
        comm_id, kernel = "r", "k"

        def __init__(self, *a, **k):
            self.messages = []

        def open(self, *a, **k): ...
        def on_msg(self, *a, **k): ...
        def close(self, *a, **k): ...

        def send(self, data=None, **k):
            self.messages.append(data)

    monkeypatch.setattr(comm, "create_comm", lambda **kw: Recorder())
    tools = capped(4096)
    sid = open_shell(tools, agent)
    tools.add_policy(confirm_in_notebook([r"^echo confirm"], timeout=60))
    LAST_PROMPT.clear()
    clicker = threading.Thread(target=lambda: (wait_for(lambda: LAST_PROMPT), LAST_PROMPT[0].yes.click()))
    clicker.start()
    r = tools.call("terminal_send", {"sessionId": sid, "text": "echo confirmed-$((1+1))"}, agent=agent)
    clicker.join()
    assert "confirmed-2" in r.viewport and LAST_PROMPT[0].answer is True


def test_agent_scopes_sync_and_async(capped):
    tools = capped(4096)
    with Agent("sync-scope") as a:
        sid = tools.call("terminal_open", {"type": "shell"}, agent=a).session_id
        tools.call("terminal_send", {"sessionId": sid, "text": "sleep 100", "run_in_background": True}, agent=a)
    assert tools.call("terminal_list", agent=a).root == [] and tools.jobs.sync.list(a) == []

    async def scoped() -> Agent:
        async with Agent("async-scope") as b:
            await tools.acall("terminal_open", {"type": "python"}, agent=b)
            raise KeyError("boom")

    holder = []

    async def run() -> None:
        try:
            await scoped()
        except KeyError:
            holder.append(True)

    asyncio.run(run())
    assert holder == [True]
    assert all(s.owner.name != "async-scope" for s in tools.manager._sessions.values())
