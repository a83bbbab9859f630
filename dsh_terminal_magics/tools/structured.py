"""Results as JSON objects, and the JSON Schema they follow (MCP's ``structuredContent`` / ``outputSchema``).

The object is the seed's JSON result (``by_alias``: ``sessionId``, ``waitReason`` …);
``terminal_list`` is wrapped as ``{"sessions": [...]}`` because a structured
result must be an object.  When a policy answered instead of the tool, the
object says so: ``{"policy": …, "outcome": …, "text": …}``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Union

from pydantic import BaseModel, TypeAdapter

from .models import RESULTS, SessionEntry, SessionList
from .policies import PolicyOutcome


@dataclass(frozen=True)
class ToolAnswer:
    """A finished call as a protocol server reports it."""

    #: The capped text a model sees (a policy may supply content blocks instead).
    text: "str | list[dict[str, Any]]"
    #: The JSON object of the result (None for an error).
    structured: "dict[str, Any] | None"
    is_error: bool


class SessionsObject(BaseModel):
    """``terminal_list`` as an object."""

    sessions: list[SessionEntry]


class PolicyAnswer(BaseModel):
    """What a policy returned in place of the tool's own result."""

    policy: str
    outcome: str
    text: str


def _object_type(name: str) -> Any:
    result = RESULTS[name]
    return SessionsObject if result is SessionList else result


@lru_cache(maxsize=None)
def output_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of tool ``name``'s structured result (an object: the tool's result or a policy's answer)."""
    adapter: TypeAdapter[Any] = TypeAdapter(Union[_object_type(name), PolicyAnswer])  # type: ignore[arg-type]
    schema = adapter.json_schema(by_alias=True, mode="serialization")
    return {"type": "object", **schema}


def structured_result(result: BaseModel, text: str) -> dict[str, Any]:
    """``result`` as the JSON object of :func:`output_schema`; ``text`` is what the model sees (for policy answers)."""
    if isinstance(result, PolicyOutcome):
        if isinstance(result.content, BaseModel):
            return structured_result(result.content, text)
        return PolicyAnswer(policy=result.policy, outcome=result.outcome, text=text).model_dump()
    if isinstance(result, SessionList):
        return {"sessions": result.model_dump(by_alias=True, mode="json")}
    return result.model_dump(by_alias=True, mode="json")
