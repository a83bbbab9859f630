"""Persistent, interactive terminal sessions for Jupyter and IPython kernels.

``%load_ext dsh_terminal_magics`` for the magics; :class:`TerminalTools` for
the model-facing tools.
"""
from __future__ import annotations

from typing import Any

from .errors import TerminalError
from .owners import Agent
from .tools import TerminalTools

__all__ = ["Agent", "TerminalError", "TerminalTools", "load_ipython_extension", "unload_ipython_extension"]
__version__ = "0.1.0"


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext dsh_terminal_magics``: register the ``%term_*`` and ``%job_*`` magics."""
    from .notebook.magics import load_extension

    load_extension(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext dsh_terminal_magics``: close every session and remove the magics."""
    from .notebook.magics import unload_extension

    unload_extension(ipython)
