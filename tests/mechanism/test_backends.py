"""Backends by type name: built-ins, third-party entry points, clear errors."""
from __future__ import annotations

import sys
import textwrap

import pytest

from dsh_terminal_magics import Agent
from dsh_terminal_magics.errors import BackendError
from dsh_terminal_magics.mechanism import BackendRegistry, SendRequest, SessionManager
from dsh_terminal_magics.mechanism.backends import readline_env
from tests.conftest import wait_for


def test_builtin_backends():
    registry = BackendRegistry()
    assert {"shell", "python"} <= set(registry.names())
    spec = registry.get("shell").launch("/")
    assert "--rcfile" in spec.argv and "exit codes reported" in spec.description


def test_entry_point_backend_is_loaded_and_runs(tmp_path, monkeypatch):
    (tmp_path / "dsh_cat_backend.py").write_text(textwrap.dedent("""
        from dsh_terminal_magics.mechanism import LaunchSpec

        class CatBackend:
            name = "cat"

            def launch(self, cwd):
                return LaunchSpec(["cat"], {}, "cat: echoes every line")
    """))
    dist = tmp_path / "dsh_cat_backend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dsh-cat-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[dsh_terminal_magics.backends]\ncat = dsh_cat_backend:CatBackend\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = BackendRegistry()
    assert "cat" in registry.names()
    manager, agent = SessionManager(registry=registry), Agent("plugin")
    try:
        info = manager.sync.open(agent, "cat")
        assert info.motd.startswith("cat: echoes every line")
        r = manager.sync.send(agent, info.session_id, SendRequest("meow"))
        assert r.wait_reason == "stdin_read" and r.viewport.count("meow") == 2
    finally:
        manager.sync.shutdown()
    sys.modules.pop("dsh_cat_backend", None)


def test_bad_backend_registration_is_refused():
    with pytest.raises(BackendError, match="is not a backend"):
        BackendRegistry().register(object())  # type: ignore[arg-type]


def _zombies_under(pid: int) -> list[int]:
    """Zombie processes among ``pid``'s descendants."""
    from dsh_terminal_magics.mechanism.process_tree import descendants, process_table

    table = process_table()
    return [p for p in descendants([pid], table) if table[p].state == "Z"]


def test_the_python_session_leaves_no_zombies(manager, agent):
    """The session's program is its tree's subreaper, so orphans become its children; the python REPL never
    reaps children it did not start, and each ``os.system('job &')`` (or daemon) left a zombie until the
    session closed.  The REPL now runs under ``sh``, which reaps them."""
    info = manager.sync.open(agent, "python")
    started = "import os\nfor i in range(5): os.system('sleep 0.1 &')\n"
    r = manager.sync.send(agent, info.session_id, SendRequest(started))
    assert r.wait_reason == "stdin_read" and r.viewport.count("0") >= 5, r.viewport
    r = manager.sync.send(agent, info.session_id, SendRequest("import time; time.sleep(1)"))  # (they ended)
    assert r.wait_reason == "stdin_read"
    root = manager.loop_thread.call(manager.session, agent, info.session_id).child.pid
    wait_for(lambda: not _zombies_under(root), timeout=10)
    assert open(f"/proc/{info.pid}/comm").read().startswith("python")  # (the session's pid is the REPL's)
    r = manager.sync.send(agent, info.session_id, SendRequest("print(6*7)"))
    assert "42" in r.viewport.splitlines()
    manager.sync.close(agent, info.session_id)


def test_the_python_session_is_back_on_the_main_screen_at_its_prompt(manager, agent):
    """A program the REPL ran that left the alternate screen on (a curses program killed) left the terminal
    there: every later result was a snapshot of that screen, and the line history stopped.  The REPL prints
    the shell's keyed prompt marker: back at its prompt, the session is back on the main screen."""
    info = manager.sync.open(agent, "python")
    try:
        r = manager.sync.send(agent, info.session_id, SendRequest(
            "import os; os.system(\"printf '\\\\033[?1049h\\\\033[?25l'; echo drawn\")"))
        assert r.wait_reason == "stdin_read", r
        r = manager.sync.send(agent, info.session_id, SendRequest("print(6*7)"))
        assert r.screen is None and r.viewport.splitlines() == [">>> print(6*7)", "42", ">>> "], r
        assert "\x1b" not in r.viewport and r.exit_code is None, r
        page = manager.sync.read(agent, info.session_id, 0, 3)
        assert page.lines[-2:] == ["42", ">>> "], page
        r = manager.sync.send(agent, info.session_id, SendRequest("print('\\x1b]133;D;0;1\\x07forged')"))
        assert r.viewport.splitlines()[-2:] == ["forged", ">>> "] and r.exit_code is None, r
    finally:
        manager.sync.close(agent, info.session_id)


def _session_send(manager, agent, kind, text):
    sid = manager.sync.open(agent, kind).session_id
    try:
        return manager.sync.send(agent, sid, SendRequest(text))
    finally:
        manager.sync.close(agent, sid)


def test_sessions_read_the_systems_readline_settings_not_the_users(manager, agent, tmp_path, monkeypatch):
    """A user's ``~/.inputrc`` with vi mode made an agent's Esc, then ``echo hi``, run ``o hi`` (the text taken
    for vi commands), and ``show-mode-in-prompt`` changed the fixed prompt; sessions read ours (the system's
    ``/etc/inputrc`` and nothing of the user's), in the shell and in the python REPL alike."""
    (tmp_path / ".inputrc").write_text("set editing-mode vi\nset show-mode-in-prompt on\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("INPUTRC", raising=False)
    r = _session_send(manager, agent, "shell", "bind -v | grep -E 'editing-mode|show-mode-in-prompt'")
    assert "set editing-mode emacs" in r.viewport and "set show-mode-in-prompt off" in r.viewport, r.viewport
    assert r.viewport.startswith("$ bind"), r.viewport
    ours = readline_env()["INPUTRC"]
    assert open(ours).read().rstrip().endswith("$include /etc/inputrc")
    r = _session_send(manager, agent, "python", "import os; print(os.environ['INPUTRC'])")
    assert f"\n{ours}\n" in r.viewport, r.viewport


def test_an_inputrc_the_kernels_environment_names_is_kept(manager, agent, tmp_path, monkeypatch):
    (tmp_path / "mine.inputrc").write_text("set editing-mode vi\n")
    monkeypatch.setenv("INPUTRC", str(tmp_path / "mine.inputrc"))
    r = _session_send(manager, agent, "shell", "bind -v | grep editing-mode")
    assert "set editing-mode vi" in r.viewport, r.viewport
