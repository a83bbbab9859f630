"""Tools layer (the seed's ``tool-terminal``): schemas, owner checks, caps, prompt section, policies."""
from ..mechanism import sandbox_problem
from .config import ToolsConfig
from .models import TOOL_NAMES
from .render import MARKER, render_capped, result_text, truncate_utf8, truncate_utf8_tail
from .streaming import SessionFollower, TerminalView
from .terminal_tools import PROMPT_SECTION_TEXT, TerminalTools, shutdown_all

__all__ = ["MARKER", "PROMPT_SECTION_TEXT", "SessionFollower", "TOOL_NAMES", "TerminalTools", "TerminalView",
           "ToolsConfig", "render_capped", "result_text", "sandbox_problem", "shutdown_all", "truncate_utf8", "truncate_utf8_tail"]
