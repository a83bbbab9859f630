"""The python session's start-up file (``PYTHONSTARTUP``), the REPL's counterpart of ``shell_rc.bash``.

Sent text is typed into GNU readline, where a TAB asks for completion (``'a\\tb'`` became ``'ab'``, with
a bell): here TAB inserts itself.  site's interactive hook, which would bind TAB to completion again and
write the user's ``~/.python_history``, is not run.  Importing this module does nothing.
"""
if __name__ == "__main__":
    def _dsh_terminal_setup() -> None:
        import sys
        setattr(sys, "__interactivehook__", lambda: None)
        try:
            import readline
        except ImportError:
            return
        readline.parse_and_bind("tab: tab-insert")

    _dsh_terminal_setup()
    del _dsh_terminal_setup
