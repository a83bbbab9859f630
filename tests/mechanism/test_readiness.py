"""The wait-reason matrix with real bash and python3: what comes back, and when."""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from dsh_terminal_magics.mechanism import SendRequest
from dsh_terminal_magics.mechanism.readiness import OUTSIDE_GAP, Fence, _pauses, _timed_call
from tests.conftest import end_kernel, pty_fds, start_send, wait_for


def send(manager, agent, sid, text, **kw):
    return manager.sync.send(agent, sid, SendRequest(text, **kw))


@pytest.fixture
def shell(manager, agent):
    info = manager.sync.open(agent, "shell")
    yield info.session_id
    manager.sync.close(agent, info.session_id)


def test_echo_returns_at_the_prompt_with_exit_code_zero(manager, agent, shell):
    r = send(manager, agent, shell, "echo hi")
    assert r.wait_reason == "stdin_read"
    assert r.viewport.splitlines()[1:] == ["hi", "$ "]
    assert r.exit_code == 0
    assert r.session_status == "running"


def test_false_reports_exit_code_one(manager, agent, shell):
    r = send(manager, agent, shell, "false")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", 1)


@pytest.mark.parametrize("forged", [r"\e]133;D;0\a", r"\e]133;D;7;12345\a", r"\e]133;D\e\\"])
def test_a_program_printing_an_exit_marker_cannot_forge_the_exit_code(manager, agent, shell, forged):
    """Exit codes come from our shell's own markers only: a program that prints one (without the session's
    key, which it cannot know) and then keeps running reports no exit code, and a command that prints one
    and fails still reports its failure."""
    r = send(manager, agent, shell, f"printf '{forged}'; read x")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", None), r
    r = send(manager, agent, shell, "answer")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", 0), r
    r = send(manager, agent, shell, f"printf '{forged}'; false")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", 1), r
    r = send(manager, agent, shell, f"(exit 3); printf '{forged}'; sleep 60", timeout=0.5)
    assert (r.wait_reason, r.exit_code) == ("timeout", None), r
    assert r.viewport.splitlines()[1:] == []  # (the printed marker is still kept out of the text)
    manager.sync.signal(agent, shell, "SIGINT")


def test_exit_codes_survive_a_command_that_sets_prompt_command(manager, agent, shell):
    """A command that sets PROMPT_COMMAND (``history -a``; a tool's hook put in front, which returns a status of
    its own) ended our shell's exit-code markers, and every later exit code was None.  Every command gets its own
    status - the one that sets it too - and hooks after ours still see it.  Even with PROMPT_COMMAND unset the
    codes are right; a command that then sets PS1 ends the markers: no code, never a wrong one."""
    r = send(manager, agent, shell, "PROMPT_COMMAND='history -a'; (exit 2)")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", 2), r
    r = send(manager, agent, shell, "(exit 3)")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", 3), r
    send(manager, agent, shell, 'hook(){ return 7; }; PROMPT_COMMAND="hook${PROMPT_COMMAND:+;$PROMPT_COMMAND}"')
    for command, code in (("(exit 4)", 4), ("true", 0), ("false", 1)):
        r = send(manager, agent, shell, command)
        assert (r.wait_reason, r.exit_code) == ("stdin_read", code), r
    r = send(manager, agent, shell, "PROMPT_COMMAND+=(after); after(){ echo after:$?; }; (exit 5)")
    r = send(manager, agent, shell, "(exit 6)")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", 6), r
    assert r.viewport.splitlines()[1:] == ["after:6", "$ "]
    r = send(manager, agent, shell, "unset PROMPT_COMMAND; (exit 8)")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", 8), r
    r = send(manager, agent, shell, "PS1='mine> '; (exit 9)")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", None), r
    assert r.viewport.endswith("mine> "), r


def test_a_prefix_put_in_front_of_the_prompt_is_kept_and_never_left_exported(manager, agent, shell, tmp_path):
    """A virtualenv's ``activate`` puts "(venv) " in front of PS1 and exports it: PROMPT_COMMAND set our prompt
    back at once (the prompt never said which environment commands ran in), and every program started later found
    PS1 - with the marker's key - in its environment, free to forge markers.  The prefix is kept, exit codes are
    still reported, PS1 is exported no longer than the command line that exported it, and ``deactivate`` gives
    the plain prompt back."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    r = send(manager, agent, shell, f". {venv}/bin/activate")
    assert r.viewport.endswith("\n(venv) $ ") and r.exit_code == 0, r
    r = send(manager, agent, shell, "env | grep -c '^PS1='; false")
    assert r.viewport.splitlines()[1:] == ["0", "(venv) $ "] and r.exit_code == 1, r
    r = send(manager, agent, shell, "deactivate")
    assert r.viewport.endswith("\n$ ") and r.exit_code == 0, r
    r = send(manager, agent, shell, "env | grep -c '^PS1='; (exit 3)")
    assert r.viewport.splitlines()[1:] == ["0", "$ "] and r.exit_code == 3, r


@pytest.mark.parametrize("how", ["ctrl-z", "sigstop"])
def test_a_command_that_stops_is_seen_at_the_next_look(manager, agent, shell, monkeypatch, how):
    """A foreground command that stops (Ctrl-Z while it computes, or SIGSTOP) hands the terminal back to the
    shell.  A stopped thread counted as still running, so every look was skipped until the once-a-second
    full check; with that check pushed out of reach, such a send never came back."""
    from dsh_terminal_magics.mechanism import send as send_module
    monkeypatch.setattr(send_module, "FULL_CHECK_EVERY", 3600.0)
    if how == "ctrl-z":
        r = send(manager, agent, shell, f"{sys.executable} -c 'while 1: pass'", timeout=0.5)
        assert r.wait_reason == "timeout", r  # (computing in the foreground)
        r = send(manager, agent, shell, "", submit=False, keys=("C-z",), idle=30, timeout=30)
    else:
        stops = "import os, signal, time\nt = time.time()\nwhile time.time() - t < 0.3: pass\n" \
                "os.kill(os.getpid(), signal.SIGSTOP)"  # (computes, so a look finds it running, then stops)
        r = send(manager, agent, shell, f"{sys.executable} -c '{stops}'", idle=30, timeout=30)
    assert r.wait_reason == "stdin_read" and "Stopped" in r.viewport and r.viewport.endswith("$ "), r
    assert "gone" in send(manager, agent, shell, "kill -9 %1; wait; echo gone").viewport


def test_python_repl_backend(manager, agent):
    info = manager.sync.open(agent, "python")
    try:
        r = send(manager, agent, info.session_id, "print(2+2)")
        assert r.wait_reason == "stdin_read"
        assert r.viewport.splitlines()[-2:] == ["4", ">>> "]
    finally:
        manager.sync.close(agent, info.session_id)


def test_bash_read_builtin_waits_then_takes_the_answer(manager, agent, shell):
    r = send(manager, agent, shell, "read x")
    assert r.wait_reason == "stdin_read"
    assert r.exit_code is None  # no prompt came back: the command is still running
    r = send(manager, agent, shell, "forty two")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", 0)
    r = send(manager, agent, shell, 'echo "[$x]"')
    assert "[forty two]" in r.viewport


def test_cat_echoes_each_line(manager, agent, shell):
    assert send(manager, agent, shell, "cat").wait_reason == "stdin_read"
    r = send(manager, agent, shell, "hello cat")
    assert r.wait_reason == "stdin_read"
    assert r.viewport.count("hello cat") == 2  # the tty's echo and cat's copy
    manager.sync.signal(agent, shell, "SIGINT")


def test_pipeline_reader_waits_for_whole_pipeline(manager, agent, shell):
    send(manager, agent, shell, "cat | tr a-z A-Z")
    for i in range(20):
        r = send(manager, agent, shell, f"line {i}")
        assert r.wait_reason == "stdin_read"
        assert f"LINE {i}" in r.viewport, r.viewport
    manager.sync.signal(agent, shell, "SIGINT")


#: A relay over a socket: python reads the terminal and a socket in one select, and a child shell runs what
#: comes through (a local stand-in for the kind of relay ssh is).
SOCKET_RELAY = (
    f"{sys.executable} -c \"import os, select, socket\n"
    "ours, its = socket.socketpair()\n"
    "if os.fork() == 0:\n"
    "    os.dup2(its.fileno(), 0); os.dup2(its.fileno(), 1); os.execvp('sh', ['sh'])\n"
    "while True:\n"
    "    for fd in select.select([0, ours], [], [])[0]:\n"
    "        data = os.read(0, 1024) if fd == 0 else ours.recv(1024)\n"
    "        ours.send(data) if fd == 0 else os.write(1, data)\"")


@pytest.mark.parametrize("starts", [["cat | sh"], [SOCKET_RELAY], ["script -q /dev/null", "cat | sh"]],
                         ids=["pipe", "socket", "pipe-behind-a-relay"])
def test_a_reader_that_passes_input_on_waits_for_the_command_it_fed(manager, agent, shell, starts):
    """The group's reader of the terminal reads it again at once, having passed the line on; the command it
    fed runs still (its shell waits for ``sleep``).  The send came back at once with only the echo, and the
    output came later; behind ``script`` too.  A command reading what is passed on waits for us, and a
    background job does not count: its input is ``/dev/null``."""
    for command in starts:
        send(manager, agent, shell, command)
    r = send(manager, agent, shell, "sleep 0.5; echo done-$((6*7))", timeout=30)
    assert r.wait_reason == "stdin_read" and "done-42" in r.viewport, r
    r = send(manager, agent, shell, "read x; echo got-$x", timeout=30)
    assert r.wait_reason == "stdin_read" and r.viewport.splitlines()[1:] == [], r
    r = send(manager, agent, shell, "it", timeout=30)
    assert r.wait_reason == "stdin_read" and "got-it" in r.viewport, r
    r = send(manager, agent, shell, "sleep 100 & sleep 0.5; echo second-$((6*7))", timeout=30)
    assert r.wait_reason == "stdin_read" and "second-42" in r.viewport, r
    r = send(manager, agent, shell, f"{sys.executable} -c 'input()'; echo read-$((6*7))", timeout=30)
    assert r.wait_reason == "stdin_read" and "read-42" not in r.viewport, r  # (the job sleeps on: not ours)
    r = send(manager, agent, shell, "", timeout=30)
    assert r.wait_reason == "stdin_read" and "read-42" in r.viewport, r


#: A shell served outside the session, over TCP or a Unix socket: it prints its address, then runs ``sh`` on
#: the connection (taken ``argv[3]`` seconds after it came).
SHELL_SERVER = (
    "import select, socket, subprocess, sys, time\n"
    "if sys.argv[1] == 'tcp':\n"
    "    server = socket.create_server(('127.0.0.1', 0)); print(repr(server.getsockname()), flush=True)\n"
    "else:\n"
    "    server = socket.socket(socket.AF_UNIX); server.bind(sys.argv[2]); server.listen()\n"
    "    print(repr(sys.argv[2]), flush=True)\n"
    "select.select([server], [], []); time.sleep(float(sys.argv[3])); connection = server.accept()[0]\n"
    "subprocess.run(['sh'], stdin=connection, stdout=connection, stderr=connection)\n")


@pytest.fixture(params=["tcp", "unix", "unix-taken-late"])
def shell_server(request, tmp_path):
    """A shell served outside the session: (family, address).  ``unix-taken-late``: it takes the connection a
    second late (a connection looked at before was remembered as one to nobody: the relay's wait, a prompt)."""
    import subprocess

    family, _, late = request.param.partition("-")
    server = subprocess.Popen([sys.executable, "-c", SHELL_SERVER, family, str(tmp_path / "shell.sock"),
                               "1" if late else "0"], stdout=subprocess.PIPE, text=True)
    yield family, server.stdout.readline().strip()
    server.kill()
    server.wait()
    server.stdout.close()


def test_a_relay_to_another_host_is_not_a_prompt(manager, agent, shell, shell_server):
    """A program that copies the terminal to a connection (as ssh does over TCP, and ``docker exec`` or ssh's
    shared connection over a Unix socket) waits on our tty again as soon as it has sent a line on; what runs
    at the other end is not seen.  Its wait is no prompt: the send ends on the idle window, with the output.
    It came back at once as ``stdin_read``, with only the echo."""
    relay_waits_out_the_idle_window(manager, agent, shell, *shell_server)


@pytest.mark.parametrize("shell_server", ["tcp"], indirect=True)
def test_a_relay_past_the_part_of_the_socket_table_read_is_not_a_prompt(manager, agent, shell, shell_server,
                                                                         monkeypatch):
    """The TCP and UDP tables are read up to :data:`~readiness.MAX_SOCKET_TABLE` bytes each; on a host with
    thousands of sockets a relay's connection past that was taken for no connection at all, for good - its
    wait, a prompt.  A socket not found in a table read only in part is most likely one of them."""
    from dsh_terminal_magics.mechanism import readiness
    monkeypatch.setattr(readiness, "MAX_SOCKET_TABLE", 160)  # (the header line and a bit)
    relay_waits_out_the_idle_window(manager, agent, shell, *shell_server)


def relay_waits_out_the_idle_window(manager, agent, shell, family: str, address: str) -> None:
    connect = f"socket.create_connection({address})" if family == "tcp" else \
        f"socket.socket(socket.AF_UNIX); far.connect({address})"
    relay = (f"{sys.executable} -c \"import os, select, socket\n"
             f"far = {connect}\n"
             "while True:\n"
             "    for fd in select.select([0, far], [], [])[0]:\n"
             "        data = os.read(0, 1024) if fd == 0 else far.recv(1024)\n"
             "        far.sendall(data) if fd == 0 else os.write(1, data)\"")
    send(manager, agent, shell, relay, idle=1.0, timeout=30)
    r = send(manager, agent, shell, "sleep 0.5; echo far-$((6*7))", idle=1.0, timeout=30)
    assert r.wait_reason == "inferred_idle" and "far-42" in r.viewport, r
    manager.sync.signal(agent, shell, "SIGINT")
    r = send(manager, agent, shell, "echo back-$((6*7))", timeout=30)
    assert r.wait_reason == "stdin_read" and "back-42" in r.viewport, r


#: A program that talks to a helper of its own group over TCP, as ``node inspect`` does to the program it
#: debugs, waiting on our tty and on the connection at once; the helper takes the connection ``{late}`` seconds
#: late (as node's inspector can, on a busy host), listening on ``{server}``.
HELPER_OVER_TCP = (
    f"{sys.executable} -c \"import os, select, socket, time\n"
    "server = socket.create_server({server})\n"
    "if os.fork() == 0:\n"
    "    time.sleep({late}); connection = server.accept()[0]\n"
    "    while data := connection.recv(1024): connection.sendall(b'seen-' + data)\n"
    "    os._exit(0)\n"
    "helper = socket.create_connection(('127.0.0.1', server.getsockname()[1])); os.write(1, b'ask> ')\n"
    "while True:\n"
    "    for fd in select.select([0, helper], [], [])[0]:\n"
    "        if fd == 0: helper.sendall(os.read(0, 1024))\n"
    "        else: os.write(1, helper.recv(1024) + b'ask> ')\"")


@pytest.mark.parametrize("server,late", [("('127.0.0.1', 0)", 1), ("('::', 0), family=socket.AF_INET6, "
                                                                 "dualstack_ipv6=True", 0)],
                         ids=["taken-late", "ipv4-to-a-dual-stack-listener"])
def test_a_connection_to_a_member_is_not_taken_for_one_to_another_host(manager, agent, shell, server, late):
    """A connection whose other end waits in its listener's queue, not yet taken by the member that will take
    it, shows no file at that end: it was taken for a connection to another host (``ssh``), for good, and every
    later send to ``node inspect`` - whose inspector had taken the connection late - ended on the idle
    window.  (About one run in fifty of the ``node inspect`` test on a busy host; here every time.)  Until it
    is taken the wait is no prompt; then it is.  A connection from ``127.0.0.1`` to a dual-stack listener (node's
    and Python's servers listen so) has its other end in the IPv6 table, as ``::ffff:127.0.0.1``: it was not
    found, and taken for one to another host too (node's REPL after a ``fetch`` of its own server)."""
    r = send(manager, agent, shell, HELPER_OVER_TCP.format(server=server, late=late), idle=10.0, timeout=30)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("ask> "), r
    for _ in range(5):
        r = send(manager, agent, shell, "hello", idle=10.0, timeout=30)
        assert r.wait_reason == "stdin_read" and r.viewport.endswith("seen-hello\nask> "), r
    manager.sync.signal(agent, shell, "SIGINT")
    r = send(manager, agent, shell, "echo back-$((6*7))", timeout=30)
    assert r.wait_reason == "stdin_read" and "back-42" in r.viewport, r


def test_python_input_prompt(manager, agent, shell):
    r = send(manager, agent, shell, f"{sys.executable} -c 'print(\"hi \" + input(\"name? \"))'")
    assert r.wait_reason == "stdin_read"
    assert r.viewport.endswith("name? ")
    r = send(manager, agent, shell, "Ada")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", 0)
    assert "hi Ada" in r.viewport


def test_the_prompt_is_seen_through_a_background_jobs_flood(manager, agent, shell, monkeypatch):
    """While output is left to read the program is looked at less often (a flood's batches), but still looked
    at: a background job printing flat out does not hide the shell's prompt until the send's idle window.
    (One read a turn: every batch leaves output to read, as when the loop falls behind a flood.)"""
    from dsh_terminal_magics.mechanism import pty_child
    monkeypatch.setattr(pty_child, "MAX_READS", 1)
    send(manager, agent, shell, "yes flooding | head -c 200000000 &")
    try:
        for _ in range(3):
            r = send(manager, agent, shell, "echo marker-$((40+2))", timeout=20, idle=20)
            assert r.wait_reason == "stdin_read", r.wait_reason
    finally:
        send(manager, agent, shell, "kill %1; wait", timeout=20)


def test_sleep_is_never_mistaken_for_a_prompt(manager, agent, shell):
    r = send(manager, agent, shell, "sleep 2")
    assert r.wait_reason == "stdin_read"
    assert r.elapsed >= 1.9
    assert r.exit_code == 0


def test_the_exit_code_of_a_command_before_the_one_running_is_not_reported(manager, agent, shell):
    """A command typed while the last one still ran starts after that one's exit code arrives: the send then
    ends with the new command running, and the code is not the running command's (it was 3)."""
    r = send(manager, agent, shell, "sleep 2; (exit 3)", idle=0.2)
    assert (r.wait_reason, r.exit_code) == ("inferred_idle", None), r
    r = send(manager, agent, shell, "sleep 30", timeout=6, idle=10)
    assert (r.wait_reason, r.exit_code) == ("timeout", None), r
    manager.sync.signal(agent, shell, "SIGINT")
    r = send(manager, agent, shell, "(exit 4)")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", 4), r


def test_input_in_transit_to_the_terminal_counts_as_unread(manager, agent, shell):
    """A write to a PTY master only queues the bytes; a kernel worker hands them to the terminal later, and
    until then TIOCINQ counted none of them (nearly every time, right after a write) and a reader was not
    woken.  A shell that reached its prompt in that gap - after a terminal_signal, while the next command
    was written - looked like a fresh wait with all input read: that send ended at once with the
    interrupted command's exit code (130).  Counted now, a line written is there at once."""
    send(manager, agent, shell, "sleep 30", timeout=0.5, idle=10)  # (canonical mode, and nobody reads)

    def write_and_count() -> list[int]:
        session = manager.session(agent, shell)
        counts = []
        for _ in range(20):
            session.write_now(b"#\n")
            counts.append(session.probe.unread_input())
            os.read(session.probe.slave_fd, 100)  # (as a reader would: the next line is the only one)
        return counts

    assert manager.loop_thread.call(write_and_count) == [2] * 20
    manager.sync.signal(agent, shell, "SIGINT")
    assert send(manager, agent, shell, "(exit 4)").exit_code == 4


def test_looks_back_to_back_let_the_program_have_the_cpu(manager, agent, shell, monkeypatch):
    """After a process exits, the send looks back to back for a few milliseconds (the shell's next step blocks
    soon).  On the program's own CPU those looks kept it from running: a few hundred looks at a shell not yet
    run, for a whole time slice, before its `read` was seen (4 ms, where 1 ms was usual).  Here the loop and the
    shell share one CPU; each look now first lets the program run, and a few looks see it reading."""
    from dsh_terminal_magics.mechanism import send as send_module

    session = manager.loop_thread.call(manager.session, agent, shell)
    loop_thread = manager.loop_thread.thread.native_id
    cpu = min(os.sched_getaffinity(0))
    allowed = os.sched_getaffinity(loop_thread)
    looks = [0]
    real_step = send_module.SendOperation._step

    def counting_step(self, *args):
        looks[0] += 1
        return real_step(self, *args)

    monkeypatch.setattr(send_module.SendOperation, "_step", counting_step)
    os.sched_setaffinity(session.pid, {cpu})  # (what the shell starts inherits it)
    os.sched_setaffinity(loop_thread, {cpu})
    per_round = []
    try:
        for _ in range(30):
            looks[0] = 0
            r = send(manager, agent, shell, "sleep 0; x=$((6*7)); read y")
            assert r.wait_reason == "stdin_read", r
            send(manager, agent, shell, "", keys=["C-d"], submit=False)
            per_round.append(looks[0])
    finally:
        os.sched_setaffinity(loop_thread, allowed)
    # (A send and its C-d: 2-45 looks here; when the looks kept the CPU, 0-5 rounds in 20 took 200-1000.  One
    # such round may be the host holding the shell back - 1049 looks in 10 rounds, once, in a CI run.)
    assert sum(1 for n in per_round if n > 150) <= 1, per_round


def test_cpu_loop_times_out(manager, agent, shell):
    r = send(manager, agent, shell, "while :; do :; done", timeout=1.0)
    assert r.wait_reason == "timeout"
    assert r.session_status == "running"
    manager.sync.signal(agent, shell, "SIGINT")
    r = send(manager, agent, shell, "echo back")
    assert r.wait_reason == "stdin_read" and "back" in r.viewport


def test_reader_blocked_on_a_pipe_is_not_waiting_on_the_terminal(manager, agent, shell):
    r = send(manager, agent, shell, "sleep 100 | cat", timeout=1.5)
    assert r.wait_reason == "timeout"
    manager.sync.signal(agent, shell, "SIGINT")


def test_quiet_command_is_inferred_idle(manager, agent, shell):
    r = send(manager, agent, shell, "sleep 30", idle=0.3, timeout=10)
    assert r.wait_reason == "inferred_idle"
    manager.sync.signal(agent, shell, "SIGINT")


@pytest.mark.parametrize("pause", ["sleep 1.5", f"{sys.executable} -c 'import select; select.select([], [], [], 1.5)'"])
def test_a_program_that_pauses_past_the_idle_window_is_waited_for(manager, agent, shell, pause):
    """A program sleeping (or in a select on no fds: PAM's delay after a wrong password, under su or
    passwd) waits for nothing but time.  When its pause ends within one more idle window, what it does then
    is the answer: a wrong password's 'Authentication failure' came after the 3 s window, as 'inferred_idle'
    with the password prompt still showing."""
    r = send(manager, agent, shell, f"{pause}; echo woke-$((6*7))", idle=1.0, timeout=20)
    assert (r.wait_reason, r.exit_code) == ("stdin_read", 0) and "\nwoke-42\n" in r.viewport, r


#: A prompter in a session of its own, as ``su -c`` runs its command (util-linux's ``setsid``, against
#: TIOCSTI): it reads the answer from our tty outside the foreground group, then pauses (PAM's delay after a
#: wrong password) and answers.
PROMPTER_OUTSIDE = (f"{sys.executable} -c \"import os, select, sys\nif os.fork() == 0:\n    os.setsid()\n"
                    "    sys.stdout.write('Password: '); sys.stdout.flush(); line = os.read(0, 100)\n"
                    "    select.select([], [], [], 1.6); print('checked', line.strip().decode()); os._exit(1)\n"
                    "os.wait()\"")


def test_a_pause_of_a_prompter_outside_the_group_is_waited_for(manager, agent, shell):
    """The pause rule looked only at the foreground group's threads: a wrong password to ``su -c`` (whose
    prompter has a session of its own) ended 'inferred_idle' with nothing after the password, whenever PAM's
    delay outlasted the idle window; the failure came with the next send.  A process that read our tty from
    outside the group is watched as the group's own threads are: its pause is waited for, and the check
    comes as it wakes."""
    r = send(manager, agent, shell, PROMPTER_OUTSIDE, timeout=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("Password: "), r
    r = send(manager, agent, shell, "wrong", idle=1.0, timeout=20)
    assert r.wait_reason == "stdin_read" and "\nchecked wrong\n" in r.viewport and r.viewport.endswith("$ "), r


def test_a_reader_that_left_the_group_while_looked_at_is_known_as_outside(manager, agent, shell, tmp_path):
    """A check lists the foreground group's members, then looks at each.  A member that left the group between
    the two (the prompter of ``su -c`` calling ``setsid``, then reading our tty) was looked at as a member: the
    send ended 'stdin_read' rightly, but the reader was not known to be outside the group, so its pause after the
    answer (PAM's delay) was not waited for and the next send ended 'inferred_idle' (2 of about 110 runs beside
    two CPU hogs).  The listing is taken here while the prompter is still in the group, and handed to the check after
    it has left: the check lists the members again and finds the reader outside."""
    go = tmp_path / "go"
    os.mkfifo(go)
    prompter = PROMPTER_OUTSIDE.replace("os.setsid()", f"open({str(go)!r}).read(); os.setsid()")
    assert send(manager, agent, shell, prompter, idle=0.3, timeout=20).wait_reason == "inferred_idle"
    session = manager.loop_thread.call(manager.session, agent, shell)
    probe = session.probe
    pgid = manager.loop_thread.call(probe.foreground_pgid)
    child = wait_for(lambda: open(f"/proc/{pgid}/task/{pgid}/children").read().split())[0]
    listed = manager.loop_thread.call(probe.group_members, pgid)
    assert listed == [pgid, int(child)], listed  # (both in the group: the child waits to open the fifo)
    go.write_text("go")
    wait_for(lambda: syscall_of(int(child)).startswith("0 0x0 "))  # (it left the group and reads our tty)
    wait_for(lambda: time.monotonic() - probe._outside_at >= OUTSIDE_GAP)  # (a walk outside the group is due)
    listings = iter([listed])
    probe.group_members = lambda pgid: next(listings, None) or type(probe).group_members(probe, pgid)
    try:
        assert manager.loop_thread.call(probe.waiting_for_input, Fence(accept_stale=True)) is not None
    finally:
        del probe.group_members
    r = send(manager, agent, shell, "wrong", idle=1.0, timeout=20)
    assert r.wait_reason == "stdin_read" and "\nchecked wrong\n" in r.viewport and r.viewport.endswith("$ "), r


#: A program whose leader moves to the shell's group once its child is in the foreground group alone (the child
#: asks only after the move): the foreground group has no leader in it.
LEADER_MOVES_AWAY = (f"{sys.executable} -c \"import os\nr, w = os.pipe(); go_r, go_w = os.pipe()\n"
                     "if os.fork() == 0:\n    os.read(go_r, 1); print('got', input('name? ')); os._exit(0)\n"
                     "os.setpgid(0, os.getpgid(os.getppid())); os.write(go_w, b'x'); os.close(w); os.read(r, 1)\"")


def test_a_group_whose_leader_moved_away_is_still_looked_into(manager, agent, shell):
    """A check lists the group's leader without a look at its group (a live group keeps its id): one that moved
    to another group of the session is not a member that left, or no check of its group ever answers."""
    r = send(manager, agent, shell, LEADER_MOVES_AWAY, idle=2.0, timeout=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("name? "), r
    r = send(manager, agent, shell, "bob", timeout=20)
    assert r.wait_reason == "stdin_read" and "\ngot bob\n" in r.viewport and r.exit_code == 0, r


def prompter_pid(shell_pid: int) -> int:
    """The prompter of :data:`PROMPTER_OUTSIDE` run by the shell ``shell_pid``: its child's child, the leader
    of a session of its own."""
    def stat(pid: str) -> list[str]:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            fields = stat(pid)
            if fields[3] == pid and stat(fields[1])[1] == str(shell_pid):
                return int(pid)
    raise AssertionError("no prompter found")


def test_a_pause_seen_late_is_timed_from_the_look_before(manager, agent, shell):
    """A relative pause was timed from the first look that saw it.  Seen late (a busy host, the loop held up),
    it seemed to end past the next window and was not waited for: the likely cause of the test above failing
    once in a CI run.  It is timed from the look before (it began after that one) and from the first that saw
    it (it had begun by then), and never from before the send's write.  The looks here come at instants the
    test picks, around a real prompter's wait."""
    assert send(manager, agent, shell, PROMPTER_OUTSIDE, timeout=20).wait_reason == "stdin_read"
    session = manager.loop_thread.call(manager.session, agent, shell)
    probe, pid = session.probe, prompter_pid(session.pid)
    looked = time.monotonic() - 1  # the last look before the write: a second before it
    assert manager.loop_thread.call(probe.pause_ends, looked, looked - 10) is None  # (it reads the tty)
    written = time.monotonic()
    manager.loop_thread.call(session.write_now, b"wrong\n")
    wait_for(lambda: (call := _timed_call(syscall_of(pid))) is not None and _pauses(*call))
    seen = written + 0.5  # the look that first sees the pause, put off
    ends = manager.loop_thread.call(probe.pause_ends, seen, looked - 10)  # (the send's write taken as long before)
    assert ends == pytest.approx((looked + 1.6, seen + 1.6), abs=1e-3)
    ends = manager.loop_thread.call(probe.pause_ends, seen + 0.1, written)  # (the write, after that look)
    assert ends == pytest.approx((written + 1.6, seen + 1.6), abs=1e-3)
    assert send(manager, agent, shell, "", timeout=20).viewport.endswith("$ ")


def test_a_pause_of_a_thread_never_looked_at_is_timed_from_its_start(manager, agent, shell):
    """A thread no look saw before (the ``sleep 1.5`` of the command sent) began its pause after it started:
    seen late, its pause is timed from the thread's start, read from ``/proc`` in the kernel's clock ticks."""
    probe = manager.loop_thread.call(manager.session, agent, shell).probe
    before = time.monotonic()
    sleeper = subprocess.Popen(["sleep", "3"])
    try:
        wait_for(lambda: (call := _timed_call(syscall_of(sleeper.pid))) is not None and _pauses(*call))
        started = manager.loop_thread.call(probe._thread_started, sleeper.pid, sleeper.pid)
        assert before - 0.02 <= started <= time.monotonic(), (before, started)
        seen = time.monotonic() + 0.5  # the first look, put off
        ends = manager.loop_thread.call(probe._sleep_end, sleeper.pid, sleeper.pid, syscall_of(sleeper.pid), seen,
                                        None, True)
        assert ends == pytest.approx((started + 3, seen + 3), abs=1e-3)
    finally:
        sleeper.kill()
        sleeper.wait()


def syscall_of(pid: int) -> str:
    with open(f"/proc/{pid}/syscall") as f:
        return f.read()


def test_a_pause_is_waited_for_once_per_quiet_spell_and_only_when_near(manager, agent, shell):
    """Not for a pause that ends past the next window, nor again for a program that only pauses again (a
    silent loop of sleeps), nor for a wait on fds with a timeout (a server's event loop is no pause)."""
    for command in ("sleep 30", "while :; do sleep 0.4; done",
                    f"{sys.executable} -c 'import select, socket; a, b = socket.socketpair(); "
                    f"select.select([a], [], [], 1.5); print(\"woke\")'"):
        r = send(manager, agent, shell, command, idle=1.0, timeout=20)
        assert r.wait_reason == "inferred_idle" and "woke" not in r.viewport.splitlines(), (command, r)
        manager.sync.signal(agent, shell, "SIGINT")
        assert send(manager, agent, shell, "").wait_reason == "stdin_read"


def test_exit_reports_session_exit_with_status(manager, agent, shell):
    r = send(manager, agent, shell, "exit 3")
    assert (r.wait_reason, r.exit_code, r.session_status) == ("session_exit", 3, "exited")


@pytest.mark.parametrize("contained", [False, True], ids=["bare", "sandboxed"])
def test_a_shell_ended_by_a_signal_reports_128_plus_its_number(manager, agent, contained):
    """As a shell reports a command's death: a bare shell killed by SIGKILL said -9, while under bubblewrap
    the same death said 137."""
    from dsh_terminal_magics.mechanism import sandbox as sandbox_module
    from dsh_terminal_magics.mechanism.sandbox import Sandbox

    if contained and sandbox_module.sandbox_problem() is not None:
        pytest.skip(sandbox_module.sandbox_problem())
    sandbox = Sandbox(mode="read-only", contain=True) if contained else Sandbox()  # type: ignore[arg-type]
    sid = manager.sync.open(agent, "shell", sandbox=sandbox).session_id
    try:
        r = send(manager, agent, sid, "kill -KILL $$")
        assert (r.wait_reason, r.exit_code, r.session_status) == ("session_exit", 137, "exited"), r
    finally:
        manager.sync.close(agent, sid)


def test_progress_bar_keeps_its_last_state(manager, agent, shell):
    send(manager, agent, shell, r"for i in 1 2 3; do printf '\rprogress %d%%' $((i*33)); done; echo")
    page = manager.sync.read(agent, shell, 0, 10)
    bars = [line for line in page.lines if line.startswith("progress")]
    assert bars == ["progress 99%"]


def test_unsubmitted_text_to_a_canonical_reader_is_still_a_prompt(manager, agent, shell):
    send(manager, agent, shell, "cat")
    r = send(manager, agent, shell, "partial", submit=False, idle=20)
    assert r.wait_reason == "stdin_read"
    r = send(manager, agent, shell, " line")
    assert "partial line" in r.viewport
    manager.sync.signal(agent, shell, "SIGINT")


def test_nothing_sent_reports_current_state(manager, agent, shell):
    r = send(manager, agent, shell, "", submit=False, idle=20)
    assert r.wait_reason == "stdin_read"


def test_user_rc_cannot_break_the_markers(manager, agent, tmp_path, monkeypatch):
    rc = tmp_path / "hostile_rc"
    rc.write_text("PS1='mine> '\nPROMPT_COMMAND='echo clobbered'\nbind 'set enable-bracketed-paste on'\n")
    monkeypatch.setenv("DSH_TERMINAL_USER_RC", str(rc))
    info = manager.sync.open(agent, "shell")
    try:
        r = send(manager, agent, info.session_id, "false")
        assert (r.wait_reason, r.exit_code) == ("stdin_read", 1)
        assert r.viewport.endswith("$ ") and "clobbered" not in r.viewport
        assert "\x1b" not in r.viewport
    finally:
        manager.sync.close(agent, info.session_id)


def test_marker_fallback_without_proc(manager, agent, shell, monkeypatch):
    session = manager.loop_thread.call(manager.session, agent, shell)
    monkeypatch.setattr(session.probe, "available", False)
    r = send(manager, agent, shell, "echo fallback")
    assert (r.wait_reason, r.exit_code) == ("stdin_read", 0)


#: A kernel that prints its shell's pid, waits until the test has closed that shell's ``syscall`` file to it, and
#: sends two commands.  It keeps no ``/proc`` file open (a file opened before the mount would still read).
KERNEL_BLIND_TO_ITS_SHELL = r"""
import json, sys, time
from dsh_terminal_magics import Agent, TerminalTools
from dsh_terminal_magics.mechanism import process_tree
process_tree.PROC_FILES_BUDGET = 0  # (every /proc file read by its path: one kept open would pass the mount by)
tools = TerminalTools(config={"containment": "tracking"})
agent = Agent("blind")
opened = tools.call("terminal_open", {"type": "shell"}, agent=agent)
print(opened.pid, flush=True)
sys.stdin.readline()

def send(text):
    started = time.monotonic()
    r = tools.call("terminal_send", {"sessionId": opened.session_id, "text": text, "idle": 10}, agent=agent)
    return [r.wait_reason, r.exit_code, time.monotonic() - started]

seen = {"echo": send("echo hi"), "false": send("false")}
tools.shutdown()
print(json.dumps(seen), flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="closing a /proc file to a process takes a bind mount (root)")
def test_a_kernel_that_may_not_read_its_own_shells_wait_goes_by_the_exit_marker(tmp_path):
    """Under Yama's ``ptrace_scope`` 2 or 3 the kernel may not read even its own shell's ``syscall`` file, and
    gVisor's ``/proc`` has none: every look found the shell busy, and every send, ``echo`` included, ended on the
    idle window.  The first look that finds the program's own file closed turns to the shell's exit-code marker,
    as where there is no ``/proc``.  Here the file is closed by a bind mount of an unreadable file over it, and
    the kernel runs without the file-permission overrides."""
    import json
    import subprocess
    closed = tmp_path / "closed"
    closed.touch(mode=0)
    script = tmp_path / "kernel.py"
    script.write_text(KERNEL_BLIND_TO_ITS_SHELL)
    drop = "-dac_override,-dac_read_search"
    kernel = subprocess.Popen(["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", sys.executable,
                               str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    assert kernel.stdin is not None and kernel.stdout is not None
    target = None
    try:
        pid = int(kernel.stdout.readline())
        target = f"/proc/{pid}/task/{pid}/syscall"
        subprocess.run(["mount", "--bind", str(closed), target], check=True)
        kernel.stdin.write("go\n")
        kernel.stdin.flush()
        seen = json.loads(kernel.stdout.readline())
        assert seen["echo"][:2] == ["stdin_read", 0] and seen["echo"][2] < 5, seen
        assert seen["false"][:2] == ["stdin_read", 1] and seen["false"][2] < 5, seen
    finally:
        if target is not None:
            subprocess.run(["umount", target], check=False)
        end_kernel(kernel)


def test_binary_huge_and_escape_output_never_crash_the_reader(manager, agent, shell):
    # No ESC or C1 CSI in the random bytes: a query among them (1 in ~60 runs has ESC [ c) is answered
    # after head has exited, and the answer then lands at the shell's prompt as typed text, as in xterm.
    r = send(manager, agent, shell, r"head -c 300000 /dev/urandom | tr -d '\033\233'; echo", timeout=20)
    assert r.wait_reason == "stdin_read"
    r = send(manager, agent, shell, f"{sys.executable} -c \"print('x' * 10_000_000)\"", timeout=60)
    assert r.wait_reason == "stdin_read"
    page = manager.sync.read(agent, shell, 0, 5)
    assert any(line.endswith("[line cut]") for line in page.lines)
    r = send(manager, agent, shell,
             r"printf '\e]52;c;ZXZpbA==\a\e]8;;http://x\e\\link\e]8;;\e\\\e[31mred\e[0m\e[?1049h\e[?1049l\n'")
    output = r.viewport.splitlines()[1:]  # after the echoed command line
    assert output == ["linkred", "$ "]
    assert send(manager, agent, shell, "echo alive").exit_code == 0


def test_output_is_consumed_while_the_caller_is_busy(manager, agent, shell):
    """A busy cell (here: this thread sleeping) never leaves the child blocked on a full PTY."""
    import time
    op = start_send(manager, agent, shell, SendRequest("seq 1 300000; echo END-OF-SEQ"), holder="busy-cell")
    deadline = time.monotonic() + 60
    session = manager.loop_thread.call(manager.session, agent, shell)
    while time.monotonic() < deadline and not manager.loop_thread.call(lambda: op.done):
        time.sleep(0.5)  # no calls into the manager: the loop thread alone drains the PTY
    assert manager.loop_thread.call(lambda: op.done)
    assert manager.loop_thread.call(lambda: session.raw.total) > 300000 * 6
    assert "END-OF-SEQ" in manager.sync.read(agent, shell, 0, 5).lines


@pytest.mark.parametrize("command, absolute", [
    (f"{sys.executable} -c 'import time; time.sleep(40)'", True),  # clock_nanosleep, absolute deadline
    ("sleep 40", False),                                            # nanosleep, relative
    (f"{sys.executable} -c 'import select; select.select([], [], [], 40)'", False),  # select's timeval
    (f"{sys.executable} -c 'import threading; threading.Event().wait(40)'", True),   # futex, absolute
    (f"{sys.executable} -c 'import asyncio; asyncio.run(asyncio.sleep(40))'", False),  # epoll_wait's timer
])
def test_a_sleeping_program_says_when_it_wakes(manager, agent, shell, command, absolute):
    """A check is scheduled for the end of the foreground program's timed wait (``time.sleep(2); input()`` is
    seen when the sleep ends, not at the next slow tick): the probe reads that end from the wait's arguments -
    a sleep, a futex wait with a timeout, or an event loop's timer."""
    import time as clock

    from tests.conftest import wait_for
    r = send(manager, agent, shell, command, timeout=0.5)
    assert r.wait_reason == "timeout"
    session = manager.loop_thread.call(manager.session, agent, shell)

    def ends():
        def read():
            probe = session.probe
            probe.waiting_for_input(probe.fence())  # a check: it samples the group's threads
            return probe.sleep_ends(clock.monotonic())
        return manager.loop_thread.call(read)

    started = clock.monotonic()
    end = wait_for(ends, timeout=10)
    assert started + 30 < end < started + 41, (end - started)  # at or after the wake, never before it
    assert end == ends() or not absolute  # an absolute deadline reads the same every time
    manager.sync.signal(agent, shell, "SIGINT")
    assert send(manager, agent, shell, "echo back").wait_reason == "stdin_read"
    assert manager.loop_thread.call(lambda: session.probe.sleep_ends(clock.monotonic())) is None


def test_a_loop_of_identical_sleeps_is_never_predicted_in_the_past(manager, agent, shell):
    """The same nanosleep call again and again (same arguments) is a new sleep each time: the predicted end
    stays ahead of now and within one sleep (a stale first sighting would schedule checks in the past, spinning)."""
    import time as clock

    from tests.conftest import wait_for
    loop = (f"{sys.executable} -c 'import ctypes; libc = ctypes.CDLL(None); "
            "t = (ctypes.c_long * 2)(0, 300000000)\nwhile True: libc.nanosleep(t, None)'")
    assert send(manager, agent, shell, loop, timeout=0.5).wait_reason == "timeout"
    session = manager.loop_thread.call(manager.session, agent, shell)

    def predicted():
        def read():
            probe = session.probe
            probe.waiting_for_input(probe.fence())
            now = clock.monotonic()
            return now, probe.sleep_ends(now)
        return manager.loop_thread.call(read)

    seen = []
    deadline = clock.monotonic() + 2.0
    while clock.monotonic() < deadline:
        now, end = predicted()
        if end is not None:
            seen.append(end - now)
        clock.sleep(0.05)
    wait_for(lambda: seen, timeout=1)
    assert all(0 < ahead <= 0.31 for ahead in seen), seen
    manager.sync.signal(agent, shell, "SIGINT")
    assert send(manager, agent, shell, "echo back").wait_reason == "stdin_read"


def test_a_computing_program_is_looked_at_often_and_cheaply(manager, agent, shell):
    """A program that computes and then reads gives no event when it blocks (no output, no exit, no sleep):
    while a thread of the group runs, the send looks every couple of milliseconds - one small read each while
    that thread still runs - so the read is seen at once, not at the next slow tick (50 ms on the old code)."""
    session = manager.loop_thread.call(manager.session, agent, shell)
    probe = session.probe
    looks = []

    def count(method):
        def counted(*args):
            looks.append(method.__name__)
            return method(*args)
        return counted

    def instrument(on: bool):
        for name in ("waiting_for_input", "still_running"):
            if on:
                setattr(probe, name, count(getattr(probe, name)))
            else:
                delattr(probe, name)  # back to the class's method
    manager.loop_thread.call(instrument, True)
    try:
        code = "import time; t = time.monotonic()\nwhile time.monotonic() - t < 1.0: pass\nprint(input('ok> '))"
        r = send(manager, agent, shell, f"{sys.executable} -c \"{code}\"")
    finally:
        manager.loop_thread.call(instrument, False)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("ok> "), r
    assert looks.count("still_running") >= 100, looks.count("still_running")  # ~500 at a 2 ms tick
    assert looks.count("waiting_for_input") < looks.count("still_running") / 5  # the looks are the cheap kind
    assert send(manager, agent, shell, "answer").viewport.splitlines()[:2] == ["ok> answer", "answer"]
    assert "N-42" in send(manager, agent, shell, "echo N-$((6*7))").viewport


def _kept_files_of(group: int) -> list[str]:
    """The /proc files of process ``group`` this process holds open."""
    targets = [entry.split("->", 1)[1] for entry in pty_fds()]
    return [path for path in targets if path.startswith(f"/proc/{group}/")]


def test_a_quiet_command_is_looked_at_through_files_kept_open(manager, agent, shell):
    """While a silent command runs, every tick reads its threads' scheduler stats: through a file kept open
    (one pread a tick), not opened and closed each time (three system calls, on the old code); once the shell
    has the terminal again, the command's files are closed."""
    session = manager.loop_thread.call(manager.session, agent, shell)
    done: dict = {}

    def command_files_kept() -> tuple[int, list[str]] | None:
        group = manager.loop_thread.call(session.foreground_pgid)
        kept = _kept_files_of(group) if group not in (0, session.pid) else []
        return (group, kept) if any(path.endswith("/schedstat") for path in kept) else None

    sender = threading.Thread(target=lambda: done.update(r=send(manager, agent, shell, "sleep 2")))
    sender.start()
    try:
        group = wait_for(command_files_kept, interval=0.05)[0]
    finally:
        sender.join()
    assert done["r"].wait_reason == "stdin_read", done
    assert not _kept_files_of(group)


def test_text_queued_behind_a_silent_command_still_watches_its_exit(manager, agent, shell):
    """Text sent while an earlier command runs with echo off stays unread and nothing runs, so every look is
    skipped - yet the send watches the command's exit (a pidfd) from its first tick: it looks the moment the
    command ends, not at the next slow tick or the once-a-second full check."""
    session = manager.loop_thread.call(manager.session, agent, shell)
    first = send(manager, agent, shell, "stty -echo; sleep 1.0; stty echo", idle=0.25)
    assert first.wait_reason == "inferred_idle", first
    exits = manager.loop_thread.call(lambda: session.child.exits_seen)
    r = send(manager, agent, shell, "echo after-$((6*7))")
    assert r.wait_reason == "stdin_read" and "after-42" in r.viewport, r
    assert manager.loop_thread.call(lambda: session.child.exits_seen) > exits


def test_a_send_after_a_prompt_takes_its_fence_from_the_last_check(manager, agent, shell):
    """Nothing has run since the check that saw the prompt: that check's sample is the fence (one small read
    per thread, no walk of the group).  After a send that left the program running, the fence walks again."""
    session = manager.loop_thread.call(manager.session, agent, shell)
    probe = session.probe
    walks_in_fence = []

    def instrument(on: bool):
        if not on:
            del probe.fence, probe.group_members
            return
        fence, members = probe.fence, probe.group_members
        inside = []

        def fenced(*args, **kw):
            inside.append(True)
            try:
                return fence(*args, **kw)
            finally:
                inside.pop()

        def walked(pgid):
            if inside:
                walks_in_fence.append(pgid)
            return members(pgid)
        probe.fence, probe.group_members = fenced, walked
    assert send(manager, agent, shell, "echo warm").wait_reason == "stdin_read"
    manager.loop_thread.call(instrument, True)
    try:
        for i in range(5):
            assert f"N-{i}" in send(manager, agent, shell, f"echo N-{i}").viewport
        assert walks_in_fence == []
        assert send(manager, agent, shell, "sleep 0.5", timeout=0.1).wait_reason == "timeout"
        assert send(manager, agent, shell, "").wait_reason == "stdin_read"  # the sleep ran: a full fence
        assert len(walks_in_fence) == 1
    finally:
        manager.loop_thread.call(instrument, False)
    assert "N-42" in send(manager, agent, shell, "echo N-$((6*7))").viewport


def test_still_running_follows_the_thread_the_check_found_on_a_cpu(manager, agent, shell):
    """``running_thread`` is the group's thread the last check found running; ``still_running`` says whether it
    still is (a blocked thread is not)."""
    from tests.conftest import wait_for
    code = "import time; t = time.monotonic()\nwhile time.monotonic() - t < 1.5: pass\ninput()"
    assert send(manager, agent, shell, f"{sys.executable} -c \"{code}\"", timeout=0.3).wait_reason == "timeout"
    session = manager.loop_thread.call(manager.session, agent, shell)
    probe = session.probe

    def check():
        assert probe.waiting_for_input(probe.fence()) is None
        return probe.running_thread, probe.still_running()
    thread, running = manager.loop_thread.call(check)
    assert thread is not None and thread[0] != session.pid and running
    wait_for(lambda: not manager.loop_thread.call(probe.still_running), timeout=10)  # blocked in input()
    assert manager.loop_thread.call(lambda: probe.waiting_for_input(probe.fence(accept_stale=True))) is not None
    assert manager.loop_thread.call(lambda: probe.running_thread) is None
    manager.sync.signal(agent, shell, "SIGINT")
    assert send(manager, agent, shell, "echo back").wait_reason == "stdin_read"


def test_a_thread_that_ran_during_a_check_is_looked_at_again(manager, agent, shell):
    """A check that sees a thread run while it samples it says "not waiting" - but the thread may have
    finished and blocked again within that window (a REPL answering ``print(2+2)`` does).  Its sample entry
    must then equal no later read, or the next looks would skip as "nothing ran since" until the next full
    check a second later (python round trips took ~1 s now and then).  Here the shell is made to take a
    line, answer it and block again between the check's two scheduler reads."""
    import os
    import time as clock

    session = manager.loop_thread.call(manager.session, agent, shell)
    probe, pid = session.probe, session.pid

    def settled_after(stat: str) -> bool:
        text = open(f"/proc/{pid}/task/{pid}/stat").read()
        return text[text.rindex(")") + 2] == "S" and open(f"/proc/{pid}/task/{pid}/schedstat").read() != stat

    def check_while_the_shell_answers():
        original = probe._waits_on_tty

        def answer_inside(looked_at, syscall):
            ran_before = open(f"/proc/{pid}/task/{pid}/schedstat").read()
            os.write(session.child.master_fd, b"\r")
            deadline = clock.monotonic() + 10
            while not settled_after(ran_before) and clock.monotonic() < deadline:
                clock.sleep(0.001)
            return original(looked_at, syscall)
        probe._waits_on_tty = answer_inside
        try:
            verdict = probe.waiting_for_input(probe.fence())
        finally:
            del probe._waits_on_tty
        return verdict, probe.unchanged_since_last_check()
    verdict, unchanged = manager.loop_thread.call(check_while_the_shell_answers)
    assert verdict is None  # it ran during the look: not a settled wait
    assert not unchanged  # ... so the next look is a full one
    assert manager.loop_thread.call(lambda: probe.waiting_for_input(probe.fence(accept_stale=True))) is not None


def test_input_counts_as_unread_only_while_the_fence_group_has_the_terminal(manager, agent, shell, tmp_path):
    """Before a send's first full check, a look is skipped while no thread sampled by the fence (taken just
    before the write) has run: our input is still unread.  That holds only while the fence's group has the
    terminal - a background process that ignores ``SIGTTOU`` can take it without any of them running, and
    then it is the one that reads.  On the old code the shell's unchanged stats still said "unread"."""
    from tests.conftest import wait_for
    go = tmp_path / "go"
    code = ("import os, signal, time\nsignal.signal(signal.SIGTTOU, signal.SIG_IGN)\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
            "os.tcsetpgrp(0, os.getpgrp())\ninput('bg> ')")
    assert send(manager, agent, shell, f"{sys.executable} -c \"{code}\" &").wait_reason == "stdin_read"
    session = manager.loop_thread.call(manager.session, agent, shell)
    probe = session.probe
    fence = manager.loop_thread.call(probe.fence)
    assert manager.loop_thread.call(probe.nothing_ran_since, fence)  # the shell has not run since
    go.touch()
    wait_for(lambda: manager.loop_thread.call(probe.foreground_pgid) not in (0, session.pid), timeout=10)
    assert not manager.loop_thread.call(probe.nothing_ran_since, fence)


def test_an_error_inside_the_wait_reaches_the_caller_and_frees_the_session(manager, agent, shell):
    """The wait runs as loop callbacks, not a task: an exception in one of its steps (here the readiness
    check) must still end the send with that error and give back the session's send reservation."""
    session = manager.loop_thread.call(manager.session, agent, shell)

    def broken(fence):
        raise RuntimeError("probe failed")
    manager.loop_thread.call(setattr, session.probe, "waiting_for_input", broken)
    try:
        with pytest.raises(RuntimeError, match="probe failed"):
            send(manager, agent, shell, "echo hi", timeout=10)
    finally:
        manager.loop_thread.call(delattr, session.probe, "waiting_for_input")
    assert manager.loop_thread.call(lambda: (session.reservation, session.operation)) == (None, None)
    assert send(manager, agent, shell, "echo again").wait_reason == "stdin_read"


def test_a_thread_found_running_counts_when_it_stops(manager, agent, shell, tmp_path):
    """A check that stops at a running thread still samples it: "nothing ran since the last check" (which keeps
    a "not waiting" without a full check) must see that thread block.  Here the main thread waits in ``join``
    and a second thread computes until told, then reads: on the old code the sample held only the main thread,
    so the read went unseen until the next full check, up to a second later (``git commit`` with vim was
    seen after ~1 s in most runs)."""
    from tests.conftest import wait_for
    go = tmp_path / "go"
    code = (f"import os, threading\ndef work():\n    while not os.path.exists({str(go)!r}): pass\n    input('in> ')\n"
            "t = threading.Thread(target=work); t.start(); t.join()")
    assert send(manager, agent, shell, f"{sys.executable} -c \"{code}\"", timeout=0.3).wait_reason == "timeout"
    session = manager.loop_thread.call(manager.session, agent, shell)
    probe = session.probe

    def check():
        assert probe.waiting_for_input(probe.fence()) is None
        return probe.running_thread
    worker = wait_for(lambda: (lambda t: t if t is not None and t[1] != t[0] else None)(
        manager.loop_thread.call(check)), timeout=10)
    go.touch()

    def state() -> str:
        text = open(f"/proc/{worker[0]}/task/{worker[1]}/stat").read()
        return text[text.rindex(")") + 2]
    wait_for(lambda: state() == "S", timeout=10)  # blocked in input()
    assert not manager.loop_thread.call(probe.still_running)
    assert not manager.loop_thread.call(probe.unchanged_since_last_check)  # the worker ran since
    r = send(manager, agent, shell, "", submit=False)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("in> "), r
    assert send(manager, agent, shell, "x").wait_reason == "stdin_read"


@pytest.mark.parametrize("contained", [False, True], ids=["plain", "in a pid namespace"])
def test_a_repl_sees_the_program_it_started_in_its_own_group(contained):
    """A REPL does no job control: ``os.system('cat')`` runs ``cat`` in the REPL's own group, and ``cat``
    reading the terminal is the prompt (it was missed: the REPL, blocked in ``wait4``, was the only member
    looked at - and under containment the wrapper's processes were looked at instead of the REPL)."""
    import time

    from dsh_terminal_magics import Agent, TerminalTools
    from dsh_terminal_magics.tools import sandbox_problem
    if contained and sandbox_problem() is not None and not __import__("os").environ.get("CI"):
        pytest.skip("namespace containment needs bubblewrap (CI installs it)")
    tools = TerminalTools({"containment": "namespace" if contained else "tracking"})
    agent = Agent("repl")
    try:
        opened = tools.call("terminal_open", {"type": "python"}, agent=agent)
        assert ("containment: pid namespace" in opened.motd) == contained
        sid = opened.session_id
        session = tools.manager.loop_thread.call(tools.manager.session, agent, sid)
        assert open(f"/proc/{session.pid}/comm").read().startswith("python")  # the REPL, not a wrapper

        def call(text, **extra):
            return tools.call("terminal_send", {"sessionId": sid, "text": text, **extra}, agent=agent)
        started = time.monotonic()
        r = call("import os; os.system('cat')")
        assert r.wait_reason == "stdin_read" and time.monotonic() - started < 2.0, r  # not the 3 s idle window
        assert call("meow").viewport.splitlines()[-1] == "meow"  # cat echoes the line back
        r = call("", submit=False, keys=["C-d"])
        assert r.wait_reason == "stdin_read" and r.viewport.rstrip().endswith(">>>"), r
        assert "42" in call("print(6*7)").viewport
    finally:
        tools.shutdown()


@pytest.fixture(params=[False, True], ids=["plain", "in a pid namespace"])
def contained_shell(request):
    """A shell session under process tracking or in a pid namespace, and ``call(text)``: a send with a 20 s
    idle window (so an observed prompt cannot be the idle window ending) that returns the result and the
    seconds it took."""
    import time

    from dsh_terminal_magics import Agent, TerminalTools
    from dsh_terminal_magics.tools import sandbox_problem
    if request.param and sandbox_problem() is not None and not __import__("os").environ.get("CI"):
        pytest.skip("namespace containment needs bubblewrap (CI installs it)")
    tools = TerminalTools({"containment": "namespace" if request.param else "tracking"})
    agent = Agent("contained")
    sid = tools.call("terminal_open", {"type": "shell"}, agent=agent).session_id

    def call(text):
        started = time.monotonic()
        r = tools.call("terminal_send", {"sessionId": sid, "text": text, "idle": 20, "timeout": 30}, agent=agent)
        return r, time.monotonic() - started
    yield call
    tools.shutdown()


RELAYS = {
    "script": "script -qc 'sh {script}' /dev/null",
    "pty.spawn": sys.executable + " -c \"import pty; pty.spawn(['sh', '{script}'])\"",
    "script in script": "script -qc \"script -qc 'sh {script}' /dev/null\" /dev/null",
}


@pytest.mark.parametrize("relay", list(RELAYS))
def test_a_relay_is_looked_through_to_its_command(relay, contained_shell, tmp_path):
    """``script``, ``sudo`` and ``pty.spawn`` run their command on a terminal of their own and wait on ours
    all the time: the wait is the command's, on the inner terminal.  (They came back as ``stdin_read`` at
    once, while the command still slept.)"""
    script = tmp_path / "inner.sh"
    script.write_text("sleep 1; echo slept; read -p 'inner> ' x; echo got-$x\n")
    r, elapsed = contained_shell(RELAYS[relay].format(script=script))
    assert r.wait_reason == "stdin_read", r
    assert "slept" in r.viewport and r.viewport.endswith("inner> "), r  # not before the sleep ended
    assert elapsed >= 1.0
    r, _ = contained_shell("abc")
    assert r.wait_reason == "stdin_read" and "got-abc" in r.viewport, r
    assert r.viewport.endswith("$ ") and r.exit_code == 0, r  # the relay ended: our shell's prompt


def test_a_shell_inside_a_relay_is_waited_on_like_ours(manager, agent, shell):
    """An interactive shell under ``script``: its commands are waited on through the relay, every time."""
    r = send(manager, agent, shell, "script -q /dev/null", idle=20)
    assert r.wait_reason == "stdin_read", r
    for _ in range(3):
        r = send(manager, agent, shell, "sleep 0.5; echo done-$((6*7))", idle=20)
        assert r.wait_reason == "stdin_read" and "done-42" in r.viewport, r
    r = send(manager, agent, shell, "exit", idle=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("$ "), r


def test_vim_with_a_terminal_window_waits_for_us_itself(manager, agent, shell):
    """vim with a ``:terminal`` window waits on our tty and on that terminal's master, as a relay does; keys
    typed in its other window never reach the shell behind it, and vim's own wait is the prompt.  (Each of
    them came back ``inferred_idle`` after the idle window, as with ``mc``'s subshell and an emacs shell.)"""
    import shutil
    if shutil.which("vim") is None and not __import__("os").environ.get("CI"):
        pytest.skip("vim is not installed (CI installs it)")

    def keys(*names, text=""):
        r = send(manager, agent, shell, text, submit=False, keys=names, idle=20, timeout=30)
        assert r.wait_reason == "stdin_read", r
        return r

    send(manager, agent, shell, "vim -u NONE -N -i NONE -n", idle=20)
    r = send(manager, agent, shell, ":terminal", idle=20)
    # (the window's status line: "!/bin/bash [running]", or the title the shell in it sets - a user's .bashrc
    # from Debian's skeleton sets one, and vim shows it in place of "running")
    assert r.wait_reason == "stdin_read" and re.search(r"^!\S+ \[", r.viewport, re.M), r
    keys("C-w", "w")  # (to the empty window)
    r = keys(text="ikept-by-vim")
    assert "kept-by-vim" in r.viewport, r
    keys("Esc")
    keys("C-w", "w")  # (back to the terminal window: its shell runs what it is sent)
    r = send(manager, agent, shell, "sleep 0.5; echo through-$((6*7))", idle=20)
    assert r.wait_reason == "stdin_read" and "through-42" in r.viewport, r
    keys("C-w", "N")
    r = send(manager, agent, shell, ":qa!", idle=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("$ "), r


#: A program with two terminals of its own (an editor's shell buffers): each runs ``sh``, idle at its prompt;
#: it reads our keys itself and echoes them, and forwards nothing.
TWO_TERMINALS = """import os, pty, select, sys, tty
masters = []
for _ in range(2):
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp("sh", ["sh"])
    masters.append(fd)
tty.setraw(0)
while True:
    ready, _, _ = select.select([0, *masters], [], [])
    for fd in ready:
        data = os.read(fd, 1024)
        if fd == 0:
            if data == b"q":
                raise SystemExit(0)
            os.write(1, b"[kept " + data + b"]")
"""


def test_a_program_with_two_terminals_of_its_own_waits_for_us_itself(manager, agent, shell, tmp_path):
    script = tmp_path / "two_terminals.py"
    script.write_text(TWO_TERMINALS)
    r = send(manager, agent, shell, f"{sys.executable} {script}", idle=20, timeout=30)
    for key in "abc":
        r = send(manager, agent, shell, key, submit=False, idle=20, timeout=30)
        assert r.wait_reason == "stdin_read" and f"[kept {key}]" in r.viewport, r
    r = send(manager, agent, shell, "q", submit=False, idle=20, timeout=30)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("$ "), r


@contextlib.contextmanager
def probe_wrapped(manager, probe, **wrappers):
    """Replace methods of ``probe`` (on the loop thread): ``name=lambda original: replacement``; the class's
    methods come back afterwards."""
    def swap(on: bool):
        for name, wrap in wrappers.items():
            if on:
                setattr(probe, name, wrap(getattr(probe, name)))
            else:
                delattr(probe, name)
    manager.loop_thread.call(swap, True)
    try:
        yield
    finally:
        manager.loop_thread.call(swap, False)


def counting(calls: list):
    """For :func:`probe_wrapped`: each call's arguments go into ``calls`` first."""
    return lambda original: (lambda *args: calls.append(args) or original(*args))


def per_check(looks: list, counts: list):
    """For :func:`probe_wrapped` on ``waiting_for_input``: how many entries each check added to ``looks``
    goes into ``counts`` (the bounds hold per check; a program starting its threads is looked at often)."""
    def wrap(full):
        def check(fence):
            before = len(looks)
            try:
                return full(fence)
            finally:
                counts.append(len(looks) - before)
        return check
    return wrap


#: A program that asks through a helper outside its group (gpg and pinentry): the helper daemonizes (a session
#: of its own), sleeps, opens the terminal by its name and asks twice; the program waits on a socket meanwhile.
DAEMON_ASKS = """\
import os, socket, sys, time
ask, answer = socket.socketpair()
tty = os.ttyname(0)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(0.5)
        fd = os.open(tty, os.O_RDWR | os.O_NOCTTY)
        for question in (b"Secret: ", b"Again: "):
            os.write(fd, question)
            answer.send(os.read(fd, 100).strip() + b";")
        os._exit(0)
    os._exit(0)
os.wait()
answer.close()
got = b""
while got.count(b";") < 2:
    got += ask.recv(100)
print("helper got", got.decode())
"""


def test_a_reader_outside_the_group_is_the_prompt(contained_shell, tmp_path):
    """``gpg`` waits on its agent while ``pinentry``, the agent's child in a session of its own, reads the
    terminal by its name: that read is the prompt (it came back ``inferred_idle`` after the idle window), and
    only once it comes: not while the helper sleeps, and not the helper's previous read after our answer."""
    script = tmp_path / "asks.py"
    script.write_text(DAEMON_ASKS)
    r, elapsed = contained_shell(f"{sys.executable} {script}")
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("Secret: "), r
    assert 0.5 <= elapsed < 10
    r, _ = contained_shell("one")
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("Again: "), r
    r, _ = contained_shell("two")
    assert r.wait_reason == "stdin_read" and "helper got one;two;" in r.viewport, r
    assert r.viewport.endswith("$ ") and r.exit_code == 0, r


def test_a_background_job_polling_the_terminal_is_not_the_prompt(contained_shell):
    """A job of the shell's own session that polls the terminal (``ssh host cmd &`` does) is not waiting for
    us - job control stops it when it reads.  (Looked at as a reader outside the group, it ended ``sleep 2``
    at the first full check, a second in.)"""
    poller = f"{sys.executable} -c 'import select, sys; select.select([sys.stdin], [], [], 60)'"
    r, elapsed = contained_shell(f"{poller} & sleep 2; echo slept")
    assert r.wait_reason == "stdin_read" and "slept" in r.viewport and elapsed >= 2.0, r
    assert "killed" in contained_shell("kill %1; echo killed")[0].viewport


def test_processes_outside_the_group_are_walked_at_a_bounded_rate(manager, agent, shell):
    """Looking outside the group walks the session's tree, and what the session started is untrusted: busy
    daemons of other sessions (each waking every 10 ms) get one walk per :data:`OUTSIDE_GAP` at most while a
    silent command runs (200 such daemons made every check a 20 ms walk: 43% of a core)."""
    from dsh_terminal_magics.mechanism.readiness import OUTSIDE_GAP
    probe = manager.loop_thread.call(manager.session, agent, shell).probe
    walks: list = []
    waker = f"{sys.executable} -c 'import time\nwhile True: time.sleep(0.01)'"
    r = send(manager, agent, shell, f"for i in 1 2 3 4 5 6 7 8; do setsid {waker} & done; sleep 0.5", idle=20)
    assert r.wait_reason == "stdin_read", r
    with probe_wrapped(manager, probe, _descendants=counting(walks)):
        r = send(manager, agent, shell, "sleep 2", idle=20)
    assert r.wait_reason == "stdin_read", r
    assert 2 <= len(walks) <= 2.5 / OUTSIDE_GAP, len(walks)
    assert "N-42" in send(manager, agent, shell, "echo N-$((6*7))").viewport  # (closing ends the daemons)


def test_tmux_is_looked_through_to_its_pane(contained_shell, tmp_path):
    """The tmux client only talks to its server; the server - a daemon, outside the group - reads our
    terminal and relays it to the pane's pts.  The pane's program is what is waited on: ``sleep`` is not a
    prompt, the shell after it is.  (It came back ``inferred_idle`` after the idle window every time.)"""
    import shutil
    if shutil.which("tmux") is None and not __import__("os").environ.get("CI"):
        pytest.skip("tmux is not installed (CI installs it)")
    r, _ = contained_shell(f"tmux -f /dev/null -S {tmp_path}/sock new -s t")
    assert r.wait_reason == "stdin_read" and r.screen is not None, r
    r, elapsed = contained_shell("sleep 1; echo slept-$((6*7))")
    assert r.wait_reason == "stdin_read" and "slept-42" in r.viewport and 1.0 <= elapsed < 10, r
    r, _ = contained_shell("exit")
    assert r.wait_reason == "stdin_read" and r.viewport.rstrip().endswith("$"), r


def wait_for_gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether process ``pid`` is gone (or a zombie) within ``timeout`` seconds."""
    from dsh_terminal_magics.mechanism.process_tree import read_stat
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stat = read_stat(pid)
        if stat is None or stat.gone:
            return True
        time.sleep(0.01)
    return False


def test_tmux_attached_to_a_server_started_elsewhere_is_looked_through(contained_shell, tmp_path):
    """``tmux attach`` to a server the session did not start: the client hands our terminal to that server,
    outside the session's tree, which reads it from then on.  Every send came back ``inferred_idle`` after
    the idle window; processes anywhere that hold the terminal open are looked at too now."""
    import os
    import shutil
    import subprocess
    if shutil.which("tmux") is None and not os.environ.get("CI"):
        pytest.skip("tmux is not installed (CI installs it)")
    sock = tmp_path / "elsewhere.sock"
    tmux = ["tmux", "-f", "/dev/null", "-S", str(sock)]
    subprocess.run([*tmux, "new", "-d", "-s", "elsewhere"], check=True, timeout=30)
    server = int(subprocess.run([*tmux, "display", "-p", "#{pid}"], capture_output=True, text=True,
                                check=True, timeout=30).stdout)
    try:
        r, _ = contained_shell(f"tmux -S {sock} attach -t elsewhere")
        assert r.wait_reason == "stdin_read" and r.screen is not None, r
        r, elapsed = contained_shell("sleep 1; echo slept-$((6*7))")
        assert r.wait_reason == "stdin_read" and "slept-42" in r.viewport and elapsed >= 1.0, r
    finally:
        subprocess.run([*tmux, "kill-server"], timeout=30)
        if not wait_for_gone(server):
            os.kill(server, 9)
    r, _ = contained_shell("echo after-$((6*7))")
    assert r.wait_reason == "stdin_read" and "after-42" in r.viewport, r


def test_a_group_with_too_many_threads_is_not_looked_into(manager, agent, shell):
    """A check reads a few /proc files per thread on the kernel's loop, and what a session runs is
    untrusted: 2000 sleeping threads made every check 0.3 s of the loop.  Past :data:`MAX_THREADS_LOOKED`
    the group is not looked into (never found waiting: the idle window ends the send); below it, it is."""
    from dsh_terminal_magics.mechanism.readiness import MAX_THREADS_LOOKED
    probe = manager.loop_thread.call(manager.session, agent, shell).probe
    looks: list = []
    counts: list = []
    program = ("import threading, time\nfor i in range({n}):\n    threading.Thread(target=time.sleep, "
               "args=(60,), daemon=True).start()\nprint('got', input('ready> '))")
    with probe_wrapped(manager, probe, _thread_state=counting(looks), waiting_for_input=per_check(looks, counts)):
        r = send(manager, agent, shell, f"{sys.executable} -c \"{program.format(n=MAX_THREADS_LOOKED + 20)}\"",
                 idle=2)
        assert r.wait_reason == "inferred_idle" and r.viewport.endswith("ready> "), r
        # (every thread, each check, before; the last check, with all of them started, looked at none)
        assert max(counts) <= MAX_THREADS_LOOKED and counts[-1] == 0, counts
        assert "got x" in send(manager, agent, shell, "x", idle=2).viewport
        r = send(manager, agent, shell, f"{sys.executable} -c \"{program.format(n=50)}\"", idle=20)
        assert r.wait_reason == "stdin_read" and r.viewport.endswith("ready> "), r
    assert "got y" in send(manager, agent, shell, "y").viewport


def test_a_group_of_too_many_processes_is_not_looked_into(manager, agent, shell):
    """The same bound for processes: a job of 1000 (a subshell's background ``sleep``s share its group) made
    every check a walk of all of them - 44% of a core.  The walk stops at :data:`MAX_WALK_LOOKS` processes,
    or past :data:`MAX_THREADS_LOOKED` members; such a group is not looked into, and looked at in full only
    now and then (once a second), not at every tick."""
    from dsh_terminal_magics.mechanism.readiness import MAX_THREADS_LOOKED
    probe = manager.loop_thread.call(manager.session, agent, shell).probe
    looks: list = []
    checks: list = []
    with probe_wrapped(manager, probe, _thread_state=counting(looks), waiting_for_input=per_check(looks, checks)):
        job = f"(for i in $(seq {MAX_THREADS_LOOKED + 20}); do sleep 60 & done; read -p 'ready> ' x; echo got-$x)"
        r = send(manager, agent, shell, job, idle=2, timeout=60)
        assert r.wait_reason == "inferred_idle" and r.viewport.endswith("ready> "), r
        assert max(checks) <= MAX_THREADS_LOOKED and checks[-1] == 0, checks
        checks.clear()
        r = send(manager, agent, shell, "", submit=False, idle=3)  # (a look at the state: 3 s of silence)
        assert r.wait_reason == "inferred_idle" and len(checks) <= 8, len(checks)  # (~60 at every tick)
    assert "got-x" in send(manager, agent, shell, "x", idle=2).viewport


def test_a_wait_on_many_descriptors_is_looked_at_in_part(manager, agent, shell):
    """Each descriptor of a wait is a ``readlink``: a program polling 10,000 pipes made each check 90 ms of
    the loop.  A check looks at the first :data:`MAX_FDS_LOOKED` only - where a terminal is - so a poll of
    the terminal among many pipes is still a prompt."""
    import resource

    from dsh_terminal_magics.mechanism.readiness import MAX_FDS_LOOKED
    pipes = MAX_FDS_LOOKED + 500
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < pipes + 200:
        pytest.skip(f"the hard limit on open files is under {pipes + 200} here")
    session = manager.loop_thread.call(manager.session, agent, shell)
    probe = session.probe
    looks: list = []
    counts: list = []
    program = ("import os, resource, select\nresource.setrlimit(resource.RLIMIT_NOFILE, ({n}, {n}))\n"
               "r, w = os.pipe()\np = select.poll()\n{tty}for fd in [os.dup(r) for i in range({pipes})]:\n"
               "    p.register(fd, select.POLLIN)\nprint('polling')\np.poll()\n")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    with probe_wrapped(manager, probe, _is_tty=counting(looks), waiting_for_input=per_check(looks, counts)):
        code = program.format(n=hard, tty="", pipes=pipes)
        r = send(manager, agent, shell, f"{sys.executable} -c \"{code}\"", idle=2)
        assert r.wait_reason == "inferred_idle" and r.viewport.endswith("polling\n"), r
        assert max(counts) == MAX_FDS_LOOKED, counts  # (every descriptor, each check, before)
    manager.loop_thread.call(session.interrupt_foreground)  # (the first program: Ctrl-C)
    code = program.format(n=hard, tty="p.register(0, select.POLLIN)\n", pipes=pipes)
    r = send(manager, agent, shell, f"{sys.executable} -c \"{code}\"", idle=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("polling\n"), r


@pytest.mark.parametrize("starts", ["threads", "processes"])
def test_workers_started_during_a_check_are_looked_at(manager, agent, shell, tmp_path, starts):
    """A check lists the group's threads and processes, then looks at each.  A program that starts workers
    and then asks for input can do both between the listing and the look (a loaded machine delays the check
    that long): it was found reading, its workers never looked at, and "waiting" came back while they ran.
    Here the check is held after its listing until the workers run and the program reads."""
    import os
    import time as clock
    from tests.conftest import wait_for
    go, stop = tmp_path / "go", tmp_path / "stop"
    start = {"threads": "threading.Thread(target=work).start()",
             "processes": "os.fork() or (work(), os._exit(0))"}[starts]
    code = (f"import os, threading, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
            f"def work():\n    while not os.path.exists({str(stop)!r}): pass\n"
            f"for _ in range(2): {start}\nprint('got', input('ready> '))")
    script = tmp_path / "workers.py"
    script.write_text(code)
    r = send(manager, agent, shell, f"{sys.executable} {script}", idle=1)
    assert r.wait_reason == "inferred_idle", r
    session = manager.loop_thread.call(manager.session, agent, shell)
    probe = session.probe
    pgid = manager.loop_thread.call(probe.foreground_pgid)
    assert pgid != session.pid

    def workers_run_and_main_reads() -> bool:
        count = len(os.listdir(f"/proc/{pgid}/task")) if starts == "threads" else \
            len(open(f"/proc/{pgid}/task/{pgid}/children").read().split())
        return count >= (3 if starts == "threads" else 2) and open(f"/proc/{pgid}/syscall").read().startswith("0 ")

    listed = []

    def check_held_after_the_listing():
        original = probe.group_members

        def listed_then_held(group):
            members = original(group)
            listed.append(group)
            go.touch()
            deadline = clock.monotonic() + 20
            while not workers_run_and_main_reads() and clock.monotonic() < deadline:
                clock.sleep(0.005)
            return members
        fence = probe.fence(accept_stale=True)  # (it lists the group too)
        probe.group_members = listed_then_held
        try:
            return probe.waiting_for_input(fence)
        finally:
            del probe.group_members

    def look() -> float | None:
        return probe.waiting_for_input(probe.fence(accept_stale=True))

    def held_check_listed() -> bool:
        assert manager.loop_thread.call(check_held_after_the_listing) is None  # its workers run: not waiting
        return bool(listed)

    try:
        # (A check that finds the program on a CPU - polling for the go file - answers without a listing, and then
        # nothing touched the file: under load the test waited for a program that never started its workers.)
        wait_for(held_check_listed, timeout=30)
        assert manager.loop_thread.call(look) is None
    finally:
        stop.touch()

    def what_a_check_sees() -> str:  # (for the failure message: this test failed rarely, never reproduced)
        verdict = look()
        fields = {name: getattr(probe, name) for name in ("running_thread", "program_stopped", "handed_on",
                                                          "tty_readers", "_other_waits", "_unseen")}
        tasks = {}
        for tid in os.listdir(f"/proc/{pgid}/task"):
            try:
                tasks[tid] = [open(f"/proc/{pgid}/task/{tid}/{name}").read()[:80]
                              for name in ("stat", "syscall", "children")]
            except OSError as exc:
                tasks[tid] = [repr(exc)]
        return f"verdict {verdict}, probe {fields}, unread input {probe.unread_input()}, threads {tasks}"

    try:
        wait_for(lambda: manager.loop_thread.call(look) is not None, timeout=20)
    except AssertionError:
        raise AssertionError(f"never seen waiting: {manager.loop_thread.call(what_a_check_sees)}") from None
    assert "got x" in send(manager, agent, shell, "x").viewport


def test_windows_line_ends_in_sent_text_are_one_line_end_each(manager, agent, shell):
    """Text pasted from a Windows editor ends its lines with CR LF: written as is, the CR entered the line
    and the LF entered an empty one after it (an extra prompt after each command; in a REPL, an empty line
    ends a block).  A terminal pastes a CR LF as one line end; so does a send."""
    r = send(manager, agent, shell, "echo one\r\necho two")
    assert r.viewport.splitlines() == ["$ echo one", "one", "$ echo two", "two", "$ "], r.viewport


#: A line editor as JLine (``jshell``) runs one: a thread reads the terminal all along in raw mode with VMIN 0
#: and VTIME 1 (a read that returns after 0.1 s with nothing), echoing, and hands whole lines to the program.
TIMED_READER_REPL = """\
import os, queue, sys, termios, threading, time
fd = sys.stdin.fileno()
saved = termios.tcgetattr(fd)
raw = termios.tcgetattr(fd)
raw[3] &= ~(termios.ICANON | termios.ECHO)
raw[6][termios.VMIN], raw[6][termios.VTIME] = 0, 1
termios.tcsetattr(fd, termios.TCSANOW, raw)
lines = queue.Queue()
def read_all_along():
    line = b""
    while True:
        for key in os.read(fd, 1024):
            if key in (10, 13):
                os.write(1, b"\\r\\n"); lines.put(line.decode()); line = b""
            else:
                line += bytes([key]); os.write(1, bytes([key]))
threading.Thread(target=read_all_along, daemon=True).start()
try:
    while True:
        os.write(1, b"calc> ")
        line = lines.get()
        if line == "quit":
            break
        time.sleep(float(line.split()[1]) if line.startswith("work ") else 0)
        os.write(1, f"done {line}\\r\\n".encode())
finally:
    termios.tcsetattr(fd, termios.TCSANOW, saved)
"""


def test_a_reader_in_timed_reads_all_along_is_no_prompt_while_its_program_works(manager, agent, shell, tmp_path):
    """JLine reads the terminal all along, also while a snippet runs: each read of a raw terminal with VMIN 0
    returns after VTIME tenths of a second, so it is a timed wait, and with the cursor at the start of a line
    (no prompt shown) not a prompt.  ``Thread.sleep(3000)`` in jshell ended 'stdin_read' at once with no
    result, and the next send's text went to the snippet."""
    script = tmp_path / "calc.py"
    script.write_text(TIMED_READER_REPL)
    r = send(manager, agent, shell, f"{sys.executable} {script}", timeout=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("calc> "), r
    r = send(manager, agent, shell, "add 2", timeout=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("done add 2\ncalc> "), r
    r = send(manager, agent, shell, "work 1.5", idle=4, timeout=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("done work 1.5\ncalc> "), r
    r = send(manager, agent, shell, "quit", timeout=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("$ ") and r.exit_code == 0, r


#: A raw-mode menu that polls its terminal with a timeout (as prompt_toolkit does): a cursor key moves at once,
#: and 1.2 s later the menu notes it on its own; an Esc alone is taken as one only once 0.3 s pass with
#: nothing after it (as vim's Esc timeout).
POLLING_MENU = """\
import os, select, sys, termios, time, tty
fd = sys.stdin.fileno()
saved = termios.tcgetattr(fd)
tty.setraw(fd)
note_at = None
try:
    os.write(1, b"menu> ")
    while True:
        ready, _, _ = select.select([fd], [], [], 1.5)
        if note_at is not None and time.monotonic() >= note_at:
            os.write(1, b"\\r\\nlate\\r\\nmenu> "); note_at = None
        if not ready:
            continue
        key = os.read(fd, 16)
        if key == b"\\x1b" and not select.select([fd], [], [], 0.3)[0]:
            os.write(1, b"\\r\\nesc\\r\\nmenu> ")
        elif key in (b"\\x1b[B", b"\\x1bOB"):
            os.write(1, b"\\r\\nmoved\\r\\nmenu> "); note_at = time.monotonic() + 1.2
        elif key == b"q":
            break
finally:
    termios.tcsetattr(fd, termios.TCSANOW, saved)
"""


def test_a_cursor_key_is_taken_at_once_and_only_an_esc_key_is_waited_out(manager, agent, shell, tmp_path):
    """A timed wait after a send with an ESC in it must outlast its timeout (vim waits out its Esc timeout
    before it acts).  A cursor or function key is a whole key code a program takes at once: every Down in a
    prompt_toolkit menu (questionary, IPython's history) waited out the poll's timeout (~1 s), and here the
    menu's own later note came with it."""
    script = tmp_path / "menu.py"
    script.write_text(POLLING_MENU)
    r = send(manager, agent, shell, f"{sys.executable} {script}", timeout=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("menu> "), r
    r = manager.sync.send(agent, shell, SendRequest("", keys=["Down"], submit=False, timeout=20))
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("moved\nmenu> ") and "late" not in r.viewport, r
    r = manager.sync.send(agent, shell, SendRequest("", keys=["Esc"], submit=False, timeout=20))
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("esc\nmenu> "), r
    r = manager.sync.send(agent, shell, SendRequest("q", submit=False, timeout=20))
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("$ "), r


#: A program that reads its terminal in a thread from the start and draws its prompt after a short timer in
#: another (as fzf does: its key reader starts at once, its list is drawn after a 10 ms timer).
READER_FIRST_DRAWER_AFTER = """\
import os, sys, threading, time
threading.Thread(target=lambda: print("got", os.read(0, 100).decode().strip(), flush=True)).start()
time.sleep(0.03)
print("pick> ", end="", flush=True)
"""


def test_a_timer_due_in_a_program_that_reads_is_waited_for_when_nothing_is_drawn(manager, agent, shell, tmp_path):
    """A thread that ran since the write and waits on a timer due within milliseconds is the program about
    to go on by itself: fzf --height reads the terminal at once and draws after a short timer, and 1 to 5 % of
    its starts ended 'stdin_read' with nothing drawn (timers under 50 ms are otherwise housekeeping)."""
    script = tmp_path / "drawer.py"
    script.write_text(READER_FIRST_DRAWER_AFTER)
    for _ in range(3):
        r = send(manager, agent, shell, f"{sys.executable} {script}", timeout=20)
        assert r.wait_reason == "stdin_read" and r.viewport.endswith("pick> "), r
        r = send(manager, agent, shell, "x", timeout=20)
        assert r.wait_reason == "stdin_read" and r.viewport.endswith("got x\n$ "), r


#: A program that takes each read of the terminal as one key event and hides the cursor (as Ink does; with
#: an argument it shows the cursor, as a line editor does).
READ_AS_EVENTS = """\
import os, sys, termios, tty
saved = termios.tcgetattr(0)
tty.setraw(0)
try:
    os.write(1, b"\\x1b[?25h" if sys.argv[1:] else b"\\x1b[?25l")
    os.write(1, b"keys> ")
    while True:
        chunk = os.read(0, 100)
        os.write(1, f"\\r\\nevent {chunk!r}\\r\\nkeys> ".encode())
        if chunk == b"q":
            break
finally:
    termios.tcsetattr(0, termios.TCSANOW, saved)
"""


def test_a_command_that_takes_the_keys_raw_gets_the_text_each_key_and_the_enter_apart(manager, agent, shell,
                                                                                       tmp_path):
    """Ink (React for the terminal: many agent CLIs) takes each read as one key event: ``hello`` and its Enter,
    read at once, were pasted text - the line was never submitted and the CR went into it.  While a command
    the session started takes the keys raw, the text, each key and the Enter are written each once the program
    has taken the one before, as typed - whether it hides the cursor or shows it (fzf shows it, and acts on
    keys in other threads); the session's own shell still gets one write."""
    script = tmp_path / "events.py"
    script.write_text(READ_AS_EVENTS)
    r = send(manager, agent, shell, f"{sys.executable} {script}", timeout=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("keys> "), r
    r = send(manager, agent, shell, "hello", timeout=20)
    assert r.wait_reason == "stdin_read" and "event b'hello'\n" in r.viewport and "event b'\\r'\n" in r.viewport, r
    r = manager.sync.send(agent, shell, SendRequest("", keys=["Down", "Up"], submit=False, timeout=20))
    assert "event b'\\x1b[B'\n" in r.viewport and "event b'\\x1b[A'\n" in r.viewport, r
    r = send(manager, agent, shell, "q", submit=False, timeout=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("$ "), r
    send(manager, agent, shell, f"{sys.executable} {script} visible", timeout=20)  # (it shows the cursor)
    r = send(manager, agent, shell, "hello", timeout=20)
    assert r.wait_reason == "stdin_read" and "event b'hello'\n" in r.viewport and "event b'\\r'\n" in r.viewport, r
    send(manager, agent, shell, "q", submit=False, timeout=20)
    r = send(manager, agent, shell, "echo one-$((6*7))", timeout=20)  # (the shell itself: one write)
    assert r.wait_reason == "stdin_read" and "one-42\n" in r.viewport, r


#: An app that draws its input box under a hidden cursor and leaves the cursor on the line under it, polling
#: the terminal with a timer pending (as an idle Ink app does).
HIDDEN_CURSOR_BOX = """\
import os, select, sys, termios, tty
saved = termios.tcgetattr(0)
tty.setraw(0)
typed = b""
try:
    while typed != b"q":
        os.write(1, b"\\x1b[?25l\\x1b[2K\\x1b[1A\\x1b[2K\\r> " + typed + b"\\r\\n")
        if select.select([0], [], [], 5)[0]:
            typed = os.read(0, 100).strip()
finally:
    os.write(1, b"\\x1b[?25h")
    termios.tcsetattr(0, termios.TCSANOW, saved)
"""


def test_a_timed_wait_under_a_hidden_cursor_at_a_line_start_is_a_prompt(manager, agent, shell, tmp_path):
    """A timed wait with the cursor at the start of a line is no prompt (node's REPL awaiting a promise), but
    an app that hid the cursor draws its own display: Ink leaves the hidden cursor under its input box, and
    every send to an idle Ink app ended on the idle window."""
    script = tmp_path / "box.py"
    script.write_text(HIDDEN_CURSOR_BOX)
    r = send(manager, agent, shell, f"{sys.executable} {script}", idle=3, timeout=20)
    assert r.wait_reason == "stdin_read" and "> " in r.viewport, r
    r = send(manager, agent, shell, "abc", submit=False, idle=3, timeout=20)
    assert r.wait_reason == "stdin_read" and "> abc" in r.viewport, r
    r = send(manager, agent, shell, "q", submit=False, idle=3, timeout=20)
    assert r.wait_reason == "stdin_read" and r.viewport.endswith("$ "), r


def test_a_program_gone_before_its_terminal_was_opened_leaves_nothing_to_observe():
    """A program that exits at once (bubblewrap refusing to set a session up) can be gone before the session
    opens its terminal's other end: the probe got fd -1, and registering it for the input-in-transit poll
    raised ValueError out of the open.  Now such a probe observes nothing and says so."""
    import pty

    from dsh_terminal_magics.mechanism.readiness import Fence, ReadinessProbe

    master, slave = pty.openpty()
    try:
        probe = ReadinessProbe(master, -1, "", os.getpid())
        assert not probe.available
        assert probe.unread_input() == -1
        assert probe.waiting_for_input(Fence()) is None
        probe.close()
    finally:
        os.close(master)
        os.close(slave)
