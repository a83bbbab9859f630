"""A corpus of wrong calls across the tools API and the magics: one clear error each, nothing changed."""
from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from dsh_terminal_magics import Agent, TerminalError, TerminalTools
from dsh_terminal_magics.notebook.magics import loaded_magics
from tests.conftest import wait_for

OTHER_ID = "t-0000000000000000"
BIG = "x" * (2 * 1024 * 1024)

# (tool, arguments, substring of the one error message).  $SID: a running session of the caller;
# $FOREIGN: another agent's session; $CLOSED: a closed session; $EXITED: a session whose shell exited;
# $BUSY: a session held by a background job; $JOB / $FOREIGN_JOB: jobs of the caller / of another agent.
TOOL_CASES = [
    ("terminal_open", {}, "missing required argument 'type'"),
    ("terminal_open", {"type": 1}, "argument 'type'"),
    ("terminal_open", {"type": None}, "argument 'type'"),
    ("terminal_open", {"type": "zsh"}, "unknown terminal type 'zsh'"),
    ("terminal_open", {"type": "shell", "cwd": "/no/such/dir"}, "not an existing directory"),
    ("terminal_open", {"type": "shell", "cwd": "/etc/hostname"}, "not an existing directory"),
    ("terminal_open", {"type": "shell", "cwd": ""}, "argument 'cwd'"),
    ("terminal_open", {"type": "shell", "name": ""}, "argument 'name'"),
    ("terminal_open", {"type": "shell", "name": "n" * 65}, "argument 'name'"),
    ("terminal_open", {"type": "shell", "name": 5}, "argument 'name'"),
    ("terminal_open", {"type": "shell", "name": "two\nlines"}, "holds '\\n', a control character"),
    ("terminal_open", {"type": "shell", "extra": 1}, "unknown argument 'extra'"),
    ("terminal_open", {"type": "shell", "name": "main"}, "already have a terminal session named 'main'"),
    ("terminal_send", {}, "missing required argument 'sessionId'"),
    ("terminal_send", {"sessionId": "$SID"}, "missing required argument 'text'"),
    ("terminal_send", {"sessionId": "$SID", "text": 3}, "argument 'text'"),
    ("terminal_send", {"sessionId": "$SID", "text": ["ls"]}, "argument 'text'"),
    ("terminal_send", {"sessionId": 5, "text": "ls"}, "argument 'sessionId'"),
    ("terminal_send", {"sessionId": "$SID", "text": "ls", "submit": "true"}, "argument 'submit'"),
    ("terminal_send", {"sessionId": "$SID", "text": "ls", "submit": 1}, "argument 'submit'"),
    ("terminal_send", {"sessionId": "$SID", "text": "ls", "run_in_background": "yes"},
     "argument 'run_in_background'"),
    ("terminal_send", {"sessionId": "$SID", "text": "ls", "timeout": 0}, "argument 'timeout'"),
    ("terminal_send", {"sessionId": "$SID", "text": "ls", "timeout": -5}, "argument 'timeout'"),
    ("terminal_send", {"sessionId": "$SID", "text": "ls", "timeout": "10"}, "argument 'timeout'"),
    ("terminal_send", {"sessionId": "$SID", "text": "ls", "idle": 0}, "argument 'idle'"),
    ("terminal_send", {"sessionId": "$SID", "text": "ls", "idle": 10_000}, "argument 'idle'"),
    ("terminal_send", {"sessionId": "$SID", "text": "ls", "cwd": "/"}, "unknown argument 'cwd'"),
    ("terminal_send", {"sessionId": "$SID", "text": "a\x00b"}, "NUL byte"),
    ("terminal_send", {"sessionId": "$SID", "text": "echo \ud800" + "x" * 5000},
     "terminal_send: text contains a lone surrogate ('\\ud800')"),  # the argument named, its value not echoed
    ("terminal_send", {"sessionId": "s" * 100_000, "text": "ls"}, "(100000 characters)"),  # a wrong id is cut
    ("job_output", {"jobId": "j" * 5000}, "(5000 characters)"),
    ("terminal_send", {"sessionId": "$SID", "text": BIG}, "larger than"),
    ("terminal_send", {"sessionId": OTHER_ID, "text": "ls"}, "unknown terminal session"),
    ("terminal_send", {"sessionId": "$FOREIGN", "text": "ls"}, "unknown terminal session"),
    ("terminal_send", {"sessionId": "$CLOSED", "text": "ls"}, "unknown terminal session"),
    ("terminal_send", {"sessionId": "$EXITED", "text": "ls"}, "has exited"),
    ("terminal_send", {"sessionId": "$BUSY", "text": "ls"}, "is busy: job j-"),
    ("terminal_send", {"sessionId": "$BUSY", "text": "ls", "run_in_background": True}, "(job_output with jobId"),
    ("terminal_send", {"sessionId": "$EXITED", "text": "ls", "run_in_background": True}, "has exited"),
    ("terminal_read", {"sessionId": "$SID", "count": 0}, "argument 'count'"),
    ("terminal_read", {"sessionId": "$SID", "count": 5001}, "argument 'count'"),
    ("terminal_read", {"sessionId": "$SID", "count": "10"}, "argument 'count'"),
    ("terminal_read", {"sessionId": "$SID", "offset": -1}, "argument 'offset'"),
    ("terminal_read", {"sessionId": "$SID", "offset": 1.5}, "argument 'offset'"),
    ("terminal_read", {"sessionId": OTHER_ID}, "unknown terminal session"),
    ("terminal_read", {"sessionId": "$FOREIGN"}, "unknown terminal session"),
    ("terminal_read", {}, "missing required argument 'sessionId'"),
    ("terminal_signal", {"sessionId": "$SID"}, "missing required argument 'signal'"),
    ("terminal_signal", {"sessionId": "$SID", "signal": "SIGUSR1"}, "argument 'signal'"),
    ("terminal_signal", {"sessionId": "$SID", "signal": "SIGSEGV"}, "argument 'signal'"),
    ("terminal_signal", {"sessionId": "$SID", "signal": 2}, "argument 'signal'"),
    ("terminal_signal", {"sessionId": "$SID", "signal": "SIGKILL"}, "use terminal_close"),
    ("terminal_signal", {"sessionId": "$FOREIGN", "signal": "SIGINT"}, "unknown terminal session"),
    ("terminal_signal", {"sessionId": "$EXITED", "signal": "SIGINT"}, "has exited"),
    ("terminal_close", {"sessionId": OTHER_ID}, "unknown terminal session"),
    ("terminal_close", {"sessionId": "$FOREIGN"}, "unknown terminal session"),
    ("terminal_close", {"sessionId": "$SID", "force": True}, "unknown argument 'force'"),
    ("terminal_list", {"sessionId": "$SID"}, "unknown argument 'sessionId'"),
    ("job_output", {}, "missing required argument 'jobId'"),
    ("job_output", {"jobId": "j-0000000000000000"}, "unknown job"),
    ("job_output", {"jobId": "$FOREIGN_JOB"}, "unknown job"),
    ("job_output", {"jobId": 5}, "argument 'jobId'"),
    ("job_kill", {"jobId": "j-0000000000000000"}, "unknown job"),
    ("job_kill", {"jobId": "$FOREIGN_JOB"}, "unknown job"),
    ("job_kill", {"jobId": "$JOB", "now": True}, "unknown argument 'now'"),
    ("terminal_send", {"sessionId": "$SID", "text": "", "keys": ["Hyper"]}, "unknown key 'Hyper'"),
    ("terminal_send", {"sessionId": "$SID", "text": "", "keys": "Enter"}, "argument 'keys'"),
    ("terminal_send", {"sessionId": "$SID", "text": "", "keys": [""]}, "is not a key name"),
    ("terminal_resize", {"sessionId": "$SID", "rows": 1, "cols": 80}, "argument 'rows'"),
    ("terminal_resize", {"sessionId": "$SID", "rows": 40, "cols": 5000}, "argument 'cols'"),
    ("terminal_resize", {"sessionId": "$FOREIGN", "rows": 40, "cols": 80}, "unknown terminal session"),
    ("terminal_record", {"sessionId": "$SID", "action": "stop"}, "is not recording"),
    ("terminal_record", {"sessionId": "$SID", "action": "start"}, "needs a path"),
    ("terminal_record", {"sessionId": "$SID", "action": "pause"}, "argument 'action'"),
    ("terminal_record", {"sessionId": "$SID", "action": "start", "path": "/no/such/dir/x.cast"},
     "must be a plain relative path"),
    ("terminal_record", {"sessionId": "$SID", "action": "start", "path": "no/such/dir/x.cast"},
     "is not a directory inside"),
    ("terminal_launch", {}, "unknown tool 'terminal_launch'"),
    ("terminal_list", ["not", "a", "dict"], "arguments must be a JSON object"),
    # A value quoted back is cut, with its length said: the message goes into a model's context.
    ("terminal_open", {"type": "z" * 100_000}, "unknown terminal type 'zzz"),
    ("terminal_open", {"type": "shell", "cwd": "/no/" + "d" * 100_000}, "(100004 characters) is not an existing"),
    ("terminal_send", {"sessionId": "$SID", "text": "", "keys": ["k" * 100_000]}, "(100000 characters): use a"),
    ("terminal_send", {"sessionId": "$SID", "text": "", "keys": ["C-" + "k" * 100_000]}, "(100002 characters)"),
    ("terminal_send", {"sessionId": "$SID", "text": "ls", "a" * 100_000: 1}, "unknown argument 'aaa"),
    ("terminal_send", {"sessionId": "$SID", "text": "ls", **{f"extra{i}": 1 for i in range(10_000)}},
     "unknown argument 'extra4'; and 9995 more problems"),
    ("terminal_signal", {"sessionId": "$SID", "signal": "S" * 100_000}, "argument 'signal'"),
    ("terminal_record", {"sessionId": "$SID", "action": "start", "path": "/" + "p" * 100_000},
     "(100001 characters) must be a plain relative path"),
    ("t" * 100_000, {}, "(100000 characters): the tools are"),
]


@pytest.fixture(scope="module")
def world():
    tools = TerminalTools()
    me, other = Agent("a"), Agent("a")
    ids = {"$SID": tools.call("terminal_open", {"type": "shell", "name": "main"}, agent=me).session_id,
           "$FOREIGN": tools.call("terminal_open", {"type": "shell"}, agent=other).session_id}
    closed = tools.call("terminal_open", {"type": "shell"}, agent=me).session_id
    tools.call("terminal_close", {"sessionId": closed}, agent=me)
    ids["$CLOSED"] = closed
    ids["$EXITED"] = tools.call("terminal_open", {"type": "shell"}, agent=me).session_id
    tools.call("terminal_send", {"sessionId": ids["$EXITED"], "text": "exit 2"}, agent=me)
    ids["$BUSY"] = tools.call("terminal_open", {"type": "shell"}, agent=me).session_id
    # (running all along: with the default idle window, 3 s, a job ended inferred_idle in the middle of a test
    # on a starved host, where the module's tests took longer than that - the test's state before and after
    # differed)
    running = {"text": "sleep 1000", "run_in_background": True, "idle": 3600, "timeout": 3600}
    ids["$JOB"] = tools.call("terminal_send", {"sessionId": ids["$BUSY"], **running}, agent=me).job_id
    ids["$FOREIGN_JOB"] = tools.call("terminal_send", {"sessionId": ids["$FOREIGN"], **running}, agent=other).job_id
    for owner, sid in ((me, ids["$BUSY"]), (other, ids["$FOREIGN"])):
        session = tools.manager.loop_thread.call(tools.manager.session, owner, sid)
        wait_for(lambda: session.foreground_pgid() not in (0, session.pid))
        # steady state: the jobs' waits watch their sleep for exit (a pidfd each) before any test runs
        wait_for(lambda: tools.manager.loop_thread.call(lambda: bool(session.child._exit_watch)))
    yield tools, me, other, ids
    tools.shutdown()


def state(tools, *agents):
    return [([(s.session_id, s.status) for s in tools.call("terminal_list", {}, agent=a).root],
             [(j.job_id, j.status) for j in tools.jobs.sync.list(a)]) for a in agents]


def substitute(args, ids):
    if not isinstance(args, dict):
        return args
    return {k: ids.get(v, v) if isinstance(v, str) else v for k, v in args.items()}


def test_corpus_is_large_enough():
    assert len(TOOL_CASES) + len(MAGIC_CASES) + len(CONFIG_CASES) >= 60


@pytest.mark.parametrize("tool,args,message", TOOL_CASES,
                         ids=[f"{i}-{c[0][:20]}" for i, c in enumerate(TOOL_CASES)])
def test_tool_call_is_refused_cleanly(world, tool, args, message):
    tools, me, other, ids = world
    before = state(tools, me, other)
    with pytest.raises(TerminalError) as err:
        tools.call(tool, substitute(args, ids), agent=me)
    text = str(err.value)
    assert message in text, text
    assert "\n" not in text and len(text) < 600  # one line, readable
    assert state(tools, me, other) == before
    as_text = tools.call_text(tool, substitute(args, ids), agent=me)
    assert as_text.startswith("[error]\n") and message in as_text
    assert state(tools, me, other) == before


@pytest.mark.parametrize("agent", [None, "a", 42])
def test_calls_without_an_agent_object(world, agent):
    tools, me, other, ids = world
    before = state(tools, me, other)
    with pytest.raises(TerminalError, match="initiating agent|must be an Agent"):
        tools.call("terminal_list", {}, agent=agent)
    assert state(tools, me, other) == before


CONFIG_CASES = [
    ({"maxResultBytes": 0}, "maxResultBytes must be a safe integer >= 64"),
    ({"maxResultBytes": -1}, "maxResultBytes must be a safe integer >= 64"),
    ({"maxResultBytes": 2**60}, "maxResultBytes must be a safe integer >= 64"),
    ({"maxResultBytes": 64.5}, "maxResultBytes"),
    ({"enableRunInBackground": 1}, "enableRunInBackground must be true or false"),
    ({"enable_background": True}, "unknown config key"),
]


@pytest.mark.parametrize("config,message", CONFIG_CASES)
def test_bad_config_is_refused(config, message):
    with pytest.raises(TerminalError, match=message):
        TerminalTools(config=config)


MAGIC_CASES = [
    ("term_send", "--bogus echo", "unknown option --bogus"),
    ("term_send", "-s nosuch echo", "no terminal session with id or name 'nosuch'"),
    ("term_send", "--timeout abc echo", "argument --timeout"),
    ("term_send", "--timeout", "needs a value"),
    ("term_send", "--agent undefined_var echo", "holding an Agent object"),
    ("term_send", "--timeout -1 echo", "argument 'timeout'"),
    ("term_send", "--timeout 7200 echo", "argument 'timeout'"),
    ("term_signal", "FOO", "invalid signal 'FOO'"),
    ("term_signal", "KILL", "use terminal_close"),
    ("term_open", "zsh", "unknown terminal type 'zsh'"),
    ("term_open", "--cwd /no/such/dir", "not an existing directory"),
    ("term_open", "--name main", "already have a terminal session named 'main'"),
    ("term_read", "--count x", "argument --count"),
    ("term_read", "--count 0", "argument 'count'"),
    ("term_close", "-s nosuch", "no terminal session with id or name 'nosuch'"),
    ("job_kill", "j-0000000000000000", "unknown job"),
    ("job_output", "j-0000000000000000", "unknown job"),
]


@pytest.fixture
def magic_world(ip):
    ip.run_line_magic("term_open", "--name main")
    yield ip, loaded_magics(ip)


@pytest.mark.parametrize("magic,line,message", MAGIC_CASES, ids=[f"{m} {l}" for m, l, _ in MAGIC_CASES])
def test_magic_errors_are_one_usage_error_line(magic_world, magic, line, message):
    ip, magics = magic_world
    before = (ip.run_line_magic("term_list", "").text, magics.tools.jobs.sync.list(magics.owner))
    with pytest.raises(UsageError) as err:
        ip.run_line_magic(magic, line)
    assert message in str(err.value)
    assert (ip.run_line_magic("term_list", "").text, magics.tools.jobs.sync.list(magics.owner)) == before


def test_bad_config_magic_keeps_the_old_value(magic_world):
    ip, magics = magic_world
    for bad in ("1", "-5", "'big'", "2**60"):
        ip.run_line_magic("config", f"TerminalMagics.max_result_bytes = {bad}")
        assert magics.max_result_bytes == 262144 and magics.tools.max_result_bytes == 262144
