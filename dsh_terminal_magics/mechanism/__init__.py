"""Mechanism layer (the seed's ``ctx.terminals`` + ``terminal-bash``): PTY sessions."""
from .backends import Backend, BackendRegistry, LaunchSpec
from .manager import SIGNALS, SessionManager, shutdown_all
from .session import Page, SendOperation, SendRequest, SendResult, SessionInfo, SessionOptions

__all__ = ["Backend", "BackendRegistry", "LaunchSpec", "Page", "SIGNALS", "SendOperation", "SendRequest",
           "SendResult", "SessionInfo", "SessionManager", "SessionOptions", "shutdown_all"]
