# The python session's start-up file (PYTHONSTARTUP); the shell session names it too, for every python started
# in it - of whatever version, so every Python reads this file, 2.7's grammar included (no annotations, no
# f-strings here).  On Python 3.7 and later it runs the session's REPL set-up, python_rc.py beside it; an older
# python keeps its plain REPL (python_rc.py greeted every python 2.7-3.8 started in a shell with a traceback).
# Python names this file __file__ in the REPL's namespace for as long as it runs - the whole session, as
# python_rc.py runs the REPL itself: it is taken out, as a plain REPL has no __file__.
# Importing this module does nothing.
if __name__ == "__main__":
    def _dsh_terminal_startup():
        import os
        import sys
        here = os.path.dirname(os.path.abspath(globals().pop("__file__", "")))
        if sys.version_info < (3, 7):
            return compile("", "<startup>", "exec")
        path = os.path.join(here, "python_rc.py")
        with open(path) as source:
            return compile(source.read(), path, "exec", dont_inherit=True)

    exec(globals().pop("_dsh_terminal_startup")())
