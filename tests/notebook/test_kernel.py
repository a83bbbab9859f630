"""A real ipykernel through jupyter_client: idle progress, no hangs, nothing left after shutdown or SIGKILL."""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from jupyter_client.manager import KernelManager

from dsh_terminal_magics.mechanism.process_tree import ProcessId, is_alive, read_stat
from tests.conftest import wait_for


class Kernel:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(extra_arguments=["--HistoryManager.enabled=False"], env={**os.environ, **(env or {})})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 60) -> tuple[str, str]:
        """Execute ``code``; return (status, all text it printed or displayed)."""
        chunks: list[str] = []

        def hook(msg: dict) -> None:
            content = msg["content"]
            if msg["msg_type"] == "stream":
                chunks.append(content["text"])
            elif msg["msg_type"] in ("execute_result", "display_data"):
                chunks.append(content["data"].get("text/plain", "") + "\n")
            elif msg["msg_type"] == "error":
                chunks.append(f"{content['ename']}: {content['evalue']}\n")

        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        return reply["content"]["status"], "".join(chunks)

    def pids(self, text: str) -> list[ProcessId]:
        out = []
        for pid in map(int, re.findall(r"PID=(\d+)", text)):
            stat = read_stat(pid)
            assert stat is not None
            out.append(ProcessId(pid, stat.start_time))
        return out

    def stop(self) -> None:
        self.kc.stop_channels()
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=False)


@pytest.fixture
def kernel() -> Iterator[Kernel]:
    k = Kernel()
    yield k
    k.stop()


def test_background_job_progresses_while_idle_and_read_does_not_hang(kernel, tmp_path):
    status, out = kernel.run("%load_ext dsh_terminal_magics")
    assert status == "ok" and out == ""
    kernel.run("%term_open")
    marker = tmp_path / "ticks-done"
    status, out = kernel.run(f"%term_send --bg for i in $(seq 1 20); do echo tick-$i; sleep 0.1; done; "
                             f"touch {marker}")
    assert status == "ok" and "started job j-" in out
    wait_for(marker.exists, timeout=60)  # the job got there while the kernel ran no cell at all
    status, out = kernel.run("%job_output --wait")
    assert "tick-20" in out and "completed" in out, out
    started = time.monotonic()
    status, out = kernel.run("%term_send read x", timeout=30)
    assert status == "ok" and "wait: stdin_read" in out and time.monotonic() - started < 10
    status, out = kernel.run("%term_send answer\n%term_send echo got=$x", timeout=30)
    assert "got=answer" in out


def _start_tree(kernel: Kernel) -> list[ProcessId]:
    kernel.run("%load_ext dsh_terminal_magics")
    kernel.run("%term_open")
    kernel.run("%term_open python")
    cmds = ["echo PID=$$", "sleep 1000 & echo PID=$!", "nohup sleep 1000 >/dev/null 2>&1 & echo PID=$!",
            "setsid sh -c 'echo PID=$$; exec sleep 1000' &"]
    sid = _first_session(kernel)
    for cmd in cmds:
        kernel.run(f"%term_send -s {sid} {cmd}")
    # the setsid child prints its pid when it gets to it: wait for all four
    text = wait_for(lambda: (lambda out: out if len(re.findall(r"PID=\d+", out)) == 4 else "")(
        kernel.run(f"%term_read -s {sid} --count 100")[1]))
    pids = kernel.pids(str(text))
    assert len(pids) == 4 and all(is_alive(p) for p in pids)
    return pids


def _first_session(kernel: Kernel) -> str:
    _, out = kernel.run("%term_list")
    return re.search(r"(t-[0-9a-f]{16}) type=shell", out).group(1)


def test_kernel_shutdown_leaves_no_session_process(kernel):
    pids = _start_tree(kernel)
    kernel.stop()
    wait_for(lambda: not any(is_alive(p) for p in pids), timeout=20)


def test_kernel_sigkill_leaves_no_session_process(kernel):
    pids = _start_tree(kernel)
    kernel_pid = kernel.km.provisioner.process.pid
    os.kill(kernel_pid, signal.SIGKILL)
    started = time.monotonic()
    wait_for(lambda: not any(is_alive(p) for p in pids), timeout=20)
    print(f"abrupt kernel death: all {len(pids)} session processes gone in {time.monotonic() - started:.2f}s",
          file=sys.stderr)


def test_an_agents_session_cannot_reach_the_kernel_through_its_connection_files(tmp_path):
    """With the sandbox off, an agent's session shares the kernel's file system and network: it read the
    kernel's connection file (ports and signing key), ran code in the kernel and printed its secret variables
    (it could as well have called the tools as any agent).  The kernel's connection file and Jupyter's runtime
    directory (every kernel's, the server's token) are hidden from agents' sessions; the notebook user's own
    sessions still see them."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "jpserver-1.json").write_text('{"token": "server-token-probe"}')
    kernel = Kernel(env={"JUPYTER_RUNTIME_DIR": str(runtime)})
    try:
        key = json.loads(Path(kernel.km.connection_file).read_text())["key"]
        assert len(key) > 8
        show = f"cat {kernel.km.connection_file} {runtime}/jpserver-1.json; echo"
        status, out = kernel.run(f"""
from dsh_terminal_magics import Agent, TerminalTools
tools = TerminalTools(user=Agent("notebook user"))
for owner in (Agent("model"), tools.user):
    sid = tools.call("terminal_open", {{"type": "shell"}}, agent=owner).session_id
    print(tools.call("terminal_send", {{"sessionId": sid, "text": {show!r}}}, agent=owner).viewport, "=====")
tools.shutdown()
""")
        assert status == "ok", out
        agent_view, user_view = out.split("=====")[:2]
        assert key not in agent_view and "server-token-probe" not in agent_view, agent_view
        assert key in user_view and "server-token-probe" in user_view, user_view
    finally:
        kernel.stop()


def test_a_session_sees_the_environment_the_kernel_was_started_with_not_what_it_set_for_itself(monkeypatch):
    """ipykernel sets, in its own process, the inline plotting backend (``import matplotlib.pyplot`` fails in a
    project's virtualenv without ``matplotlib_inline``) and colours forced on (piped output would carry
    escapes), and its launcher gives it its parent's pid: a terminal beside the notebook sees none of them.
    What the kernel was started with stays, even when the kernel sets the same value (``CLICOLOR=1`` here)."""
    names = ("MPLBACKEND", "FORCE_COLOR", "CLICOLOR_FORCE", "CLICOLOR", "JPY_PARENT_PID")
    for name in names:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLICOLOR", "1")
    monkeypatch.setenv("STARTED_WITH", "kept")
    kernel = Kernel()
    try:
        show = "; ".join(f"print(os.environ.get('{name}'))" for name in names)
        _, out = kernel.run(f"import os; {show}")
        assert out.split() == ["module://matplotlib_inline.backend_inline", "1", "1", "1", str(os.getpid())], out
        kernel.run("%load_ext dsh_terminal_magics")
        kernel.run("%term_open")
        echo = " ".join(f"[${name}]" for name in (*names, "STARTED_WITH"))
        _, out = kernel.run(f"%term_send echo {echo}")
        assert "[] [] [] [1] [] [kept]" in out.splitlines(), out
    finally:
        kernel.stop()


def test_a_secret_goes_from_a_password_box_to_the_prompt_and_nowhere_else(kernel):
    """``%term_send --secret`` asks the notebook's frontend for the text in a password box (an input request
    with ``password``) and sends it: the cell holds no secret, and no output or card shows it.  Asked while the
    terminal would show it as typed (the shell at its prompt), it refuses before asking."""
    secret = "hunter2-" + os.urandom(4).hex()
    assert kernel.run("%load_ext dsh_terminal_magics\n%term_open")[0] == "ok"
    status, out = kernel.run("%term_send --secret")
    assert status == "error" and "would show the secret" in out, out
    status, out = kernel.run("%term_send read -s -p 'pw: ' P; echo; echo got ${#P} chars $P | tr a-z A-Z")
    assert status == "ok" and "\npw: \n[wait: stdin_read" in out, out
    asked: list[dict] = []
    messages: list[str] = []

    def answer(msg: dict) -> None:
        asked.append(msg["content"])
        kernel.kc.input(secret)

    reply = kernel.kc.execute_interactive("%term_send --secret", timeout=60, allow_stdin=True, stdin_hook=answer,
                                          output_hook=lambda msg: messages.append(json.dumps(msg["content"])))
    assert reply["content"]["status"] == "ok", messages
    assert len(asked) == 1 and asked[0]["password"] is True, asked
    shown = "".join(messages)
    assert f"GOT {len(secret)} CHARS {secret.upper()}" in shown, shown
    assert secret not in shown, shown
