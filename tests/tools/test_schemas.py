"""Schemas: valid JSON Schema in every format, round-trip a valid call, follow the config."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema
import pytest

from dsh_terminal_magics import TerminalTools, TerminalError
from dsh_terminal_magics.tools.config import ToolsConfig
from dsh_terminal_magics.tools.models import ALL_TOOL_NAMES, ARGS, TOOL_NAMES

VALID_CALLS = {
    "terminal_open": {"type": "shell", "name": "main", "cwd": "/tmp"},
    "terminal_send": {"sessionId": "t-0123456789abcdef", "text": "ls", "submit": True, "run_in_background": False},
    "terminal_read": {"sessionId": "t-0123456789abcdef", "offset": 0, "count": 10},
    "terminal_signal": {"sessionId": "t-0123456789abcdef", "signal": "SIGINT"},
    "terminal_close": {"sessionId": "t-0123456789abcdef"},
    "terminal_list": {},
    "job_output": {"jobId": "j-0123456789abcdef"},
    "job_kill": {"jobId": "j-0123456789abcdef"},
    "terminal_resize": {"sessionId": "t-0123456789abcdef", "rows": 50, "cols": 100},
    "terminal_record": {"sessionId": "t-0123456789abcdef", "action": "start", "path": "s.cast"},
}


def parameters(fmt: str, item: dict) -> tuple[str, dict]:
    if fmt == "openai":
        return item["function"]["name"], item["function"]["parameters"]
    if fmt == "anthropic":
        return item["name"], item["input_schema"]
    return item["title"], item


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "json-schema"])
def test_every_schema_is_valid_and_round_trips(fmt):
    tools = TerminalTools()
    schemas = tools.schemas(format=fmt)
    models = tools.models
    assert [parameters(fmt, s)[0] for s in schemas] == list(models) == list(ALL_TOOL_NAMES)
    for item in schemas:
        name, schema = parameters(fmt, item)
        jsonschema.Draft202012Validator.check_schema(schema)
        call = VALID_CALLS[name]
        jsonschema.validate(call, schema)
        models[name].model_validate(call)  # the model accepts what the schema accepts
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**call, "unexpected": 1}, schema)


def test_disabled_background_schema_and_call():
    tools = TerminalTools(config={"enableRunInBackground": False})
    send = [s for s in tools.schemas("anthropic") if s["name"] == "terminal_send"][0]
    assert "run_in_background" not in send["input_schema"]["properties"]
    from dsh_terminal_magics import Agent
    text = tools.call_text("terminal_send", {"sessionId": "t-1", "text": "x", "run_in_background": True},
                           agent=Agent())
    assert "undeclared argument 'run_in_background'" in text


@pytest.mark.parametrize("config,message", [
    ({"maxResultBytes": 63}, "maxResultBytes must be a safe integer >= 64"),
    ({"maxResultBytes": 2**53}, "maxResultBytes must be a safe integer >= 64"),
    ({"maxResultBytes": 100.0}, "maxResultBytes"),
    ({"maxResultBytes": "4096"}, "maxResultBytes"),
    ({"maxResultBytes": True}, "maxResultBytes"),
    ({"enableRunInBackground": "yes"}, "enableRunInBackground must be true or false"),
    ({"maxResult": 100}, "unknown config key 'maxResult'"),
    ("not a dict", "config must be a dict"),
])
def test_bad_config_is_refused_naming_key_and_bound(config, message):
    with pytest.raises(TerminalError, match=message):
        TerminalTools(config=config)


def test_defaults():
    cfg = ToolsConfig()
    assert cfg.max_result_bytes == 262144 and cfg.enable_run_in_background is True


def test_prompt_section():
    sections = TerminalTools().system_prompt_sections()
    assert sections == [{"name": "tool:pty", "order": 106, "text": (
        "Use a terminal session only when work needs persistent terminal state or interactive stdin; prefer "
        "shell/read/write/edit for bounded one-shot operations. Track every terminal session id and close "
        "sessions that no longer matter. An inferred_idle or timeout result does not prove the foreground "
        "command exited.")}]


def test_include_filters_tools():
    names = [s["name"] for s in TerminalTools().schemas("anthropic", include=["terminal_open", "job_kill"])]
    assert names == ["terminal_open", "job_kill"]
    with pytest.raises(TerminalError, match="unknown tool name"):
        TerminalTools().schemas("anthropic", include=["nope"])


def test_byte_identical_across_interpreters_and_hash_seeds():
    code = ("import json; from dsh_terminal_magics import TerminalTools; t = TerminalTools(); "
            "print(json.dumps([t.schemas(f) for f in ('openai', 'anthropic', 'json-schema')] "
            "+ [t.system_prompt_sections()]))")
    outs = []
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True).stdout)
    assert outs[0] == outs[1] and len(outs[0]) > 1000
    assert json.loads(outs[0])[0] == TerminalTools().schemas("openai")


def test_extensions_off_leave_exactly_the_seed_tools():
    tools = TerminalTools(config={"enableTerminalExtensions": False})
    schemas = tools.schemas("anthropic")
    assert [s["name"] for s in schemas] == list(TOOL_NAMES) == list(ARGS)
    send = [s for s in schemas if s["name"] == "terminal_send"][0]["input_schema"]["properties"]
    assert set(send) == {"sessionId", "text", "submit", "run_in_background", "timeout", "idle"}
    from dsh_terminal_magics import Agent
    text = tools.call_text("terminal_resize", {"sessionId": "t-1", "rows": 5, "cols": 20}, agent=Agent())
    assert "unknown tool 'terminal_resize'" in text
