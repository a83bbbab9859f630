"""The python session's REPL set-up, the counterpart of ``shell_rc.bash``: run by its start-up file
(``PYTHONSTARTUP``, ``python_startup.py``) on Python 3.7 and later - the shell session names that file too, for
the ``python3`` an agent starts in it, whatever its version.

* The REPL takes the terminal in a process group of its own, as a shell's job control would: under the
  sandbox's pid namespace it shares its group with ``bwrap``, and a Ctrl-C (or an interrupt) killed
  ``bwrap`` and the session with it instead of raising ``KeyboardInterrupt``.  Run directly it already
  leads its own group (as the terminal's session leader, it cannot move).
* Sent text is typed into GNU readline, where a TAB asks for completion (``'a\\tb'`` became ``'ab'``, with
  a bell): here TAB inserts itself.  site's interactive hook, which would bind TAB to completion again and
  write the user's ``~/.python_history``, is not run.
* Code sent as a block runs as a block.  The interactive grammar is not a file's: a blank line ends a block
  (a class whose methods are separated by blank lines broke apart), and a statement after a block needs a
  blank line first (``SyntaxError``).  The REPL here is :class:`code.InteractiveConsole` with readline's
  bracketed paste on at its own prompts (not while user code calls ``input()``), so the session's sender
  pastes indented text (see ``SendRequest.wants_paste``) and the console gets it whole: it is compiled as
  a file would be and its statements run one by one as typed ones do (an expression's value is shown),
  stopping at the first exception.  Typed lines keep the REPL's rules.
* At each of its prompts the REPL prints the marker the shell prints at its own (OSC 133;D, no status, a
  key drawn here): the session knows its program is back at its prompt, and puts the main screen back if
  a program left the alternate screen on (a curses program killed in ``os.system``: every later result was
  a snapshot of that screen, and nothing more went into the line history).

Importing this module does nothing.
"""
from __future__ import annotations  # (read by pythons older than the package's own: 3.7 on)

if __name__ == "__main__":
    def _dsh_terminal_setup() -> None:
        import os
        import signal
        import sys
        try:
            os.setpgid(0, 0)
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
            try:
                os.tcsetpgrp(sys.stdin.fileno(), os.getpgrp())
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        except OSError:  # the session leader (no sandbox), or no terminal
            pass
        setattr(sys, "__interactivehook__", lambda: None)
        try:
            import readline
        except ImportError:
            return
        readline.parse_and_bind("tab: tab-insert")

    def _dsh_terminal_console() -> None:
        import __future__
        import ast
        import code
        import secrets
        import sys

        try:
            import readline
        except ImportError:
            readline = None  # type: ignore[assignment]
        future_flags = 0
        for name in __future__.all_feature_names:
            future_flags |= getattr(__future__, name).compiler_flag
        # (in a closure, not a global: code the REPL runs does not see it by accident)
        marker = f"\x1b]133;D;;{secrets.randbits(62)}\x07"

        def at_prompt(prompt: str, invisible: tuple[str, str]) -> str:
            """The prompt to pass to input(), after what the code run before left unflushed: the marker in
            front of ``prompt``, so the terminal gets both in one write (written on its own, the marker woke
            the session's reader once more on every round trip).  ``invisible`` brackets it for readline, which
            counts what it brackets as taking no room.  Where input() would not write to the terminal (code
            left ``sys.stdout`` replaced), the marker is written to the terminal itself."""
            terminal = sys.__stdout__
            for stream in (sys.stdout, terminal):
                try:
                    if stream is not None:
                        stream.flush()
                except (AttributeError, OSError, ValueError):
                    pass
            if terminal is not None and sys.stdout is terminal:
                return f"{invisible[0]}{marker}{invisible[1]}{prompt}"
            try:
                if terminal is not None:
                    terminal.write(marker)
                    terminal.flush()
            except (OSError, ValueError):  # (no terminal to write to: no marker)
                pass
            return prompt

        class Console(code.InteractiveConsole):
            """The REPL, with blocks (text with line breaks in one input: a paste) run whole."""

            def raw_input(self, prompt: str = "") -> str:
                if readline is None:
                    return input(at_prompt(prompt, ("", "")))
                readline.parse_and_bind("set enable-bracketed-paste on")
                # (which turns the active region on too: a paste would be drawn in reverse video, then drawn
                # again plain over it - a notebook cell, which does not move the cursor, showed it twice)
                readline.parse_and_bind("set enable-active-region off")
                try:
                    # (the paste mode readline turned on is said again after the marker, which tells the session
                    # its program is at a prompt that pastes nothing - true of our shell's)
                    return input(at_prompt(prompt, ("\x01", "\x1b[?2004h\x02")))
                finally:
                    readline.parse_and_bind("set enable-bracketed-paste off")

            def push(self, line: str) -> bool:
                if "\n" not in line:
                    return self.push_line(line)
                source = "\n".join([*self.buffer, line])
                try:
                    compiled = self.compile(source, self.filename, "exec")
                except (OverflowError, SyntaxError, ValueError):
                    self.resetbuffer()
                    self.showsyntaxerror(self.filename)
                    return False
                if compiled is None:  # more to come (an open bracket, a block with no body yet)
                    self.buffer.append(line)
                    return True
                self.resetbuffer()
                self.run_block(source)
                return False

            def push_line(self, line: str) -> bool:
                """A typed line, by the REPL's rules.  A complete statement on its own (most lines) is
                compiled once, as the C REPL does; codeop's check for more to come compiles it up to three
                times, under a warnings filter - a tenth of a millisecond on every line."""
                if not self.buffer:
                    try:
                        statement = self.compile.compiler(line, self.filename, "single")
                    except (OverflowError, SyntaxError, ValueError):
                        pass  # incomplete, or an error: codeop tells which
                    else:
                        self.runcode(statement)
                        return False
                return super().push(line)

            def run_block(self, source: str) -> None:
                """Each top-level statement of ``source`` as the REPL runs a typed one; the first exception
                ends the block."""
                compiler = self.compile.compiler
                tree = compile(source, self.filename, "exec", ast.PyCF_ONLY_AST | (compiler.flags & future_flags),
                               dont_inherit=True)
                for node in tree.body:
                    statement = compile(ast.Interactive([node]), self.filename, "single",
                                        compiler.flags & future_flags, dont_inherit=True)
                    compiler.flags |= statement.co_flags & future_flags  # (a __future__ import stays on)
                    try:
                        exec(statement, self.locals)
                    except SystemExit:
                        raise
                    except BaseException:
                        self.showtraceback()
                        return

        Console(locals=sys.modules["__main__"].__dict__, filename="<stdin>").interact(banner="", exitmsg="")
        raise SystemExit(0)

    def _dsh_terminal_plain_repl() -> bool:
        """Whether this start-up file runs for CPython's basic REPL (no script, no ``-m``; not IPython or
        another shell that reads ``PYTHONSTARTUP``, and not 3.13's new REPL, which pastes well itself)."""
        import os
        import sys
        return sys.argv[:1] == [""] and "IPython" not in sys.modules \
            and (sys.version_info < (3, 13) or bool(os.environ.get("PYTHON_BASIC_REPL")))

    # (each taken out of the namespace the REPL shares before it runs: a plain REPL has none of them)
    globals().pop("_dsh_terminal_setup")()
    if globals().pop("_dsh_terminal_plain_repl")():
        globals().pop("_dsh_terminal_console")()
    globals().pop("_dsh_terminal_console", None)
