"""``python3 -m dsh_terminal_magics.mcp``: see :mod:`dsh_terminal_magics.mcp.cli`."""
from .cli import main

raise SystemExit(main())
