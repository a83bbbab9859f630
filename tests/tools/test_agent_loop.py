"""A scripted agent loop: a list of tool calls stands in for the model; we assert on what it would see."""
from __future__ import annotations

import re
import sys
import time

from dsh_terminal_magics import Agent, TerminalTools


def test_scripted_agent_session(tools: TerminalTools):
    agent = Agent("scripted-model")
    transcript: list[str] = []

    def turn(name: str, args: dict) -> str:
        text = tools.call_text(name, args, agent=agent)
        transcript.append(f"{name} {args}\n{text}")
        assert len(text.encode()) <= tools.max_result_bytes
        return text

    opened = turn("terminal_open", {"type": "shell", "name": "work"})
    sid = re.search(r"sessionId: (t-[0-9a-f]{16})", opened).group(1)

    text = turn("terminal_send", {"sessionId": sid, "text": f"{sys.executable} -q"})
    assert text.startswith("[wait: stdin_read] [session: running]") and text.endswith(">>> ")

    text = turn("terminal_send", {"sessionId": sid, "text": "name = input('Your name? ')"})
    assert text.startswith("[wait: stdin_read]") and text.endswith("Your name? ")

    text = turn("terminal_send", {"sessionId": sid, "text": "Grace"})  # the next turn answers the question
    assert text.endswith(">>> ")
    text = turn("terminal_send", {"sessionId": sid, "text": "print(f'hello {name}')"})
    assert "hello Grace" in text

    text = turn("terminal_send", {"sessionId": sid, "text": "exit()"})
    assert text.startswith("[wait: stdin_read] [session: running] [exit: 0]") and text.endswith("$ ")

    build = "for step in compile link test; do echo \"building $step\"; sleep 0.2; done; echo BUILD OK"
    started = turn("terminal_send", {"sessionId": sid, "text": build, "run_in_background": True})
    job = re.search(r"jobId: (j-[0-9a-f]{16})", started).group(1)

    polled = []
    for _ in range(300):
        text = turn("job_output", {"jobId": job})
        polled.append(text)
        if "[status: completed]" in text:
            break
        time.sleep(0.05)
    assert "[status: completed]" in polled[-1] and "exitCode=0" in polled[-1]
    everything = "\n".join(polled)
    assert [m for m in re.findall(r"building \w+", everything) if not m.endswith("step")] == [
        "building compile", "building link", "building test"]
    assert len(re.findall(r"^BUILD OK$", everything, re.M)) == 1

    listed = turn("terminal_list", {})
    assert f"{sid} type=shell status=running" in listed and "name=work" in listed
    closed = turn("terminal_close", {"sessionId": sid})
    assert closed == f"sessionId: {sid} outcome: closed"
    assert turn("terminal_list", {}) == "[sessions: 0]"
