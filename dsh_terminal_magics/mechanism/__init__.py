"""Mechanism layer (the seed's ``ctx.terminals`` + ``terminal-bash``): PTY sessions."""
from .backends import Backend, BackendRegistry, LaunchSpec, reaped
from .environment import AGENT_DEFAULT, USER_DEFAULT, EnvironmentPolicy
from .event_loop import EventLoopThread
from .manager import Page, SessionManager, shutdown_all
from .sandbox import Sandbox, sandbox_problem
from .send import SendOperation, SendRequest, SendResult
from .session import Session, SessionInfo, SessionOptions

__all__ = ["AGENT_DEFAULT", "Backend", "BackendRegistry", "EnvironmentPolicy", "EventLoopThread", "LaunchSpec",
           "Page", "Sandbox", "SendOperation", "SendRequest", "SendResult", "Session", "SessionInfo", "SessionManager",
           "SessionOptions", "USER_DEFAULT", "reaped", "sandbox_problem", "shutdown_all"]
