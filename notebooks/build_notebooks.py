"""Write and execute the example notebooks (run from the repository root).

    python3 notebooks/build_notebooks.py

Each notebook is defined here as a list of cells, executed with nbclient in a
real kernel, stripped of widget state and saved with its outputs, so that
``pytest --nbval`` can check the committed outputs.  Cells whose output
legitimately varies run-to-run carry the ``nbval-ignore-output`` tag; cells
that show an error on purpose carry ``raises-exception``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
IGNORE = ["nbval-ignore-output"]
RAISES = ["raises-exception"]


def md(text: str) -> dict:
    return new_markdown_cell(text.strip())


def code(text: str, tags: list[str] | None = None) -> dict:
    cell = new_code_cell(text.strip())
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


QUICKSTART = [
    md("""
# Quickstart: a persistent shell in your notebook

`dsh_terminal_magics` gives this kernel terminal sessions that keep their state between cells.
Each send waits until the program **wants input again** (observed, not guessed), then shows the
output, the wait reason, the exit code and the session status.
"""),
    code("%load_ext dsh_terminal_magics"),
    md("Open a shell. It becomes the default session for the cells below."),
    code("%term_open --name main"),
    code('%term_send echo "hello from a persistent shell"'),
    md("State survives between cells: the working directory and variables are still there."),
    code("%term_send cd /tmp && export GREETING=hi"),
    code('%term_send echo "$GREETING from $(pwd)"'),
    md("## Exit codes\nEvery command's exit code comes back, from the shell's own marker."),
    code("%term_send false"),
    code("r = %term_send ls /no/such/dir\nr.exit_code, r.wait_reason"),
    md("## Read back a page of history\n`%term_read` pages the retained output without sending anything."),
    code('%term_send for i in $(seq 1 30); do echo "line $i"; done'),
    code("%term_read --count 5"),
    md("## Interrupt a long command\nA send gives up waiting after `--timeout`; the command keeps running "
       "until you signal it."),
    code("%term_send --timeout 1 sleep 60"),
    code("%term_signal INT"),
    code("%term_send echo back at the prompt"),
    md("## Close\nClosing ends the whole process tree the session started and waits until it is gone."),
    code("%term_list"),
    code("%term_close"),
]

REPLS = [
    md("""
# REPLs and prompts

A send returns when the program asks for input again: a REPL prompt, `input()`, `read -p`, a y/n
question. No prompt pattern is configured anywhere.
"""),
    code("%load_ext dsh_terminal_magics"),
    md("## A python REPL, fed line by line\n`--lines` sends one line at a time and waits for the REPL "
       "to ask for the next (`...` continuation prompts included)."),
    code("%term_open python --name py"),
    code("""%%term_send --lines -s py
def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

[fib(i) for i in range(10)]"""),
    md("Without `--lines` the cell is sent as one block and runs as a file would, blank lines inside a class "
       "and all (the plain REPL would end the class at its first blank line)."),
    code("""%%term_send -s py
class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)
        return self

    def __len__(self):
        return len(self.items)

len(Stack().push(1).push(2))"""),
    md("## Answer a program's question in the next cell"),
    code("%term_open --name sh"),
    code("""%term_send -s sh python3 -c 'name = input("What is your name? "); print("Hello,", name)'"""),
    code("%term_send -s sh Ada"),
    code('%term_send -s sh read -p "Continue? [y/N] " answer'),
    code("%term_send -s sh y"),
    code('%term_send -s sh echo "answer=$answer"'),
    md("## A progress bar ends as one line\nCarriage returns rewrite the line, so the history keeps only "
       "its last state."),
    code("%term_send -s sh for i in $(seq 0 20 100); do printf '\\rprogress %3d%%' $i; sleep 0.05; done; echo"),
    code("%term_read -s sh --count 3"),
    md("## `git log` without a pager\nSessions set `PAGER=cat` and `GIT_PAGER=cat`, so nothing takes over "
       "the terminal."),
    code("""%term_send -s sh cd "$(mktemp -d)" && git -c init.defaultBranch=main init -q && """
         """export GIT_AUTHOR_NAME=demo GIT_AUTHOR_EMAIL=demo@example.com GIT_COMMITTER_NAME=demo """
         """GIT_COMMITTER_EMAIL=demo@example.com GIT_AUTHOR_DATE=2026-01-01T00:00:00Z """
         """GIT_COMMITTER_DATE=2026-01-01T00:00:00Z"""),
    code("""%term_send -s sh for m in "first commit" "second commit" "third commit"; do """
         """git commit -q --allow-empty -m "$m"; done"""),
    code("%term_send -s sh git log --format='%h %an %s'"),
    code("%term_close --all"),
]

JOBS = [
    md("""
# Background jobs

`--bg` starts a send as a background job and returns its id at once; the kernel stays free.
`%job_output` prints only what is new since the last call.
"""),
    code("%load_ext dsh_terminal_magics"),
    code("%term_open --name build"),
    code("""%term_send --bg for step in configure compile link test; do echo "[$step] working"; sleep 0.5; """
         """echo "[$step] done"; done; echo BUILD OK"""),
    md("While the job holds the session, another send is refused with a clear *busy* error naming the job:"),
    code("%term_send echo hello", RAISES),
    md("`--wait` keeps printing new output until the job ends; the final status carries the wait reason, "
       "the session status and the exit code."),
    code("%job_output --wait"),
    md("## Poll a job incrementally\nEach call prints only what is new (what you see depends on timing)."),
    code("%term_send --bg for i in $(seq 1 12); do echo tick $i; sleep 0.5; done"),
    code("%job_output", IGNORE),
    code("import time\ntime.sleep(1)"),
    code("%job_output", IGNORE),
    code("%jobs", IGNORE),
    md("## Stop a job\n`%job_kill` sends SIGINT to the session's foreground process group; the session is "
       "free again at once."),
    code("%job_kill"),
    code("%term_send echo the session is free again"),
    code("%term_close"),
]

AGENT = [
    md("""
# Agent prototyping with the tools API

`TerminalTools` exposes the six terminal tools plus `job_output` / `job_kill` with schemas a
tool-calling API accepts, typed results, and capped text results for the model.
"""),
    md("Agents' sessions run in the bubblewrap sandbox here (`workspace-write`: writes only in the workspace - "
       "the notebook's directory - and a private `/tmp`, no network, no keystroke injection, their own pid namespace) and see a "
       "scrubbed environment (no `*KEY*`, `*TOKEN*`, `*SECRET*` … variables). Without `bwrap` installed, "
       "opening a sandboxed session fails with the reason, so this notebook checks first."),
    code("""import json
from dsh_terminal_magics import Agent, TerminalTools, TerminalError
from dsh_terminal_magics.tools import sandbox_problem

SANDBOX = "off" if sandbox_problem() else "workspace-write"  # needs bubblewrap (apt-get install bubblewrap)
tools = TerminalTools(config={"maxResultBytes": 4096, "sandbox": SANDBOX})
[s["function"]["name"] for s in tools.schemas(format="openai")]"""),
    md("## Schemas\nThe same pydantic models validate the calls and generate the schemas "
       "(OpenAI, Anthropic, plain JSON Schema). They are byte-stable across runs."),
    code("""print(json.dumps(tools.schemas(format="anthropic", include=["terminal_send"])[0], indent=1))"""),
    code("""print(json.dumps(tools.schemas(format="openai", include=["terminal_read"])[0], indent=1))"""),
    md("## The system-prompt section"),
    code("tools.system_prompt_sections()"),
    md("## Two agents are isolated\nAuthority is the `Agent` object. Another agent (even with the same "
       "name) gets the same error as for an id that does not exist."),
    code("""alice, mallory = Agent("worker"), Agent("worker")
sid = tools.call("terminal_open", {"type": "shell"}, agent=alice).session_id
print(tools.call_text("terminal_send", {"sessionId": sid, "text": "echo secret"}, agent=mallory))
print(tools.call_text("terminal_list", {}, agent=mallory))
tools.call("terminal_close", {"sessionId": sid}, agent=alice).outcome"""),
    md("## A scripted model\nA list of tool calls stands in for the model. Each result is the capped text "
       "the model would read; ids it learns are substituted into later calls."),
    code("""import re
import time

script = [
    ("terminal_open", {"type": "shell", "name": "work"}),
    ("terminal_send", {"sessionId": "$SID", "text": "python3 -q"}),
    ("terminal_send", {"sessionId": "$SID", "text": "x = input('favourite number? ')"}),
    ("terminal_send", {"sessionId": "$SID", "text": "7"}),
    ("terminal_send", {"sessionId": "$SID", "text": "print(x * 3)"}),
    ("terminal_send", {"sessionId": "$SID", "text": "exit()"}),
    ("terminal_send", {"sessionId": "$SID", "text": "for i in 1 2 3; do echo step $i; sleep 0.2; done",
                       "run_in_background": True}),
    ("wait_for_job", {"jobId": "$JOB"}),
    ("terminal_close", {"sessionId": "$SID"}),
]

agent = Agent("scripted-model")
learned = {}
for name, args in script:
    args = {k: learned.get(v, v) if isinstance(v, str) else v for k, v in args.items()}
    if name == "wait_for_job":  # poll like a model would; show everything it read, in order
        reads = []
        while True:
            reads.append(tools.call_text("job_output", args, agent=agent))
            if "[status: running]" not in reads[-1]:
                break
            time.sleep(0.1)
        bodies = "".join(r.split("\\n", 1)[1] for r in reads if "\\n" in r)
        text = reads[-1].split("\\n", 1)[0] + "\\n" + bodies
    else:
        text = tools.call_text(name, args, agent=agent)
    for key, pattern in (("$SID", r"sessionId: (t-[0-9a-f]{16})"), ("$JOB", r"jobId: (j-[0-9a-f]{16})")):
        if (m := re.search(pattern, text)):
            learned[key] = m.group(1)
    print(f">>> {name} {json.dumps(args)}\\n{text}\\n")"""),
    md("""
## Where a real LLM plugs in (not executed)

```python
import anthropic

client = anthropic.Anthropic()
messages = [{"role": "user", "content": "Find the largest file under /tmp"}]
system = "\\n\\n".join(s["text"] for s in tools.system_prompt_sections())
while True:
    reply = client.messages.create(model="<model>", max_tokens=1024, system=system,
                                   tools=tools.schemas(format="anthropic"), messages=messages)
    messages.append({"role": "assistant", "content": reply.content})
    calls = [b for b in reply.content if b.type == "tool_use"]
    if not calls:
        break
    messages.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": c.id, "content": tools.call_text(c.name, c.input, agent=agent)}
        for c in calls]})
```
"""),
    md("""
## Policies, cards and agent scopes

Policies run around every call: a deny-list refuses matching commands before they reach the terminal
(`confirm_commands([...])` would ask you with Yes/No buttons instead). Cards show each call and its
result in the cell, in order. `with Agent(...)` closes everything the agent opened when the block ends.
"""),
    code("""from dsh_terminal_magics.notebook.cards import show_cards
from dsh_terminal_magics.tools.policies import deny_commands

guarded = TerminalTools(config={"maxResultBytes": 2048})
guarded.add_policy(deny_commands([r"\\brm\\s+-rf\\s+/(\\s|$)"]))
cards = show_cards(guarded)

with Agent("guarded") as bot:
    sid = guarded.call("terminal_open", {"type": "shell"}, agent=bot).session_id
    guarded.call("terminal_send", {"sessionId": sid, "text": "printf '\\\\e[32mok\\\\e[0m <safe>\\\\n'"}, agent=bot)
    print(guarded.call_text("terminal_send", {"sessionId": sid, "text": "rm -rf /"}, agent=bot))
    guarded.call("terminal_list", {}, agent=bot)
guarded.call("terminal_list", {}, agent=bot).root   # the scope closed the session"""),
    md("The schemas and the prompt section are byte-identical from run to run (sorted keys, fixed order), "
       "so provider prompt caches stay warm:"),
    code("""import hashlib
blob = json.dumps([tools.schemas(f) for f in ("openai", "anthropic", "json-schema")]
                  + [tools.system_prompt_sections()]).encode()
hashlib.sha256(blob).hexdigest()[:16]"""),
    code("guarded.shutdown()\ntools.shutdown()"),
]

TEACHING = [
    md("""
# Teaching demo: a live terminal viewport

`%term_view` shows the session's screen as it changes, with a line to type into and buttons for
Ctrl-C, Ctrl-D, Tab, Up and Down. It keeps updating while the kernel is idle. Below it, a static
text snapshot for readers of the saved notebook.
"""),
    code("%load_ext dsh_terminal_magics"),
    code("%term_open --name demo"),
    code("view = %term_view\nview"),
    code("%term_send printf '\\e[1;32mgreen\\e[0m and \\e[31mred\\e[0m and <b>not bold</b>\\n'"),
    code("%term_send for i in 1 2 3; do echo \"counting $i\"; done"),
    md("What the viewport showed at this point, as plain text:"),
    code("view.flush()\nprint(view.snapshot())"),
    md("Type into the viewport's input line (try `sleep 30`, then press **Ctrl-C**), or keep sending from "
       "cells. Close the session when done; the viewport keeps its final view."),
]

FRAMEWORKS = [
    md("""
# Agent frameworks: MCP, pydantic-ai, LangGraph, OpenAI Agents SDK

The terminal tools plug into the agent stacks people already use. `%term_mcp start` serves them over
MCP **from inside this kernel**: an outside agent (Claude Code, Codex, VS Code, or any MCP client) drives
a terminal while you watch it live here. The framework adapters hand the same tools to pydantic-ai,
LangChain/LangGraph and the OpenAI Agents SDK. Everything below runs offline: scripted models, no API key.
"""),
    code("%load_ext dsh_terminal_magics"),
    md("## An MCP server in the kernel\nIt runs on the package's own loop, so cells stay free while clients "
       "call it. The start message has ready-to-paste client configs, with the bearer token it made: every "
       "user of this machine can reach its loopback port, and a client gets a shell as you."),
    code("server = %term_mcp start"),
    md("""
Connect with the MCP SDK's own client, as an outside agent would (`server.client()` is `mcp.Client` with
the token). Each client is its own `Agent`
(`server.agents`), so `%term_view --agent` shows its terminal live; the client answers a `read -p`
question it sees waiting. When the client leaves, its terminals are closed.
"""),
    code("""from IPython.display import display

async with server.client() as client:
    opened = await client.call_tool("terminal_open", {"type": "shell", "name": "outside"})
    sid = opened.structured_content["sessionId"]
    outside = server.agents[0]
    view = %term_view --agent outside
    display(view)
    %term_mcp
    for text in ["read -p 'Your name? ' n; echo \\"hello $n\\"", "Ada"]:
        reply = await client.call_tool("terminal_send", {"sessionId": sid, "text": text})
        print(reply.content[0].text, "\\n")
    print("structured:", {k: reply.structured_content[k] for k in ("waitReason", "exitCode", "sessionStatus")})
    view.flush()
    print("--- the viewport showed ---")
    print(view.snapshot())"""),
    code("%term_mcp"),
    md("## pydantic-ai\n`toolset(tools, agent)` is a pydantic-ai toolset. Here a `FunctionModel` plays the model: "
       "it opens a shell, runs a command, reads the result and closes the shell."),
    code("""import re
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

from dsh_terminal_magics import Agent, TerminalTools
from dsh_terminal_magics.integrations.pydantic_ai import toolset

tools = TerminalTools()

def scripted(messages, info):
    returns = [p.content for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("terminal_open", {"type": "shell"})])
    sid = re.search(r"sessionId: (t-[0-9a-f]{16})", returns[0]).group(1)
    if len(returns) == 1:
        return ModelResponse(parts=[ToolCallPart("terminal_send", {"sessionId": sid, "text": "echo $((6*7))"})])
    if len(returns) == 2:
        return ModelResponse(parts=[ToolCallPart("terminal_close", {"sessionId": sid})])
    answer = re.search(r"\\n(\\d+)\\n", returns[1]).group(1)
    return ModelResponse(parts=[TextPart(f"The shell says {answer}.")])

bot = PydanticAgent(FunctionModel(scripted), toolsets=[toolset(tools, Agent("pydantic-ai"))])
result = await bot.run("What is six times seven? Use the terminal.")
result.output"""),
    md("## LangGraph\n`structured_tools(tools, agent)` are LangChain `StructuredTool`s (`invoke` and `ainvoke`); "
       "here LangGraph's prebuilt `ToolNode` runs a hand-made tool call."),
    code("""from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from dsh_terminal_magics.integrations.langchain import structured_tools

graph_agent = Agent("langgraph")
builder = StateGraph(MessagesState)
builder.add_node("tools", ToolNode(structured_tools(tools, graph_agent)))
builder.add_edge(START, "tools")
builder.add_edge("tools", END)
graph = builder.compile()

def run_calls(*calls):
    message = AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": f"call-{i}", "type": "tool_call"}
                                                for i, (n, a) in enumerate(calls)])
    state = graph.invoke({"messages": [message]})
    return [m.content for m in state["messages"] if isinstance(m, ToolMessage)]

[opened] = run_calls(("terminal_open", {"type": "python"}))
sid = re.search(r"sessionId: (t-[0-9a-f]{16})", opened).group(1)
for reply in run_calls(("terminal_send", {"sessionId": sid, "text": "sum(range(10))"}),
                       ("terminal_send", {"sessionId": "t-0000000000000000", "text": "1"})):
    print(reply, "\\n")
run_calls(("terminal_close", {"sessionId": sid}))"""),
    md("## OpenAI Agents SDK\n`function_tools(tools, agent)` are `FunctionTool`s (not strict: optional arguments "
       "stay optional)."),
    code("""from dsh_terminal_magics.integrations.openai_agents import function_tools

[(t.name, t.strict_json_schema) for t in function_tools(tools, Agent("openai-agents"))][:3]"""),
    md("""
## Where a real model plugs in (not executed)

```python
# pydantic-ai
bot = PydanticAgent("anthropic:claude-sonnet-4-5", toolsets=[toolset(tools, Agent("assistant"))],
                    instructions=tools.system_prompt_sections()[0]["text"])
print((await bot.run("Find the largest file under /tmp")).output)

# LangGraph
from langgraph.prebuilt import create_react_agent
react = create_react_agent("openai:gpt-5", structured_tools(tools, Agent("react")))

# OpenAI Agents SDK
from agents import Agent as OpenAIAgent, Runner
assistant = OpenAIAgent(name="terminal", instructions=tools.system_prompt_sections()[0]["text"],
                        tools=function_tools(tools, Agent("assistant")))
print((await Runner.run(assistant, "Find the largest file under /tmp")).final_output)
```

From a shell, the same MCP server without a notebook: `dsh-terminal-mcp` (stdio) or
`dsh-terminal-mcp --http --port 8765`.
"""),
    code("%term_mcp stop\ntools.shutdown()"),
]

NOTEBOOKS = {
    "01-quickstart.ipynb": QUICKSTART,
    "02-repls-and-prompts.ipynb": REPLS,
    "03-background-jobs.ipynb": JOBS,
    "04-agent-loop.ipynb": AGENT,
    "05-teaching-demo.ipynb": TEACHING,
    "06-agent-frameworks.ipynb": FRAMEWORKS,
}


def build(name: str, cells: list[dict]) -> None:
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(HERE)}})
    client.execute()
    nb.metadata.pop("widgets", None)
    nb.metadata["language_info"] = {"name": "python"}
    for cell in nb.cells:
        if cell.cell_type == "code":
            for output in cell.get("outputs", []):
                output.get("metadata", {}).clear() if "metadata" in output else None
    nbformat.write(nb, HERE / name)
    print(f"wrote {name}")


if __name__ == "__main__":
    wanted = sys.argv[1:] or list(NOTEBOOKS)
    for name in wanted:
        build(name, NOTEBOOKS[name])
