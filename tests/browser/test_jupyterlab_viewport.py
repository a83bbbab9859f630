"""The viewport in a real browser: JupyterLab headless, driven by Playwright with Debian's chromium.

Run locally with `apt-get install chromium` (or set DSH_CHROMIUM to a Chromium binary); without a
browser the test is skipped, except under CI (CI=true), where a missing browser is a failure.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parent.parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("DSH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if CHROMIUM is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("the browser test needs chromium: .ci/run installs it (apt-get install chromium)")
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)


KERNEL_READY = """() => {
    const widget = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const kernel = widget && widget.sessionContext && widget.sessionContext.session
        && widget.sessionContext.session.kernel;
    return !!kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle';
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyterlab(tmp_path) -> Iterator[str]:
    shutil.copy(ROOT / "notebooks" / "05-teaching-demo.ipynb", tmp_path / "05-teaching-demo.ipynb")
    port = free_port()
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
         "--ip=127.0.0.1", "--ServerApp.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
         f"--ServerApp.root_dir={tmp_path}", "--LabApp.expose_app_in_browser=True",
        ],
        stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    SERVER["pid"] = proc.pid
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        raise AssertionError("JupyterLab did not start: " + (tmp_path / "lab.log").read_text()[-2000:])
    yield url
    proc.terminate()  # (the server shuts its kernels down and exits: 0.8 s, where `jupyter server stop` took 12)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


#: The JupyterLab server of the running test: only its descendants are this test's processes.
SERVER: dict[str, int] = {}


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether ``ancestor`` is on ``pid``'s parent chain (read from /proc)."""
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == ancestor:
            return True
    return False


def session_sleeps() -> list[int]:
    """Live ``sleep 30`` processes started by a terminal session under this test's JupyterLab (found in
    /proc, not by the package; other sessions on the machine are not this test's)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmdline == b"sleep\x0030\x00" and b"DSH_TERMINAL_SESSION=" in environ and state not in "ZX" \
                and descends_from(int(name), SERVER["pid"]):
            found.append(int(name))
    return found


def test_viewport_in_jupyterlab(jupyterlab):
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{jupyterlab}/lab/tree/05-teaching-demo.ipynb")
            page.wait_for_function(KERNEL_READY, timeout=90_000)
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            screen = page.locator("pre.dsh-terminal").first
            expect(screen).to_contain_text("counting 3", timeout=60_000)
            expect(screen).to_contain_text("not bold")
            assert screen.locator("b").count() == 0  # program output never becomes markup

            box = page.locator("input[placeholder='type a line and press Enter']").first
            box.fill("echo typed-in-the-browser-$((6*7))")
            box.press("Enter")
            expect(screen).to_contain_text("typed-in-the-browser-42", timeout=20_000)

            box.fill("sleep 30")
            box.press("Enter")
            expect(screen).to_contain_text("sleep 30", timeout=20_000)
            wait_for(lambda: session_sleeps(), timeout=20)
            started = time.monotonic()
            page.get_by_role("button", name="Ctrl-C").first.click()
            box.fill("echo ok-$((6*7))")
            box.press("Enter")
            # only a shell back at its prompt expands this (typed-ahead text would be echoed as typed)
            expect(screen).to_contain_text("ok-42", timeout=20_000)
            assert time.monotonic() - started < 20  # well before the sleep would have ended
            assert session_sleeps() == []  # the sleep is gone, not just backgrounded
            page.screenshot(path=str(ARTIFACTS / "viewport-jupyterlab.png"), full_page=True)
        finally:
            browser.close()
