"""Tool configuration, validated when loaded."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from ..errors import ConfigError

MIN_MAX_RESULT_BYTES = 64
MAX_SAFE_INTEGER = 2**53 - 1


class ToolsConfig(BaseModel):
    """``enableRunInBackground`` (default true), ``maxResultBytes`` (default 262144, safe integer >= 64) and
    ``enableTerminalExtensions`` (default true: named keys, screens, ``terminal_resize``, ``terminal_record``;
    false leaves exactly the seed's tools)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    enable_run_in_background: StrictBool = Field(True, alias="enableRunInBackground")
    max_result_bytes: StrictInt = Field(262144, alias="maxResultBytes", ge=MIN_MAX_RESULT_BYTES,
                                        le=MAX_SAFE_INTEGER)
    enable_terminal_extensions: StrictBool = Field(True, alias="enableTerminalExtensions")


def load_config(config: dict[str, Any] | ToolsConfig | None) -> ToolsConfig:
    """Validate ``config``; a bad value raises :class:`ConfigError` naming the key and the rule."""
    if isinstance(config, ToolsConfig):
        return config
    if config is None:
        return ToolsConfig()
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a dict with keys enableRunInBackground and maxResultBytes, "
                          f"got {type(config).__name__}")
    try:
        return ToolsConfig.model_validate(config)
    except ValidationError as exc:
        raise ConfigError(describe_config_error(exc)) from None


def describe_config_error(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "config"
        value = err.get("input")
        if key == "maxResultBytes":
            problems.append(f"maxResultBytes must be a safe integer >= {MIN_MAX_RESULT_BYTES} "
                            f"(and <= {MAX_SAFE_INTEGER}), got {value!r}")
        elif key in ("enableRunInBackground", "enableTerminalExtensions"):
            problems.append(f"{key} must be true or false, got {value!r}")
        elif err["type"] == "extra_forbidden":
            problems.append(f"unknown config key {key!r}: the keys are enableRunInBackground, maxResultBytes "
                            "and enableTerminalExtensions")
        else:
            problems.append(f"{key}: {err['msg']}")
    return "invalid terminal tools config: " + "; ".join(problems)
