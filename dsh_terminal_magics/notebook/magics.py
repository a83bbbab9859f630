"""Notebook layer: the ``%term_*`` and ``%job_*`` magics.

The magics act as the notebook's own owner (one :class:`Agent` per loaded
extension); ``--agent NAME`` acts as the ``Agent`` object held in the user
variable ``NAME`` (authority by object, never by a string).  Everything goes
through :class:`~dsh_terminal_magics.TerminalTools`: the same validation, policies,
observers and limits as a tool call.
Errors are one short ``UsageError`` line, which still fails an executed
notebook.
"""
from __future__ import annotations

import getpass
import re
import shlex
import sys
import time
from typing import Any, Callable

from IPython.core.error import StdinNotImplementedError, UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Bool, Dict, Float, Int, TraitError, observe, validate

from ..errors import TerminalError
from ..owners import Agent
from ..tools import TerminalTools, result_text, shutdown_all
from ..tools.config import environment_policy
from ..tools.render import ECHO_OFF_NOTE, not_ended_note, unread_note, unsent_note
from ..vocabulary import max_result_bytes_problem, signal_name, wait_seconds_problem
from .display import TermResult, footer_html, footer_text, visible_controls

#: A word of a magic's line, as a shell splits it: quoted parts keep their spaces (``-s "build server"``); a
#: quote left open is part of a plain word.
_TOKEN = re.compile(r"""\s*((?:[^\s"']+|"[^"]*"|'[^']*')+|\S+)""")
#: Seconds between polls of ``%job_output --wait``.
JOB_POLL_INTERVAL = 0.1


def option_arity(parser: Any) -> dict[str, bool]:
    """Each option string of ``parser`` (an argparse parser), and whether it takes a value."""
    return {opt: action.nargs != 0 for action in parser._actions for opt in action.option_strings}


def split_options(line: str, parser: Any) -> tuple[list[str], str]:
    """Split a leading options prefix from the raw text that follows it.

    Options end at ``--`` or at the first word that is not an option; the
    rest of the line is returned exactly as typed.  An option's value may be
    quoted as in a shell (``-s "build server"``, ``--session='build server'``);
    the options come back as argparse takes them (``--timeout=3``: two words,
    quotes gone).
    """
    takes_value = option_arity(parser)
    tokens: list[str] = []
    pos = 0
    while True:
        match = _TOKEN.match(line, pos)
        if match is None:
            return tokens, ""
        token = match.group(1)
        if token == "--":
            rest = line[match.end():]
            return tokens, rest[1:] if rest[:1] in (" ", "\t") else rest
        if not token.startswith("-") or token == "-":
            return tokens, line[match.start(1):]
        name, equals, inline = token.partition("=")
        if name not in takes_value:
            known = ", ".join(sorted(o for o in takes_value if o.startswith("--")))
            raise UsageError(f"unknown option {name}: the options are {known}; put `--` before text "
                             "that starts with '-'")
        tokens += [name, _unquoted(name, inline)] if equals else [token]
        pos = match.end()
        if takes_value[name] and not equals:
            value = _TOKEN.match(line, pos)
            if value is None:
                raise UsageError(f"option {name} needs a value")
            tokens.append(_unquoted(name, value.group(1)))
            pos = value.end()


def _unquoted(option: str, word: str) -> str:
    """An option's value as a shell reads ``word`` (its quotes gone)."""
    try:
        parts = shlex.split(word)
    except ValueError:
        parts = []
    if len(parts) != 1:
        raise UsageError(f"option {option}: its value {word} is not one word (a quote left open?): quote a value "
                         "with spaces whole, e.g. -s \"build server\"")
    return parts[0]


#: One key of ``--keys``: a comma itself (vim's leader key; after modifiers too: ``M-,``), or a name up to the
#: next comma.
_KEY = re.compile(r"(?:^|,)((?:[CSM]-)*(?:,|[^,]+))")


def key_list(keys: str) -> tuple[str, ...]:
    """The keys ``--keys`` names, comma-separated; a comma key is written as itself (``Esc,,,w``: Esc, a comma,
    w)."""
    return tuple(_KEY.findall(keys))


def config_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is not acceptable for config option ``name`` (None when it is)."""
    if name == "max_result_bytes":
        problem = max_result_bytes_problem(value)
        return problem.replace("maxResultBytes", "max_result_bytes") if problem else None
    if name in ("timeout", "idle"):
        return wait_seconds_problem(name, value)
    if name == "shell_environment_policy":
        try:
            environment_policy(value) if value else None
        except TerminalError as exc:
            return str(exc)
        return None
    if name in ("scrollback_lines", "stream_limit"):
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 100
        return None if ok else f"{name} must be an integer >= 100, got {value!r}"
    return None


def _drop_invalid_config(shell: Any) -> None:
    """Forget rejected ``%config TerminalMagics.*`` values kept in the shell's config."""
    config = getattr(shell, "config", None)
    if not config or "TerminalMagics" not in config:
        return
    section = config["TerminalMagics"]
    for key in list(section):
        if config_problem(key, section[key]):
            del section[key]


#: Options every magic shares, declared once (as IPython's ``script_args``).
agent_option = argument("--agent", default=None, help="Act as the Agent held in this variable.")
session_option = argument("-s", "--session", default=None,
                          help="Session id or name (default: the newest running one).")


class CellStream:
    """Writes streamed output into the cell, up to ``limit`` bytes (then one notice)."""

    def __init__(self, write: Callable[[str], None], limit: int) -> None:
        self._write = write
        self._limit = limit
        self.written = 0
        self._notice_shown = False

    def write(self, text: str) -> None:
        if self.written + len(text) > self._limit:
            if not self._notice_shown:
                self._notice_shown = True
                self._write(f"\n[more output not shown here (over {self._limit} bytes): read it with %term_read]\n")
            return
        self.written += len(text)
        self._write(text)


#: Options that ask a magic for its help instead of running it.
HELP_OPTIONS = ("-h", "--help")


def asks_for_help(line: str, text_parser: Any = None) -> bool:
    """Whether ``line`` asks for help (``-h`` or ``--help`` before ``--``); for a magic whose options are
    followed by text it sends (``text_parser``: its parser), only among those options."""
    takes_value = option_arity(text_parser) if text_parser is not None else {}
    tokens = iter(_TOKEN.findall(line))
    for token in tokens:
        if token == "--":
            return False
        if token in HELP_OPTIONS:
            return True
        if text_parser is not None:
            if not token.startswith("-"):
                return False
            if takes_value.get(token.split("=", 1)[0]) and "=" not in token:
                next(tokens, None)  # (the option's value)
    return False


def parse_options(magic: Any, line: str | list[str]) -> Any:
    """``line`` (or its words, as :func:`split_options` gives them) parsed by ``magic``'s options
    (``magic_arguments``); a wrong option says where the right ones are.  Words are split as a shell splits
    them, quotes removed: IPython's own splitting kept them (``--name "build server"`` named a session
    ``"build server"``, quotes included, and split ``--name="a b"`` inside them)."""
    name = magic.__name__
    try:
        words = line if isinstance(line, list) else shlex.split(line)
    except ValueError:
        raise UsageError(f"%{name}: a quote is left open in {line!r}: close it, or quote a value with spaces "
                         "whole, e.g. --name \"build server\"") from None
    try:
        return magic.parser.parse_args(words)
    except UsageError as exc:
        raise UsageError(f"%{name}: {exc}; see %{name} --help for its options") from None


def _usage_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """Turn every TerminalError into one short UsageError line; ``-h``/``--help`` prints the magic's help (what
    ``%magic?`` shows) instead of running it."""
    sends_text = method.__name__ == "term_send"

    def wrapper(self: "TerminalMagics", line: str = "", *args: Any, **kwargs: Any) -> Any:
        if asks_for_help(line, wrapper.parser if sends_text else None):  # type: ignore[attr-defined]
            print(wrapper.__doc__)
            return None
        try:
            return method(self, line, *args, **kwargs)
        except TerminalError as exc:
            raise UsageError(str(exc)) from None
    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    wrapper.__dict__.update(method.__dict__)
    return wrapper


@magics_class
class TerminalMagics(Magics):
    """Persistent terminal sessions in the notebook (``%load_ext dsh_terminal_magics``)."""

    max_result_bytes = Int(262144, help="Most UTF-8 bytes of any tool result text (a safe integer >= 64).").tag(
        config=True)
    enable_run_in_background = Bool(True, help="Allow --bg sends (background jobs).").tag(config=True)
    timeout = Float(30.0, help="Default seconds a foreground send waits at most.").tag(config=True)
    idle = Float(3.0, help="Default seconds of silence after which a send reports inferred_idle.").tag(
        config=True)
    scrollback_lines = Int(10_000, help="Lines of output each new session keeps.").tag(config=True)
    stream_limit = Int(1024 * 1024, help="Most bytes of output one send streams into a cell.").tag(config=True)
    shell_environment_policy = Dict(
        {}, help="Environment of the notebook's own sessions, keys as the tools' shellEnvironmentPolicy (inherit "
                 "all|core|none, exclude, includeOnly, set, ignoreDefaultExcludes); empty: inherit everything, "
                 "like a JupyterLab terminal.").tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        _drop_invalid_config(shell)
        super().__init__(shell=shell, **kwargs)
        self.owner = Agent("notebook")
        self.tools = TerminalTools(config=self._tools_config(), user=self.owner)
        self.tools.set_session_defaults(scrollback_lines=self.scrollback_lines)
        self.tools.set_user_environment(self.shell_environment_policy)
        self._opened: dict[Agent, list[str]] = {}
        self._last_job: dict[Agent, str] = {}
        self.viewports: list[Any] = []
        #: The MCP server started by ``%term_mcp start`` (an ``HttpServer``), if any.
        self.mcp_server: Any = None

    def _tools_config(self) -> dict[str, Any]:
        return {"maxResultBytes": self.max_result_bytes, "enableRunInBackground": self.enable_run_in_background}

    # -- config ------------------------------------------------------------------------------
    @validate("max_result_bytes", "timeout", "idle", "scrollback_lines", "stream_limit")
    def _check_config(self, proposal: Any) -> Any:
        problem = config_problem(proposal["trait"].name, proposal["value"])
        if problem:
            raise TraitError(problem + "; the old value stays")
        return proposal["value"]

    @observe("max_result_bytes", "enable_run_in_background")
    def _apply_tools_config(self, change: Any) -> None:
        if hasattr(self, "tools"):
            self.tools.configure(self._tools_config())

    @validate("shell_environment_policy")
    def _check_environment(self, proposal: Any) -> Any:
        try:
            environment_policy(proposal["value"]) if proposal["value"] else None
        except TerminalError as exc:
            raise TraitError(f"{exc}; the old value stays") from None
        return proposal["value"]

    @observe("shell_environment_policy")
    def _apply_environment(self, change: Any) -> None:
        if hasattr(self, "tools"):
            self.tools.set_user_environment(change["new"])

    @observe("scrollback_lines")
    def _apply_scrollback(self, change: Any) -> None:
        if hasattr(self, "tools"):
            self.tools.set_session_defaults(scrollback_lines=change["new"])

    # -- helpers --------------------------------------------------------------------------------
    def _owner(self, agent_var: str | None) -> Agent:
        if agent_var is None:
            return self.owner
        value = self.shell.user_ns.get(agent_var) if self.shell is not None else None
        if not isinstance(value, Agent):
            raise UsageError(f"--agent {agent_var}: no variable {agent_var!r} holding an Agent object; "
                             f"create one with {agent_var} = Agent('name') (authority is the object, "
                             "never a name)")
        return value

    def _call(self, name: str, args: dict[str, Any], owner: Agent) -> Any:
        return self.tools.call(name, args, agent=owner)

    def _session(self, selector: str | None, owner: Agent) -> str:
        sessions = self._call("terminal_list", {}, owner).root
        if selector is not None:
            for s in sessions:
                if s.session_id == selector or s.name == selector:
                    return s.session_id
            raise UsageError(f"no terminal session with id or name {selector!r}: see %term_list")
        running = {s.session_id for s in sessions if s.status == "running"}
        for sid in reversed(self._opened.get(owner, [])):
            if sid in running:
                return sid
        for entry in reversed(sessions):  # opened elsewhere (an MCP client, a tool call): the newest
            if entry.session_id in running:
                return entry.session_id
        raise UsageError("no open terminal session: open one with %term_open")

    def _write(self, text: str) -> None:
        """Write into the cell.  In a kernel, its stdout sends what was written within its flush interval
        (0.2 s), so the prompt, the output and the closing newline of a quick send go out as one message
        (a flush per write made three, each a round through the kernel's IO thread and the frontend)."""
        sys.stdout.write(text)
        if not self._in_kernel():
            sys.stdout.flush()

    def _in_kernel(self) -> bool:
        return getattr(self.shell, "kernel", None) is not None

    # -- magics ---------------------------------------------------------------------------------
    @magic_arguments()
    @argument("type", nargs="?", default="shell", help="Backend type: shell (default) or python.")
    @argument("--name", "-n", default=None, help="Owner-local name for -s NAME.")
    @argument("--cwd", default=None, help="Working directory (default: the notebook's directory).")
    @agent_option
    @line_magic
    @_usage_errors
    def term_open(self, line: str) -> TermResult:
        """Open a persistent terminal session; it becomes the default session.

        Examples::

            In [1]: %term_open
            In [2]: %term_open python --name repl
            In [3]: %term_open --cwd /tmp --name scratch
        """
        args = parse_options(self.term_open, line)
        owner = self._owner(args.agent)
        call = {"type": args.type}
        if args.name is not None:
            call["name"] = args.name
        if args.cwd is not None:
            call["cwd"] = args.cwd
        res = self._call("terminal_open", call, owner)
        self._opened.setdefault(owner, []).append(res.session_id)
        name = f" {res.name!r}" if res.name else ""
        return TermResult(res, f"opened {res.type} session{name} {res.session_id} (pid {res.pid})")

    @magic_arguments()
    @session_option
    @argument("--no-submit", action="store_true", help="Do not press Enter after the text (with --keys, none is "
                                                       "pressed unless named among them).")
    @argument("--timeout", type=float, default=None, help="Most seconds to wait (default: %%config timeout).")
    @argument("--idle", type=float, default=None, help="Seconds of silence that end the wait.")
    @argument("--bg", action="store_true", help="Run as a background job; returns the job id at once.")
    @argument("--lines", action="store_true", help="Cell mode: send line by line, waiting for each prompt.")
    @argument("--keys", default=None, help="Named keys sent after the text, comma-separated (Esc,:,w,q,Enter; a "
                                           "comma key as itself: Esc,,,w); "
                                           "no Enter follows them unless named.")
    @argument("--secret", action="store_true", help="Ask for the text in a password box and send it: it is not "
                                                    "shown, nor kept in the notebook or its history (a password "
                                                    "prompt). Refused while the terminal would show it as typed.")
    @agent_option
    @no_var_expand
    @line_cell_magic
    @_usage_errors
    def term_send(self, line: str, cell: str | None = None) -> TermResult | None:
        """Send text to a terminal session exactly as typed and wait for the program to want input.

        Output streams into the cell; the result shows the wait reason, exit
        code and session status.  Text is never expanded (`$HOME`, `{x}` reach
        the shell unchanged); `--` ends the options.

        Examples::

            In [1]: %term_send ls -la
            In [2]: r = %term_send echo "$HOME  {x}"
            In [3]: %term_send --timeout 5 -- -v
            In [4]: %%term_send --lines
               ...: def f(x):
               ...:     return x * 2
               ...:
               ...: print(f(21))
            In [5]: %term_send --bg make -j2
            In [6]: %term_send --keys Esc,:,w,q,Enter
        """
        tokens, text = split_options(line, self.term_send.parser)
        args = parse_options(self.term_send, tokens)
        if args.secret:
            return self._send_secret(args, text, cell)
        if cell is not None:
            if text.strip():
                raise UsageError("%%term_send: put the text in the cell body, only options on the first line")
            text = cell.replace("\r\n", "\n")  # (one line end each, as a terminal pastes them; the last one too)
            text = text[:-1] if text.endswith("\n") else text
        owner = self._owner(args.agent)
        sid = self._session(args.session, owner)
        keys = key_list(args.keys or "")
        timeout, idle = self._waits(args)
        if args.bg:
            return self._send_background(owner, sid, text, args.no_submit, timeout, idle, keys)
        pieces = text.split("\n") if (args.lines and cell is not None) else [text]
        return self._send_foreground(owner, sid, pieces, args.no_submit, timeout, idle, keys)

    def _send_secret(self, args: Any, text: str, cell: str | None) -> TermResult:
        """``%term_send --secret``: the text from a password box, sent when the terminal would not show it."""
        if text.strip() or cell is not None or args.bg or args.lines or args.keys:
            raise UsageError("%term_send --secret asks for the text in a password box: give no text, cell, "
                             "--bg, --lines or --keys with it")
        owner = self._owner(args.agent)
        sid = self._session(args.session, owner)
        session = self.tools.manager.session(owner, sid)
        if self.tools.manager.loop_thread.call(session.shows_what_is_typed):
            raise UsageError(f"session {sid} would show the secret as it is typed (no password prompt is waiting: "
                             "the terminal echoes, or the shell is at its prompt); send it once the program asks")
        try:
            secret = getpass.getpass("text for the terminal (not shown, not kept): ")
        except StdinNotImplementedError:
            raise UsageError("%term_send --secret asks in a password box, which this frontend does not offer "
                             "(it runs cells without input: nbval, a headless run)") from None
        return self._send_foreground(owner, sid, [secret], args.no_submit, *self._waits(args), secret=True)

    def _waits(self, args: Any) -> tuple[float, float]:
        """A send's ``--timeout`` and ``--idle``, or the ``%config`` defaults."""
        return (args.timeout if args.timeout is not None else self.timeout,
                args.idle if args.idle is not None else self.idle)

    def _send_foreground(self, owner: Agent, sid: str, pieces: list[str], no_submit: bool, timeout: float,
                         idle: float, keys: tuple[str, ...] = (), secret: bool = False) -> TermResult:
        """Each piece is one ``terminal_send`` through the tools (policies, observers and limits included),
        its output streamed into the cell as it arrives.  Without ``no_submit`` a piece gets the tool's default
        Enter: after the text, not after named keys."""
        stream = CellStream(self._write, self.stream_limit)
        res: Any = None
        for index, piece in enumerate(pieces):
            call: dict[str, Any] = {"sessionId": sid, "text": piece, "timeout": timeout, "idle": idle}
            if no_submit:
                call["submit"] = False
            if keys and index == len(pieces) - 1:
                call["keys"] = list(keys)
            res = self.tools.call("terminal_send", call, agent=owner, on_output=stream.write,
                                  show_prompt=index == 0, secret=secret)
            if not hasattr(res, "wait_reason"):  # a policy supplied the result
                return TermResult(res, str(self.tools.render(res)))
            if res.interrupted or res.wait_reason in ("timeout", "session_exit"):
                break
        text = footer_text(res.wait_reason, res.exit_code, res.session_status, res.interrupted)
        if res.unsent:
            text += f" [{unsent_note(res.unsent, res.text_cut_by)}]"
        if res.unread:
            text += f" [{unread_note(res.unread)}]"
        if res.echo_off:
            text += f" [{ECHO_OFF_NOTE}]"
        if stream.written or res.viewport:
            self._write("\n")
        if res.screen_text is not None:  # a full-screen program: show what its screen looks like now
            self._write(res.screen_text + "\n")
            text += f" [screen {res.screen.rows}x{res.screen.cols}]"
        return TermResult(res, text, footer_html(text, res.wait_reason))

    def _send_background(self, owner: Agent, sid: str, text: str, no_submit: bool, timeout: float,
                         idle: float, keys: tuple[str, ...] = ()) -> TermResult:
        call: dict[str, Any] = {"sessionId": sid, "text": text, "timeout": timeout, "idle": idle,
                                "run_in_background": True}
        if no_submit:
            call["submit"] = False
        if keys:
            call["keys"] = list(keys)
        res = self._call("terminal_send", call, owner)
        self._last_job[owner] = res.job_id
        if self._in_kernel():
            self._show_viewport(owner, sid, title=f"job {res.job_id}", job_id=res.job_id)
        return TermResult(res, f"started job {res.job_id} on {sid}: follow it with %job_output, "
                               "stop it with %job_kill")

    def _show_viewport(self, owner: Agent, sid: str, title: str = "", job_id: str | None = None) -> Any:
        from IPython.display import display

        from .viewport import TerminalViewport

        view = TerminalViewport(self.tools, owner, sid, title=title, job_id=job_id)
        self.viewports.append(view)
        display(view)
        return view

    @magic_arguments()
    @session_option
    @argument("--offset", type=int, default=0, help="Lines to skip back from the newest (default 0).")
    @argument("--count", type=int, default=40, help="Lines to show (default 40).")
    @agent_option
    @line_magic
    @_usage_errors
    def term_read(self, line: str) -> TermResult:
        """Show a page of the session's retained output, without sending anything.

        Examples::

            In [1]: %term_read
            In [2]: %term_read --offset 100 --count 20
        """
        args = parse_options(self.term_read, line)
        owner = self._owner(args.agent)
        sid = self._session(args.session, owner)
        res = self._call("terminal_read", {"sessionId": sid, "offset": args.offset, "count": args.count}, owner)
        return TermResult(res, result_text(res, self.tools.max_result_bytes))

    @magic_arguments()
    @argument("signal", help="SIGINT, SIGTERM, SIGKILL, SIGTSTP or SIGHUP (the SIG prefix is optional).")
    @session_option
    @agent_option
    @line_magic
    @_usage_errors
    def term_signal(self, line: str) -> TermResult:
        """Send a signal to the foreground process group of the session's terminal.

        Examples::

            In [1]: %term_signal INT
            In [2]: %term_signal SIGTERM -s build
        """
        args = parse_options(self.term_signal, line)
        owner = self._owner(args.agent)
        name = signal_name(args.signal)
        sid = self._session(args.session, owner)
        res = self._call("terminal_signal", {"sessionId": sid, "signal": name}, owner)
        return TermResult(res, f"delivered {name} to process group {res.target_pgid}")

    @magic_arguments()
    @session_option
    @argument("--all", action="store_true", help="Close every session of this owner.")
    @agent_option
    @line_magic
    @_usage_errors
    def term_close(self, line: str) -> TermResult | None:
        """Close a session and wait until its whole process tree is gone.

        Examples::

            In [1]: %term_close
            In [2]: %term_close -s repl
            In [3]: %term_close --all
        """
        args = parse_options(self.term_close, line)
        owner = self._owner(args.agent)
        listed = [s.session_id for s in self._call("terminal_list", {}, owner).root]
        if args.all:
            ids = listed
        elif args.session is not None:
            ids = [self._session(args.session, owner)]
        else:
            ids = [sid for sid in self._opened.get(owner, []) if sid in listed][-1:]
            if not ids:
                raise UsageError("no open terminal session to close")
        results = [self._call("terminal_close", {"sessionId": sid}, owner) for sid in ids]
        if not results:
            return None
        text = "\n".join(" - ".join([f"{r.outcome} {r.session_id}", *not_ended_note(r.not_ended)]) for r in results)
        return TermResult(results[-1], text)

    @magic_arguments()
    @agent_option
    @line_magic
    @_usage_errors
    def term_list(self, line: str) -> TermResult:
        """List this notebook's (or --agent's) terminal sessions.

        Examples::

            In [1]: %term_list
        """
        args = parse_options(self.term_list, line)
        res = self._call("terminal_list", {}, self._owner(args.agent))
        return TermResult(res, visible_controls(result_text(res, self.tools.max_result_bytes)))

    @magic_arguments()
    @argument("job", nargs="?", default=None, help="Job id (default: the newest --bg job).")
    @argument("--wait", action="store_true", help="Keep printing new output until the job ends.")
    @agent_option
    @line_magic
    @_usage_errors
    def job_output(self, line: str) -> TermResult:
        """Print a background job's output that no earlier call printed, then its status.

        Examples::

            In [1]: %job_output
            In [2]: %job_output j-0123456789abcdef
            In [3]: %job_output --wait
        """
        args = parse_options(self.job_output, line)
        owner = self._owner(args.agent)
        job = self._job(args.job, owner)
        while True:
            res = self._call("job_output", {"jobId": job}, owner)
            if res.output:
                self._write(res.output if res.output.endswith("\n") else res.output + "\n")
            if not args.wait or (res.status != "running" and not res._more):
                break
            try:
                time.sleep(JOB_POLL_INTERVAL)
            except KeyboardInterrupt:
                break
        status = f"[job {job}: {res.status}" + (f" | {res.detail}" if res.detail else "") + "]"
        if res._more:
            status += " (more output waiting: run %job_output again)"
        return TermResult(res, status)

    def _job(self, job: str | None, owner: Agent) -> str:
        if job is not None:
            return job
        if owner not in self._last_job:
            raise UsageError("no background job yet: start one with %term_send --bg")
        return self._last_job[owner]

    @magic_arguments()
    @argument("job", nargs="?", default=None, help="Job id (default: the newest --bg job).")
    @agent_option
    @line_magic
    @_usage_errors
    def job_kill(self, line: str) -> TermResult:
        """Stop a background job (SIGINT to the session's foreground process group).

        Examples::

            In [1]: %job_kill
        """
        args = parse_options(self.job_kill, line)
        owner = self._owner(args.agent)
        job = self._job(args.job, owner)
        res = self._call("job_kill", {"jobId": job}, owner)
        return TermResult(res, f"job {job}: {res.status}")

    @magic_arguments()
    @agent_option
    @line_magic
    @_usage_errors
    def jobs(self, line: str) -> None:
        """List background jobs with their status.

        Examples::

            In [1]: %jobs
        """
        args = parse_options(self.jobs, line)
        jobs = self.tools.list_jobs(agent=self._owner(args.agent))
        lines = [visible_controls(f"{j.job_id} {j.status} {j.kind} {j.label}") for j in jobs]
        print("\n".join(lines) if lines else "no jobs")

    @magic_arguments()
    @session_option
    @argument("--text", action="store_true", help="Print a plain-text snapshot instead of the live widget.")
    @agent_option
    @line_magic
    @_usage_errors
    def term_view(self, line: str) -> Any:
        """Show a live viewport of the session (ipywidgets), or a text snapshot.

        Examples::

            In [1]: view = %term_view
            In [2]: %term_view --text
        """
        args = parse_options(self.term_view, line)
        owner = self._owner(args.agent)
        sid = self._session(args.session, owner)
        if args.text or not self._in_kernel():
            from .viewport import snapshot_text
            follower = self.tools.follow(sid, agent=owner)
            print(follower.view(snapshot_text))
            return None
        from .viewport import TerminalViewport
        view = TerminalViewport(self.tools, owner, sid)
        self.viewports.append(view)
        return view

    @magic_arguments()
    @argument("rows", type=int, help="Rows (lines).")
    @argument("cols", type=int, help="Columns.")
    @session_option
    @agent_option
    @line_magic
    @_usage_errors
    def term_resize(self, line: str) -> TermResult:
        """Resize the session's terminal; the program receives SIGWINCH.

        Examples::

            In [1]: %term_resize 50 100
        """
        args = parse_options(self.term_resize, line)
        owner = self._owner(args.agent)
        sid = self._session(args.session, owner)
        res = self._call("terminal_resize", {"sessionId": sid, "rows": args.rows, "cols": args.cols}, owner)
        return TermResult(res, f"resized {sid} to {res.rows}x{res.cols}")

    @magic_arguments()
    @argument("action", choices=["start", "stop"], help="start or stop recording.")
    @argument("path", nargs="?", default=None, help="The .cast file to write (start).")
    @session_option
    @agent_option
    @line_magic
    @_usage_errors
    def term_record(self, line: str) -> TermResult:
        """Record the session's output, with timings, to an asciinema v2 .cast file.

        Examples::

            In [1]: %term_record start demo.cast
            In [2]: %term_record stop
        """
        args = parse_options(self.term_record, line)
        owner = self._owner(args.agent)
        sid = self._session(args.session, owner)
        call = {"sessionId": sid, "action": args.action}
        if args.path:
            call["path"] = args.path
        res = self._call("terminal_record", call, owner)
        if args.action == "start":
            return TermResult(res, f"recording {sid} to {res.path}")
        return TermResult(res, f"recorded {res.events} events to {res.path}")

    @magic_arguments()
    @argument("path", help="An asciinema v2 .cast file.")
    @argument("--speed", type=float, default=1.0, help="Playback speed (2 = twice as fast).")
    @line_magic
    @_usage_errors
    def term_replay(self, line: str) -> Any:
        """Play a recording back in a viewport (in plain IPython: print its final screen).

        Examples::

            In [1]: %term_replay demo.cast --speed 4
        """
        args = parse_options(self.term_replay, line)
        if not self._in_kernel():
            from .replay import replay_text
            print(replay_text(args.path))
            return None
        from .replay import ReplayViewport
        return ReplayViewport(args.path, speed=args.speed)

    @magic_arguments()
    @argument("action", nargs="?", default="status", choices=["start", "stop", "status"],
              help="start serving, stop, or show the connected clients (default).")
    @argument("--port", type=int, default=0, help="Port to listen on (default 0: a free one).")
    @argument("--host", default="127.0.0.1", help="Address to bind (default loopback).")
    @argument("--token", default="auto", help="Bearer token clients must send (default 'auto': one is made; "
              "'none' serves without one, on loopback only - any user of the machine can reach it).")
    @line_magic
    @_usage_errors
    def term_mcp(self, line: str) -> Any:
        """Serve this kernel's terminal tools over MCP (streamable HTTP) to agents outside the notebook.

        Each connected client is its own Agent; ``server.agents`` lists them, so
        ``%term_view --agent NAME`` (with ``NAME = server.agents[0]``) watches a client's
        terminal live.  Stopping closes every client's sessions.

        Examples::

            In [1]: server = %term_mcp start --port 8765
            In [2]: %term_mcp
            In [3]: %term_mcp stop
        """
        args = parse_options(self.term_mcp, line)
        if args.action == "start":
            return self._start_mcp(args)
        if self.mcp_server is None:
            print("no MCP server running here: start one with %term_mcp start")
            return None
        if args.action == "stop":
            clients = len(self.mcp_server.clients)
            self.mcp_server.stop()
            self.mcp_server = None
            print(f"MCP server stopped; the sessions of {clients} connected client(s) were closed")
            return None
        print(self._mcp_status())
        return None

    def _start_mcp(self, args: Any) -> Any:
        if self.mcp_server is not None:
            print(f"already serving at {self.mcp_server.url}")
            return self.mcp_server
        try:
            from ..mcp import HttpServer
        except ImportError as exc:
            raise UsageError(str(exc)) from None
        from ..mcp.cli import token_option

        server = HttpServer(self.tools, host=args.host, port=args.port, token=token_option(args.token))
        server.start()
        self.mcp_server = server
        print(f"MCP server (streamable HTTP) at {server.url}")
        if server.token:
            print(f"clients send: Authorization: Bearer {server.token}")
        print(server.client_configs())
        return server

    def _mcp_status(self) -> str:
        server = self.mcp_server
        lines = [f"MCP server at {server.url}: {len(server.clients)} client(s)"]
        for index, client in enumerate(list(server.clients.values())):
            sessions = self.tools.call("terminal_list", {}, agent=client.agent).root  # type: ignore[attr-defined]
            lines.append(f"  [{index}] {client.name!r} (agent {client.agent.name!r}): {client.calls} call(s), "
                         f"{len(sessions)} session(s) - watch with "
                         f"a = server.agents[{index}]; %term_view --agent a")
        return "\n".join(lines)

    # -- lifecycle --------------------------------------------------------------------------------
    def close(self) -> None:
        """Close every session and job of every owner these magics created or served."""
        if self.mcp_server is not None:
            self.mcp_server.stop()
            self.mcp_server = None
        for view in self.viewports:
            try:
                view.detach()
            except Exception:
                pass
        self.viewports.clear()
        self.tools.shutdown()


_LOADED: dict[int, TerminalMagics] = {}

#: A line of one of our line magics, with arguments that end in ``?`` (optionally ``r = %term_send ...``).
_QUESTION_LINE = re.compile(r"(?P<indent>[ \t]*)(?P<assign>[A-Za-z_][\w.]*\s*=\s*)?%(?P<name>\w+)[ \t]+"
                            r"(?P<args>\S.*\?)[ \t]*(?P<end>\r?\n?)")


def keep_question_marks(lines: list[str]) -> list[str]:
    """An IPython input transformer (run before IPython's own): a line of our line magics whose text ends in
    ``?`` runs the magic with that text.  IPython reads a line ending in ``word?`` as a request for help on
    ``word``, wherever it is: ``%term_send ls file?`` asked for help on ``file`` ("Object `file` not found")
    and sent nothing.  ``%term_send?`` (no text) is still the magic's help.  A cell magic's cell is left as
    it is (its body is its text), and so is a line after a triple-quoted string (it may be inside it)."""
    if lines and lines[0].lstrip().startswith("%%"):
        return lines
    ours = set(TerminalMagics.magics["line"])
    out: list[str] = []
    quoted = False  # (a line so far held a triple quote)
    for line in lines:
        match = _QUESTION_LINE.fullmatch(line)
        if match is not None and match["name"] in ours and not quoted:
            call = f"get_ipython().run_line_magic({match['name']!r}, {match['args']!r})"
            line = f"{match['indent']}{match['assign'] or ''}{call}{match['end']}"
        out.append(line)
        quoted = quoted or '"""' in line or "'''" in line
    return out


def load_extension(ipython: Any) -> None:
    if id(ipython) in _LOADED:
        return
    magics = TerminalMagics(shell=ipython)
    ipython.register_magics(magics)
    ipython.input_transformers_cleanup.append(keep_question_marks)
    _LOADED[id(ipython)] = magics


def unload_extension(ipython: Any) -> None:
    """Close every session of every owner in this process (SPEC: unloading closes them all) and
    remove the magics."""
    magics = _LOADED.pop(id(ipython), None)
    if magics is None:
        return
    magics.close()
    shutdown_all()
    if keep_question_marks in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.remove(keep_question_marks)
    table = ipython.magics_manager.magics
    for kind, names in type(magics).magics.items():
        for name in names:
            table[kind].pop(name, None)
    ipython.magics_manager.registry.pop(type(magics).__name__, None)
    if magics in getattr(ipython, "configurables", []):
        ipython.configurables.remove(magics)


def loaded_magics(ipython: Any) -> TerminalMagics | None:
    """The loaded :class:`TerminalMagics` of ``ipython``, if any."""
    return _LOADED.get(id(ipython))


__all__ = ["TerminalMagics", "keep_question_marks", "load_extension", "loaded_magics", "split_options",
           "unload_extension"]
