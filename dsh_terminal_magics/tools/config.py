"""Tool configuration, validated when loaded."""
from __future__ import annotations

import os
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from ..errors import ConfigError, absolute_path
from ..mechanism import AGENT_DEFAULT, EnvironmentPolicy, Sandbox, sandbox_problem
from ..vocabulary import MAX_SAFE_INTEGER, MIN_MAX_RESULT_BYTES, max_result_bytes_problem


#: ``maxProcesses``' default: the most tasks (processes and threads) one agent's session runs at once - a build
#: with a JVM and a headless browser stays well below it, a fork bomb stops at it.
DEFAULT_MAX_PROCESSES = 2048
#: The least ``maxProcesses`` may be (a shell running a pipeline needs a few; bubblewrap and our init count).
MIN_MAX_PROCESSES = 16


class EnvironmentPolicyConfig(BaseModel):
    """``shellEnvironmentPolicy``: which kernel environment variables a session's programs see."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    inherit: Literal["all", "core", "none"] = "core"
    exclude: list[StrictStr] = Field(default_factory=list)
    include_only: list[StrictStr] = Field(default_factory=list, alias="includeOnly")
    set: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    ignore_default_excludes: StrictBool = Field(False, alias="ignoreDefaultExcludes")

    def policy(self) -> EnvironmentPolicy:
        return EnvironmentPolicy(self.inherit, tuple(self.exclude), tuple(self.include_only), dict(self.set),
                                 self.ignore_default_excludes)


class ToolsConfig(BaseModel):
    """``enableRunInBackground`` (default true), ``maxResultBytes`` (default 262144, safe integer >= 64),
    ``enableTerminalExtensions`` (default true: named keys, screens, ``terminal_resize``,
    ``terminal_record``; false leaves exactly the seed's tools), ``shellEnvironmentPolicy`` (default:
    ``inherit: core`` with the default excludes), the sandbox and containment keys, ``maxSessionsPerAgent``
    and ``maxProcesses`` (the most tasks an agent's session runs at once; None: no cap)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    enable_run_in_background: StrictBool = Field(True, alias="enableRunInBackground")
    max_result_bytes: StrictInt = Field(262144, alias="maxResultBytes", ge=MIN_MAX_RESULT_BYTES,
                                        le=MAX_SAFE_INTEGER)
    enable_terminal_extensions: StrictBool = Field(True, alias="enableTerminalExtensions")
    shell_environment_policy: Optional[EnvironmentPolicyConfig] = Field(None, alias="shellEnvironmentPolicy")
    record_dir: Optional[StrictStr] = Field(None, alias="recordDir", min_length=1)
    sandbox: Literal["off", "read-only", "workspace-write"] = "off"
    sandbox_network: StrictBool = Field(False, alias="sandboxNetwork")
    containment: Literal["auto", "namespace", "tracking"] = "auto"
    max_sessions_per_agent: StrictInt = Field(64, alias="maxSessionsPerAgent", ge=1, le=256)
    max_processes: Optional[StrictInt] = Field(DEFAULT_MAX_PROCESSES, alias="maxProcesses", ge=MIN_MAX_PROCESSES,
                                               le=MAX_SAFE_INTEGER)

    @property
    def sandbox_setup(self) -> Sandbox:
        """How agents' sessions are sandboxed and contained (``auto``: a pid namespace where bubblewrap
        works, process tracking elsewhere)."""
        contain = self.containment == "namespace" or (self.containment == "auto" and sandbox_problem() is None)
        return Sandbox(self.sandbox, self.sandbox_network, contain, self.max_processes)

    def recordings_directory(self, workspace_root: str | None) -> str:
        """Where ``terminal_record`` from a tool call may write: ``recordDir``, by default
        ``recordings/`` under the workspace root."""
        if self.record_dir is not None:
            return absolute_path(self.record_dir)
        return os.path.join(absolute_path(workspace_root or "."), "recordings")

    @property
    def environment(self) -> EnvironmentPolicy:
        """The environment policy for agents' sessions."""
        if self.shell_environment_policy is None:
            return AGENT_DEFAULT
        return self.shell_environment_policy.policy()


def environment_policy(policy: dict[str, Any]) -> EnvironmentPolicy:
    """A validated environment policy from its JSON form; a bad one raises :class:`ConfigError`."""
    try:
        return EnvironmentPolicyConfig.model_validate(policy).policy()
    except ValidationError as exc:
        raise ConfigError("invalid environment policy: " + "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'policy'}: {e['msg']}" for e in exc.errors())
            + " (keys: inherit all|core|none, exclude, includeOnly, set, ignoreDefaultExcludes)") from None


CONFIG_KEYS = ("enableRunInBackground", "maxResultBytes", "enableTerminalExtensions", "shellEnvironmentPolicy",
               "recordDir", "sandbox", "sandboxNetwork", "containment", "maxSessionsPerAgent", "maxProcesses")


def load_config(config: dict[str, Any] | ToolsConfig | None) -> ToolsConfig:
    """Validate ``config``; a bad value raises :class:`ConfigError` naming the key and the rule."""
    if isinstance(config, ToolsConfig):
        return config
    if config is None:
        return ToolsConfig()
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a dict with keys {', '.join(CONFIG_KEYS)}, got {type(config).__name__}")
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
            problems.append(max_result_bytes_problem(value) or f"maxResultBytes: {err['msg']}")
        elif key in ("enableRunInBackground", "enableTerminalExtensions"):
            problems.append(f"{key} must be true or false, got {value!r}")
        elif err["type"] == "extra_forbidden":
            problems.append(f"unknown config key {key!r}: the keys are {', '.join(CONFIG_KEYS)} (and inside "
                            "shellEnvironmentPolicy: inherit, exclude, includeOnly, set, ignoreDefaultExcludes)")
        else:
            problems.append(f"{key}: {err['msg']} (got {value!r})")
    return "invalid terminal tools config: " + "; ".join(problems)
