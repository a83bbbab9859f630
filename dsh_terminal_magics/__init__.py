"""Persistent, interactive terminal sessions for Jupyter and IPython kernels.

``%load_ext dsh_terminal_magics`` for the magics; ``TerminalTools`` for the
model-facing tools.
"""
from .errors import TerminalError
from .owners import Agent

__all__ = ["Agent", "TerminalError"]
__version__ = "0.1.0"
