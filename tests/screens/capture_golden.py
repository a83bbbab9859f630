"""Capture the golden byte logs (run by hand when a program's output legitimately changes).

    python3 tests/screens/capture_golden.py

Each case runs a real program in a real session, saves the raw bytes it wrote
(``NAME.bin``) and the screen pyte renders from them (``NAME.screen``), which a
person checks once; the tests then replay the bytes and compare.
"""
from __future__ import annotations

from pathlib import Path

from dsh_terminal_magics import Agent
from dsh_terminal_magics.mechanism import SendRequest, SessionManager
from dsh_terminal_magics.mechanism.screen import ScreenModel

HERE = Path(__file__).resolve().parent / "golden"
LONG = "/tmp/dsh-golden-long.txt"


def capture(name: str, setup: list[str], steps: list[SendRequest], rows: int = 24, cols: int = 80) -> None:
    manager, agent = SessionManager(), Agent("golden")
    sid = manager.sync.open(agent, "shell").session_id
    manager.sync.resize(agent, sid, rows, cols)
    for command in setup:
        manager.sync.send(agent, sid, SendRequest(command))
    session = manager.loop_thread.call(manager.session, agent, sid)
    start = manager.loop_thread.call(lambda: session.raw.total)
    for step in steps:
        manager.sync.send(agent, sid, step)
    data, _ = manager.loop_thread.call(lambda: session.raw.since(start))
    manager.sync.shutdown()
    model = ScreenModel(rows, cols, 0)
    model.feed(data)
    (HERE / f"{name}.bin").write_bytes(data)
    (HERE / f"{name}.screen").write_text(model.snapshot().text() + "\n")
    print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    Path(LONG).write_text("".join(f"line {i:03d} of the golden file\n" for i in range(1, 201)))
    quiet = "export PS1='$ ' TERM=xterm-256color LESS= LESSHISTFILE=-"
    capture("less_pagedown", [quiet], [SendRequest(f"less {LONG}"), SendRequest("", False, keys=("PageDown",))])
    capture("vim_insert", [quiet, "rm -f /tmp/dsh-golden.txt"],
            [SendRequest("vim -u NONE -N -i NONE /tmp/dsh-golden.txt"),
             SendRequest("ihello from vim", False), SendRequest("", False, keys=("Enter",)),
             SendRequest("second line", False), SendRequest("", False, keys=("Esc",))])
    capture("colours_and_cursor", [quiet],
            [SendRequest(r"printf '\e[2J\e[H\e[1;31mred\e[0m plain\e[5;10Hat 5,10\e[3;1Hrow three\n'")])
    capture("less_quit", [quiet], [SendRequest("echo before-less"), SendRequest(f"less {LONG}"),
                                   SendRequest("", False, keys=("PageDown",)), SendRequest("q", False)])
    capture("dialog_box", [quiet], [SendRequest("LC_ALL=C dialog --msgbox 'boxed in' 6 24")])
