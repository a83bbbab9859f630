"""Each framework adapter driven by the real framework, offline (no model, no API key)."""
from __future__ import annotations

import asyncio
import json
import re

import pytest

from dsh_terminal_magics import Agent

from tests.integrations.conftest import alive

pytestmark = pytest.mark.timeout(120)
SESSION_ID = re.compile(r"sessionId: (t-[0-9a-f]{16})")


def test_pydantic_ai_function_model_drives_a_terminal(tools):
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from dsh_terminal_magics.integrations.pydantic_ai import toolset

    seen: dict[str, object] = {}

    def script(messages, info: AgentInfo) -> ModelResponse:
        seen.setdefault("tools", {t.name: t.parameters_json_schema for t in info.function_tools})
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        step = len(returns)
        if step == 0:
            return ModelResponse(parts=[ToolCallPart("terminal_open", {"type": "shell"}, tool_call_id="c0")])
        sid = SESSION_ID.search(returns[0].content).group(1)
        if step == 1:
            return ModelResponse(parts=[ToolCallPart("terminal_send", {"sessionId": sid, "text": "read -p 'ok? ' a"},
                                                     tool_call_id="c1")])
        if step == 2:
            return ModelResponse(parts=[ToolCallPart("terminal_send", {"sessionId": sid, "text": "y"},
                                                     tool_call_id="c2")])
        if step == 3:
            return ModelResponse(parts=[ToolCallPart("terminal_send", {"sessionId": sid,
                                                                       "text": "echo N-$a-$((6*7))"},
                                                     tool_call_id="c3")])
        if step == 4:  # an error comes back as text the model reads; the run goes on
            return ModelResponse(parts=[ToolCallPart("terminal_close", {"sessionId": "t-0000000000000000"},
                                                     tool_call_id="c4")])
        if step == 5:
            return ModelResponse(parts=[ToolCallPart("terminal_close", {"sessionId": sid}, tool_call_id="c5")])
        seen["returns"] = [r.content for r in returns]
        return ModelResponse(parts=[TextPart("done")])

    owner = Agent("pydantic-ai")
    agent = PydanticAgent(FunctionModel(script), toolsets=[toolset(tools, owner)])
    result = agent.run_sync("use the terminal")
    assert result.output == "done"
    ours = {s["function"]["name"]: s["function"]["parameters"] for s in tools.schemas("openai")}
    assert seen["tools"] == ours  # sessionId, not session_id; optional stays optional
    opened, asked, answered, shown, error, closed = seen["returns"]
    assert asked.startswith("[wait: stdin_read]") and asked.endswith("ok? ")
    assert "N-y-42" in shown
    assert error.startswith("[error]") and "unknown terminal session" in error
    assert "outcome: closed" in closed or "closed" in closed
    assert tools.call("terminal_list", {}, agent=owner).root == []


def test_langgraph_tool_node_runs_hand_made_tool_calls(tools):
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from dsh_terminal_magics.integrations.langchain import structured_tools

    owner = Agent("langgraph")
    lc_tools = structured_tools(tools, owner)
    assert [t.name for t in lc_tools] == [s["function"]["name"] for s in tools.schemas("openai")]
    assert lc_tools[1].args_schema == tools.schemas("openai")[1]["function"]["parameters"]
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode(lc_tools))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    graph = builder.compile()

    def replies(state):
        return [m.content for m in state["messages"] if isinstance(m, ToolMessage)]

    def calls(*items):
        msg = AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": f"c{i}", "type": "tool_call"}
                                                for i, (n, a) in enumerate(items)])
        return replies(graph.invoke({"messages": [msg]}))

    [opened] = calls(("terminal_open", {"type": "shell"}))
    sid = SESSION_ID.search(opened).group(1)
    [shown, missing] = calls(("terminal_send", {"sessionId": sid, "text": "echo N-$((6*7))"}),
                             ("terminal_read", {"sessionId": "t-0000000000000000"}))
    assert "N-42" in shown
    assert missing.startswith("[error]") and "unknown terminal session" in missing

    async def ainvoke():  # the async path of the same tools
        msg = AIMessage(content="", tool_calls=[{"name": "terminal_send", "id": "a1", "type": "tool_call",
                                                 "args": {"sessionId": sid, "text": "echo A-$((6*7))"}}])
        [out] = replies(await graph.ainvoke({"messages": [msg]}))
        direct = await lc_tools[1].ainvoke({"sessionId": sid, "text": "echo B-$((6*7))"})
        return out, direct

    via_node, direct = asyncio.run(ainvoke())
    assert "A-42" in via_node and "B-42" in direct
    assert "[error]" in lc_tools[1].invoke({"sessionId": sid})  # missing text: an error as text, not raised
    [closed] = calls(("terminal_close", {"sessionId": sid}))
    assert "closed" in closed


def test_openai_agents_runner_invokes_the_function_tools(tools):
    from agents import Agent as OpenAIAgent, Runner, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from dsh_terminal_magics.integrations.openai_agents import function_tools

    set_tracing_disabled(True)
    outputs: list[str] = []

    class Scripted(Model):
        """A model that calls the terminal tools in a fixed order, reading each tool output."""

        def __init__(self) -> None:
            self.step = 0

        async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                               tracing, **kwargs):
            items = input if isinstance(input, list) else []
            outs = [i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
            outputs[:] = [o if isinstance(o, str) else json.dumps(o) for o in outs]
            plan = [("terminal_open", {"type": "shell"}), ("terminal_send", None), ("terminal_send", "bad"),
                    ("terminal_close", None)]
            if self.step < len(plan):
                name, args = plan[self.step]
                if args is None or args == "bad":
                    sid = SESSION_ID.search(outputs[0]).group(1)
                    args = ({"sessionId": sid, "text": "echo N-$((6*7))"} if name == "terminal_send" and
                            args is None else {"sessionId": sid} if args is None else {"sessionId": sid, "text": 3})
                self.step += 1
                call = ResponseFunctionToolCall(type="function_call", name=name, arguments=json.dumps(args),
                                                call_id=f"call-{self.step}", id=f"fc-{self.step}", status="completed")
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            message = ResponseOutputMessage(type="message", id="m-1", role="assistant", status="completed",
                                            content=[text])
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        def stream_response(self, *args, **kwargs):
            raise NotImplementedError

    owner = Agent("openai-agents")
    fts = function_tools(tools, owner)
    assert all(not t.strict_json_schema for t in fts)
    assert fts[1].params_json_schema == tools.schemas("openai")[1]["function"]["parameters"]
    agent = OpenAIAgent(name="terminal", instructions="use the terminal", tools=fts, model=Scripted())
    result = asyncio.run(Runner.run(agent, "go"))
    assert result.final_output == "done"
    opened, shown, bad, closed = outputs
    pid = int(re.search(r"pid: (\d+)", opened).group(1))
    assert "N-42" in shown
    assert bad.startswith("[error]") and "argument 'text'" in bad
    assert "closed" in closed and not alive(pid)
