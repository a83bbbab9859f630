"""Tool schemas generated from the argument models, in the formats tool-calling APIs accept.

Output is deterministic: keys sorted at every level, tools in a fixed order,
so the schemas are byte-identical across calls, processes and hash seeds
(provider prompt caches stay warm).
"""
from __future__ import annotations

import inspect
from typing import Any, Iterable, Mapping

from ..errors import InvalidArgumentError
from pydantic import BaseModel

FORMATS = ("openai", "anthropic", "json-schema")


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _simplify(prop: dict[str, Any]) -> dict[str, Any]:
    prop = {k: v for k, v in prop.items() if k != "title"}
    options = prop.pop("anyOf", None)
    if options:
        non_null = [o for o in options if o.get("type") != "null"]
        if len(non_null) == 1:
            prop.update(non_null[0])
            if prop.get("default", 0) is None:
                prop.pop("default")
        else:
            prop["anyOf"] = options
    return prop


def parameters_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments model."""
    raw = model.model_json_schema(by_alias=True)
    props = {key: _simplify(value) for key, value in raw.get("properties", {}).items()}
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if raw.get("required"):
        schema["required"] = sorted(raw["required"])
    return _sorted(schema)


def description(model: type[BaseModel]) -> str:
    return " ".join(inspect.cleandoc(model.__doc__ or "").split())


def build_schemas(models: Mapping[str, type[BaseModel]], fmt: str = "openai", *,
                  include: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Schemas of the tools in ``include`` (default all of ``models``, in their order) in format ``fmt``."""
    if fmt not in FORMATS:
        raise InvalidArgumentError(f"unknown schema format {fmt!r}: use one of {', '.join(FORMATS)}")
    names = list(models)
    if include is not None:
        wanted = list(include)
        unknown = [n for n in wanted if n not in models]
        if unknown:
            raise InvalidArgumentError(f"unknown tool name(s) {unknown}: the tools are {', '.join(models)}")
        names = [n for n in names if n in wanted]
    out = []
    for name in names:
        model = models[name]
        params = parameters_schema(model)
        if fmt == "openai":
            item = {"type": "function", "function": {"name": name, "description": description(model),
                                                     "parameters": params}}
        elif fmt == "anthropic":
            item = {"name": name, "description": description(model), "input_schema": params}
        else:
            item = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": name,
                    "description": description(model), **params}
        out.append(_sorted(item))
    return out
