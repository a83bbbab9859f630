"""Tools layer (the seed's ``tool-terminal``): schemas, owner checks, caps, prompt section."""
from .config import ToolsConfig
from .models import TOOL_NAMES
from .render import MARKER, render_capped, truncate_utf8, truncate_utf8_tail
from .terminal_tools import PROMPT_SECTION_TEXT, TerminalTools, result_text

__all__ = ["MARKER", "PROMPT_SECTION_TEXT", "TOOL_NAMES", "TerminalTools", "ToolsConfig", "render_capped",
           "result_text", "truncate_utf8", "truncate_utf8_tail"]
