"""The python session's start-up file (``PYTHONSTARTUP``), the REPL's counterpart of ``shell_rc.bash``.

* The REPL takes the terminal in a process group of its own, as a shell's job control would: under the
  sandbox's pid namespace it shares its group with ``bwrap``, and a Ctrl-C (or an interrupt) killed
  ``bwrap`` and the session with it instead of raising ``KeyboardInterrupt``.  Run directly it already
  leads its own group (as the terminal's session leader, it cannot move).
* Sent text is typed into GNU readline, where a TAB asks for completion (``'a\\tb'`` became ``'ab'``, with
  a bell): here TAB inserts itself.  site's interactive hook, which would bind TAB to completion again and
  write the user's ``~/.python_history``, is not run.

Importing this module does nothing.
"""
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

    _dsh_terminal_setup()
    del _dsh_terminal_setup
