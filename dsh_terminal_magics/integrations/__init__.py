"""Framework adapters: the terminal tools as pydantic-ai, LangChain/LangGraph and OpenAI Agents SDK tools.

Each adapter is a thin layer over :class:`~dsh_terminal_magics.TerminalTools`:
the names, descriptions and argument schemas are those of
:meth:`TerminalTools.schemas` (``sessionId``, not ``session_id``; optional
arguments stay optional), a result is the capped text a model sees, and a
tool error comes back as that text (never raised).  Each framework is an
optional extra: ``pip install 'dsh_terminal_magics[pydantic-ai]'``,
``[langchain]``, ``[openai-agents]``.

- :func:`dsh_terminal_magics.integrations.pydantic_ai.toolset`
- :func:`dsh_terminal_magics.integrations.langchain.structured_tools`
- :func:`dsh_terminal_magics.integrations.openai_agents.function_tools`
"""
