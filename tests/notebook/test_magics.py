"""Every magic and option through a real InteractiveShell and real sessions."""
from __future__ import annotations

import re
import sys

import pytest
from IPython.core.error import UsageError

from dsh_terminal_magics import Agent, TerminalError
from dsh_terminal_magics.notebook.magics import TerminalMagics, keep_question_marks, key_list, split_options

MAGIC_NAMES = TerminalMagics.magics


def test_load_prints_nothing_and_unload_closes_everything(capsys):
    from tests.conftest import session_processes
    from tests.conftest import interactive_shell
    shell = interactive_shell()
    shell.run_line_magic("load_ext", "dsh_terminal_magics")
    assert capsys.readouterr() == ("", "")
    shell.run_line_magic("term_open", "")
    shell.run_line_magic("term_send", "sleep 1000 &")
    from dsh_terminal_magics import Agent, TerminalTools
    own_tools, bot = TerminalTools(), Agent("user-made")  # sessions of every owner close, not only the magics'
    own_tools.call("terminal_open", {"type": "python"}, agent=bot)
    assert session_processes()
    shell.run_line_magic("unload_ext", "dsh_terminal_magics")
    assert own_tools.manager.sync.list(bot) == []
    assert not session_processes()
    for name in MAGIC_NAMES["line"]:
        assert name not in shell.magics_manager.magics["line"]
    assert keep_question_marks not in shell.input_transformers_cleanup


def test_help_is_argparse_with_examples(ip):
    for kind, names in MAGIC_NAMES.items():
        for name in names:
            doc = ip.magics_manager.magics[kind][name].__doc__
            assert f"%{name}" in doc and "Examples" in doc, name


def test_text_is_sent_exactly_as_typed(ip, capsys):
    ip.user_ns["x"] = "PYTHON-VALUE"
    ip.run_line_magic("term_open", "")
    capsys.readouterr()
    r = ip.run_cell('%term_send echo "$HOME  {x}"  \'$x\'').result
    out = capsys.readouterr().out
    assert 'echo "$HOME  {x}"  \'$x\'' in out and "PYTHON-VALUE" not in out
    assert f'{__import__("os").environ["HOME"]}  {{x}} $x' in out
    assert (r.wait_reason, r.exit_code, r.session_status) == ("stdin_read", 0, "running")
    assert repr(r) == "[wait: stdin_read | exit: 0 | session: running]"
    r = ip.run_line_magic("term_send", "-- -n hi")
    assert r.exit_code == 127  # bash: -n: command not found


def test_text_ending_in_a_question_mark_is_sent_not_taken_for_help(ip, capsys):
    """IPython reads a line ending in ``word?`` as help on ``word``: the magic's text must still be sent."""
    ip.run_line_magic("term_open", "")
    capsys.readouterr()
    r = ip.run_cell("%term_send echo is it an option?").result
    assert r is not None and r.exit_code == 0 and "is it an option?\n" in capsys.readouterr().out
    ip.run_cell("r = %term_send ls -d /bi?\nfor i in range(1):\n    %term_send echo loop $i?")
    assert "/bin\n" in ip.user_ns["r"].viewport
    assert "loop ?\n" in capsys.readouterr().out  # ($i is the shell's, unset; ? matches no file)
    assert ip.run_cell("%term_send?").result is None  # the magic's own help, as before
    assert "%term_send [-s SESSION]" in capsys.readouterr().out
    ip.run_cell("%%term_send\n%term_send echo body?")  # a cell magic's body is its text, as typed
    out = capsys.readouterr().out
    assert "$ %term_send echo body?\n" in out and "run_line_magic" not in out
    ip.run_cell('s = """\n%term_send echo inside?\n"""')  # a line inside a string stays as it was
    assert ip.user_ns["s"] == "\n%term_send echo inside?\n"


def test_cell_send_and_lines_with_a_python_repl(ip, capsys):
    ip.run_line_magic("term_open", "python --name repl")
    r = ip.run_cell_magic("term_send", "--lines -s repl", "def f(x):\n    return x * 2\n\nprint(f(21))\n")
    out = capsys.readouterr().out
    assert r.wait_reason == "stdin_read" and "42\n>>> " in out
    assert out.count("... ") >= 2  # each line waited for the REPL's continuation prompt
    r = ip.run_cell_magic("term_send", "-s repl", "a = 1\nb = 2\nprint(a + b)\n")
    assert "3\n>>> " in capsys.readouterr().out


def test_a_cell_with_windows_line_ends_is_sent_as_its_lines(ip, capsys):
    """A cell saved with CRLF line ends: each CRLF is one line end (as a terminal pastes it), the last one
    too - a CR left before the Enter was an empty line, which ends a block in a REPL."""
    ip.run_line_magic("term_open", "")
    ip.run_line_magic("term_send", "python3 -q")
    r = ip.run_cell_magic("term_send", "--lines", "for i in range(2):\r\n    print(i * 7)\r\n\r\nprint('x')\r\n")
    out = capsys.readouterr().out
    assert "Error" not in out and "0\n7\n>>> " in out and r.viewport.endswith("x\n>>> "), out
    r = ip.run_cell_magic("term_send", "", "if True:\r\n    print('in')\r\nprint('out')\r\n")
    assert r.viewport.endswith("in\nout\n>>> ") and "Error" not in r.viewport, r.viewport
    ip.run_line_magic("term_send", "exit()")


def test_options_no_submit_timeout_idle(ip, capsys):
    ip.run_line_magic("term_open", "")
    assert ip.run_line_magic("term_send", "--no-submit echo par").wait_reason == "stdin_read"
    r = ip.run_line_magic("term_send", "--no-submit tial")
    r = ip.run_line_magic("term_send", "")
    assert "partial" in r.viewport and r.exit_code == 0
    r = ip.run_line_magic("term_send", "--timeout 0.5 --idle 10 sleep 5")
    assert r.wait_reason == "timeout"
    ip.run_line_magic("term_signal", "INT")
    r = ip.run_line_magic("term_send", "--idle 0.3 sleep 5")
    assert r.wait_reason == "inferred_idle"
    r = ip.run_line_magic("term_send", "--idle 0.3 echo queued")  # typed while sleep runs: the footer says so
    assert r.wait_reason == "inferred_idle" and "[unread: no program has read the last 12 bytes" in r.text, r.text
    ip.run_line_magic("term_signal", "SIGINT")


def test_default_session_and_selection(ip, magics, capsys):
    first = ip.run_line_magic("term_open", "--name one").session_id
    second = ip.run_line_magic("term_open", "--name two").session_id
    ip.run_line_magic("term_send", "-s one export WHO=one")
    ip.run_line_magic("term_send", "export WHO=two")  # default: the newest running = two
    assert "one" in ip.run_line_magic("term_send", f"-s {first} echo $WHO").viewport.splitlines()[1]
    assert "two" in ip.run_line_magic("term_send", "echo $WHO").viewport.splitlines()[1]
    ip.run_line_magic("term_send", "exit")
    assert "one" in ip.run_line_magic("term_send", "echo $WHO").viewport.splitlines()[1]  # falls back
    with pytest.raises(UsageError, match="no terminal session with id or name 'three'"):
        ip.run_line_magic("term_send", "-s three echo")
    ip.run_line_magic("term_close", f"-s {second}")
    ip.run_line_magic("term_close", "--all")
    with pytest.raises(UsageError, match="no open terminal session"):
        ip.run_line_magic("term_send", "echo")


def test_read_signal_list_and_html_escaping(ip, capsys):
    ip.run_line_magic("term_open", "--name main")
    ip.run_line_magic("term_send", "echo '<b>bold & \"q\"</b>'")
    page = ip.run_line_magic("term_read", "--count 3")
    assert page.text.startswith("[lines: ") and "<b>bold" in page.text
    html = page._repr_html_()
    assert "&lt;b&gt;bold &amp; &quot;q&quot;&lt;/b&gt;" in html and "<b>" not in html
    listing = ip.run_line_magic("term_list", "")
    assert "name=main" in listing.text and "status=running" in listing.text
    ip.run_line_magic("term_send", "--timeout 0.3 --idle 5 sleep 30")
    sig = ip.run_line_magic("term_signal", "int")
    assert re.fullmatch(r"delivered SIGINT to process group \d+", sig.text)
    with pytest.raises(UsageError, match="invalid signal 'FOO'"):
        ip.run_line_magic("term_signal", "FOO")


def test_background_jobs(ip, capsys):
    from tests.conftest import command_started, wait_for
    shell_pid = ip.run_line_magic("term_open", "").pid
    started = ip.run_line_magic("term_send", "--bg for i in 1 2 3; do echo step-$i; sleep 0.2; done")
    assert started.text.startswith("started job j-")
    with pytest.raises(UsageError, match="busy"):
        ip.run_line_magic("term_send", "echo no")
    capsys.readouterr()
    seen = ""
    for _ in range(200):
        res = ip.run_line_magic("job_output", "")
        seen += capsys.readouterr().out
        if res.status == "completed":
            break
        __import__("time").sleep(0.05)
    assert res.status == "completed"
    assert re.findall(r"^step-\d$", seen, re.M) == ["step-1", "step-2", "step-3"]
    ip.run_line_magic("jobs", "")
    assert "completed pty-send" in capsys.readouterr().out
    ip.run_line_magic("term_send", "--bg sleep 100")
    wait_for(lambda: command_started(shell_pid, "sleep"))
    killed = ip.run_line_magic("job_kill", "")
    assert killed.status == "killed"
    assert ip.run_line_magic("term_send", "echo ok").exit_code == 0


def test_the_next_cell_shows_what_came_after_the_last_one_ended_once(ip, magics, capsys):
    """Output that arrived while no cell was sending (a send that timed out, and its program went on) leads the
    next cell's output, once."""
    from tests.conftest import wait_for
    sid = ip.run_line_magic("term_open", "").session_id
    assert ip.run_line_magic("term_send", "--timeout 0.3 --idle 10 sleep 0.5; echo late-$((6*7))").wait_reason \
        == "timeout"
    wait_for(lambda: "late-42" in magics.tools.call("terminal_read", {"sessionId": sid}, agent=magics.owner).text)
    capsys.readouterr()
    ip.run_line_magic("term_send", "echo next")
    out = capsys.readouterr().out
    assert out.count("late-42") == 1 and out.index("late-42") < out.index("echo next")
    ip.run_line_magic("term_send", "echo again")
    assert "late-42" not in capsys.readouterr().out


def test_what_a_job_or_a_tool_call_returned_is_not_shown_again_by_the_next_cell(ip, magics, capsys):
    """A background job's output (read with %job_output, or watched in its viewport) and a tool call's result
    were shown where they were asked for: the next cell's output starts at its own command.  Both came again
    at the top of the next %term_send's output."""
    sid = ip.run_line_magic("term_open", "").session_id
    ip.run_line_magic("term_send", "echo first")
    ip.run_line_magic("term_send", "--bg sleep 0.3; echo job-$((6*7))")
    for _ in range(200):
        if ip.run_line_magic("job_output", "--wait").status != "running":
            break
    assert "job-42" in capsys.readouterr().out
    ip.run_line_magic("term_send", "echo next")
    out = capsys.readouterr().out
    assert "job-42" not in out and "echo next" in out
    tool = magics.tools.call("terminal_send", {"sessionId": sid, "text": "echo tool-$((6*7))"}, agent=magics.owner)
    assert "tool-42" in tool.viewport
    ip.run_line_magic("term_send", "echo last")
    out = capsys.readouterr().out
    assert "tool-42" not in out and "echo last" in out


def test_agent_option_uses_the_object(ip):
    ip.user_ns["bot"] = Agent("bot")
    ip.user_ns["not_an_agent"] = "bot"
    sid = ip.run_line_magic("term_open", "--agent bot").session_id
    assert ip.run_line_magic("term_list", "").text == "[sessions: 0]"
    assert sid in ip.run_line_magic("term_list", "--agent bot").text
    with pytest.raises(UsageError, match="holding an Agent object"):
        ip.run_line_magic("term_list", "--agent not_an_agent")
    with pytest.raises(UsageError, match="no terminal session"):
        ip.run_line_magic("term_send", f"-s {sid} echo")
    ip.run_line_magic("term_close", "--all --agent bot")


def test_config_is_validated_and_applied(ip, magics):
    ip.run_line_magic("config", "TerminalMagics.max_result_bytes = 4096")
    assert magics.tools.max_result_bytes == 4096
    ip.run_line_magic("config", "TerminalMagics.max_result_bytes = 12")
    assert magics.max_result_bytes == 4096 and magics.tools.max_result_bytes == 4096
    ip.run_line_magic("config", "TerminalMagics.timeout = -1")
    assert magics.timeout == 30.0
    ip.run_line_magic("config", "TerminalMagics.idle = 0.25")
    ip.run_line_magic("term_open", "")
    assert ip.run_line_magic("term_send", "sleep 5").wait_reason == "inferred_idle"
    ip.run_line_magic("term_signal", "INT")


def test_errors_are_one_line_usage_errors(ip, capsys):
    result = ip.run_cell("%term_send echo nothing open")
    assert isinstance(result.error_in_exec, UsageError)
    err = capsys.readouterr().err
    assert "UsageError: no open terminal session" in err and "Traceback" not in err
    for line in ["--bogus x", "--timeout", "-s"]:
        with pytest.raises(UsageError):
            ip.run_line_magic("term_send", line)
    with pytest.raises(UsageError, match="unknown terminal type"):
        ip.run_line_magic("term_open", "zsh")
    with pytest.raises(UsageError, match="no background job"):
        ip.run_line_magic("job_output", "")


def test_help_option_prints_the_magics_help_and_runs_nothing(ip, magics, capsys):
    """``%term_open --help`` shows what ``%term_open?`` shows (argparse's -h is off in IPython's magics, so it
    said only 'unrecognized arguments'); before text to send, only options ask for it."""
    for name, line in [("term_open", "--help"), ("term_open", "python -h"), ("term_list", "--help"),
                       ("jobs", "-h"), ("term_send", "--help"), ("term_send", "-s nowhere --timeout=3 -h"),
                       ("term_signal", "--help")]:
        assert ip.run_line_magic(name, line) is None
        out = capsys.readouterr().out
        assert f"%{name} [" in out and "Examples" in out, (name, line, out[:200])
    assert ip.run_line_magic("term_list", "").model.root == []  # (nothing was opened)
    ip.run_line_magic("term_open", "")
    capsys.readouterr()
    assert ip.run_line_magic("term_send", "echo --help").exit_code == 0
    assert ip.run_line_magic("term_send", "-- -h").exit_code == 127  # bash: -h: command not found
    assert "--help\n" in capsys.readouterr().out
    for name, line in [("term_list", "--nope"), ("term_signal", ""), ("term_resize", "10")]:
        with pytest.raises(UsageError, match=f"^%{name}: .*; see %{name} --help for its options$"):
            ip.run_line_magic(name, line)


def test_view_falls_back_to_text_outside_a_kernel(ip, capsys):
    ip.run_line_magic("term_open", "")
    ip.run_line_magic("term_send", "printf '\\e[31mred\\e[0m\\n'")
    capsys.readouterr()
    ip.run_line_magic("term_view", "")
    out = capsys.readouterr().out
    assert "red" in out and "\x1b" not in out


def test_split_options_keeps_the_rest_verbatim(magics):
    parser = magics.term_send.parser
    assert split_options('-s a --bg  echo  "x  y" ', parser) == (["-s", "a", "--bg"], 'echo  "x  y" ')
    assert split_options("-- --bg", parser) == ([], "--bg")
    assert split_options("--timeout=3 ls", parser) == (["--timeout", "3"], "ls")
    with pytest.raises(UsageError, match="unknown option --nope"):
        split_options("--nope", parser)


def test_a_comma_key_is_written_as_itself(ip, capsys):
    """``--keys`` is comma-separated, so a comma key (vim's leader) could not be named at all: its empty items
    were dropped.  Now a comma stands for itself, after modifiers too."""
    assert key_list("Esc,,,w") == ("Esc", ",", "w")
    assert key_list("M-,,C-c,S-Tab,") == ("M-,", "C-c", "S-Tab")
    ip.run_line_magic("term_open", "")
    capsys.readouterr()
    r = ip.run_line_magic("term_send", "--keys e,c,h,o,Space,x,,,y,Enter")
    assert r.exit_code == 0 and "\nx,y\n" in capsys.readouterr().out


def test_quoted_option_values_lose_their_quotes_as_in_a_shell(ip, magics, capsys):
    """IPython's splitting kept quotes: ``%term_open --name "build server"`` named a session ``"build server"``,
    quotes included, ``--name="a b"`` was cut inside them, and ``%term_send -s "build server"`` cut the value at
    its space.  Now values are shell words everywhere; the text sent stays exactly as typed."""
    parser = magics.term_send.parser
    assert split_options('-s "build server" echo  "x  y"', parser) == (["-s", "build server"], 'echo  "x  y"')
    assert split_options("--session='a b' ls", parser) == (["--session", "a b"], "ls")
    assert split_options('"quoted" text', parser) == ([], '"quoted" text')
    assert ip.run_line_magic("term_open", '--name "build server"').name == "build server"
    assert ip.run_line_magic("term_open", "--name='eq form'").name == "eq form"
    capsys.readouterr()
    r = ip.run_line_magic("term_send", '-s "build server" echo "a  b"')
    assert r.exit_code == 0 and "a  b\n" in capsys.readouterr().out
    assert ip.run_line_magic("term_send", "--session='eq form' --timeout=5 true").exit_code == 0
    assert ip.run_line_magic("term_send", '-s "build server" --help') is None  # (help, not a send)
    for magic, line in [("term_open", '--name "open'), ("term_send", '-s "open echo x')]:
        with pytest.raises(UsageError, match="quote"):
            ip.run_line_magic(magic, line)


def test_interrupt_stops_the_program_and_returns(ip, magics, capsys):
    import threading, signal, os, time
    ip.run_line_magic("term_open", "")
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    r = ip.run_line_magic("term_send", "sleep 30")
    assert time.monotonic() - started < 10
    assert r.wait_reason == "stdin_read" and "interrupted" in repr(r)
    assert r.exit_code == 130


def test_remaining_options(ip, capsys, tmp_path):
    ip.user_ns["helper"] = Agent("helper")
    sid = ip.run_line_magic("term_open", f"--cwd {tmp_path} --name here").session_id
    assert str(tmp_path) in ip.run_line_magic("term_send", "pwd").viewport
    ip.run_line_magic("term_send", "for i in 1 2 3 4 5; do echo n$i; done")
    page = ip.run_line_magic("term_read", "--offset 2 --count 2")
    assert page.text.splitlines()[1:] == ["n3", "n4"]
    job = ip.run_line_magic("term_send", f"-s {sid} --bg echo explicit-job").job_id
    res = ip.run_line_magic("job_output", f"--wait {job}")
    assert res.status == "completed" and "explicit-job" in capsys.readouterr().out
    ip.run_line_magic("jobs", "--agent helper")
    assert capsys.readouterr().out.strip() == "no jobs"
    assert ip.run_line_magic("job_kill", job).status == "completed"


def test_a_deny_policy_refuses_a_foreground_magic_send_exactly_like_a_tool_call(ip, magics):
    from dsh_terminal_magics.notebook.cards import show_cards
    from dsh_terminal_magics.tools.policies import deny_commands

    cards = show_cards(magics.tools, display=False)
    magics.tools.add_policy(deny_commands([r"forbidden"]))
    try:
        sid = ip.run_line_magic("term_open", "").session_id
        with pytest.raises(UsageError) as magic_error:
            ip.run_line_magic("term_send", "echo forbidden")
        with pytest.raises(TerminalError) as tool_error:
            magics.tools.call("terminal_send", {"sessionId": sid, "text": "echo forbidden"}, agent=magics.owner)
        assert str(magic_error.value) == str(tool_error.value) and "denied by policy 'deny-list'" in str(
            tool_error.value)
        assert sum("dsh-card-denied" in card for card in cards.cards) == 2  # the magic's call got its card
        r = ip.run_line_magic("term_send", "echo allowed-$((6*7))")
        assert "allowed-42" in r.viewport
        assert "forbidden" not in ip.run_line_magic("term_read", "").text  # nothing was typed
    finally:
        cards.close()
        magics.tools.policies.clear()


def test_the_notebooks_own_environment_is_configurable(ip, magics, monkeypatch):
    monkeypatch.setenv("NOTEBOOK_SECRET_TOKEN", "s3cret")
    ip.run_line_magic("term_open", "")
    assert "[s3cret]" in ip.run_line_magic("term_send", "echo [$NOTEBOOK_SECRET_TOKEN]").viewport  # inherits all
    ip.run_line_magic("config", 'TerminalMagics.shell_environment_policy = {"inherit": "core", "set": {"X": "1"}}')
    ip.run_line_magic("term_open", "")
    r = ip.run_line_magic("term_send", "echo [$NOTEBOOK_SECRET_TOKEN] [$X]")
    assert "[] [1]" in r.viewport
    ip.run_line_magic("config", 'TerminalMagics.shell_environment_policy = {"inherit": "sometimes"}')
    assert magics.shell_environment_policy == {"inherit": "core", "set": {"X": "1"}}  # refused, old value stays
