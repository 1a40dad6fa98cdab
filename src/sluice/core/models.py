"""The typed shape of the town config, validated by pydantic on every read and write.

Work items are deliberately *not* modelled here: they are beads records that
may carry any key, and a 100,000-item rig must load without validating every
row.  Items stay dicts (see :mod:`sluice.core.items`).  The records sluice
writes many times a day (sling-context fields, the scheduler state) are
plain dataclasses in :mod:`sluice.core.records`, which the hot read commands
parse without importing pydantic.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from sluice.core.clock import check_duration, format_duration, parse_duration
from sluice.core.records import json_object
from sluice.core.workspaces import DEFAULT_BRANCH, template_problem
from sluice.errors import ConfigError, UsageError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def seconds(self, key: str) -> float:
        return parse_duration(getattr(self, key))


def _duration_field(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_duration(check_duration(float(value), value))
    parse_duration(value)
    return str(value).strip()


#: A duration such as ``1m30s`` (a number is seconds), kept as its text.
Duration = Annotated[str, BeforeValidator(_duration_field)]


#: The events ``scheduler.notify`` can be run on (``scheduler.notify_on``).
NOTIFY_EVENTS = ("circuit-broken", "budget-exhausted", "throttled", "queue-drained", "polecat-timed-out",
                 "run-failed", "run-timed-out", "run-vanished")
#: The default choice: all but ``polecat-timed-out``, which ``run-timed-out`` announces already
#: (the same stall, seen as the run's end), so a stall is not announced twice.
DEFAULT_NOTIFY_ON = tuple(e for e in NOTIFY_EVENTS if e != "polecat-timed-out")


def _size_field(value: Any) -> str | None:
    from sluice.core.gates import parse_size

    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "off", "none")):
        return None
    if isinstance(value, bool):
        raise ValueError("expected a size such as 2GiB")
    parse_size(value)
    return str(value).strip()


#: A size such as ``2GiB``, or None (``off``, ``none``, empty) for no limit.
Size = Annotated[str | None, BeforeValidator(_size_field)]


class HostConfig(_Strict):
    """The host guard (docs/scheduler.md "Host guard"): off until a limit is set."""

    max_load: float | None = Field(None, gt=0, le=1_000_000)  # 1-minute load average per core
    min_free_memory: Size = None
    min_free_disk: Size = None  # on the town's filesystem and every rig's


class SchedulerConfig(_Strict):
    max_polecats: int = Field(-1, ge=-1)
    batch_size: int = Field(1, ge=1)
    spawn_delay: Duration = "0s"
    max_dispatch_failures: int = Field(3, ge=1)
    polecat_timeout: Duration = "0"
    retry_base: Duration = "30s"
    retry_max: Duration = "10m"
    missing_grace: Duration = "10m"
    notify: list[str] = Field(default_factory=list)  # argv template run on chosen events; [] = none
    notify_on: list[str] = Field(default_factory=lambda: list(DEFAULT_NOTIFY_ON))
    notify_timeout: Duration = "10s"
    # Admission (docs/scheduler.md "Admission"): caps per label, token budgets, throttles, breaker.
    label_caps: dict[str, int] = Field(default_factory=dict)
    token_budget: int = Field(0, ge=0)
    budget_window: Duration = "1h"
    throttle_exit_code: int = Field(75, ge=1, le=255)
    throttle_for: Duration = "5m"
    breaker_cooldown: Duration = "1h"
    retry_failed_runs: int = Field(0, ge=0)  # requeue an item whose run failed, up to N times (0 = never)
    compact_retention: Duration = "168h"  # closed contexts older than this leave the log at compaction
    compact_at: int = Field(50_000, ge=0)  # the daemon compacts a log longer than this (0 = never)
    host: HostConfig = Field(default_factory=HostConfig)
    hold_file: str = ""  # while this file exists (relative: to the town root) nothing is launched

    @field_validator("label_caps")
    @classmethod
    def _check_label_caps(cls, value: dict[str, int]) -> dict[str, int]:
        for label, cap in value.items():
            if not label or cap < 1:
                raise ValueError(f"label cap {label!r} must be an integer >= 1 (got {cap})")
        return value

    @field_validator("notify_on")
    @classmethod
    def _check_notify_on(cls, value: list[str]) -> list[str]:
        unknown = [v for v in value if v not in NOTIFY_EVENTS]
        if unknown:
            raise ValueError(f"unknown event(s) {', '.join(unknown)}; known: {', '.join(NOTIFY_EVENTS)}")
        return value

    @property
    def deferred(self) -> bool:
        """Deferred mode ⇔ a positive cap; 0 and -1 both mean direct dispatch."""
        return self.max_polecats > 0


class RayConfig(_Strict):
    # Finite and not negative: `config set` reads JSON, which Python lets spell Infinity and NaN.
    address: str = "http://127.0.0.1:8265"
    resources: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(default_factory=dict)


class ExecutorConfig(_Strict):
    kind: Literal["local", "tmux", "ray", "demo", "memory"] = "local"
    command: list[str] = Field(default_factory=list)
    ray: RayConfig = Field(default_factory=RayConfig)
    # Per-run workspaces (docs/executors.md "Workspaces"): "repo" runs polecats in the rig's checkout.
    workspace: Literal["repo", "clone"] = "repo"
    workspace_root: str = ""  # "": runtime/workspaces/<host>; relative: to the town root
    workspace_keep: int = Field(5, ge=0)  # workspaces kept (unsaved work, failed runs) per rig
    workspace_branch: str = DEFAULT_BRANCH

    @field_validator("workspace_branch")
    @classmethod
    def _check_branch(cls, value: str) -> str:
        problem = template_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class ItemsConfig(_Strict):
    """How rigs reading their items through a command (``rig add --items-command``) refresh them."""

    command_timeout: Duration = "30s"  # a command still running then is killed; the last snapshot serves
    refresh: Duration = "30s"  # run again at least this often, and at once when a watched path changes
    read_wait: Duration = "2s"  # a read command waits this long for a refresh, then serves the last snapshot


class RigItems(_Strict):
    """A rig's items read through a command whose output is a beads export (docs/items.md)."""

    command: list[str] = Field(min_length=1)  # an argv, run in the repository, never through a shell
    watch: list[str] = Field(default_factory=list)  # paths whose change means run again ([]: REPO/.beads)
    command_timeout: Duration | None = None  # None: items.command_timeout
    refresh: Duration | None = None  # None: items.refresh

    @field_validator("command")
    @classmethod
    def _check_command(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the command's first word names the program to run")
        return value


class RigConfig(_Strict):
    repo: str
    prefix: str
    items: str | RigItems | None = None  # a read-only beads export (a path), or a command source
    max_polecats: int | None = Field(None, ge=1)  # None: only the town cap applies
    token_budget: int = Field(0, ge=0)  # tokens per scheduler.budget_window; 0 = no rig budget
    workspace: Literal["repo", "clone"] | None = None  # None: executor.workspace
    remote: str | None = None  # the URL a workspace on another machine clones from (`rig add --remote`)

    @field_validator("remote")
    @classmethod
    def _check_remote(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or value.startswith("-") or "\x00" in value):
            raise ValueError("a remote is a URL or path git can clone, and does not start with '-'")
        return value


class TownConfig(_Strict):
    version: int = 1
    rigs: dict[str, RigConfig] = Field(default_factory=dict)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    items: ItemsConfig = Field(default_factory=ItemsConfig)


def validation_message(err: ValidationError) -> str:
    """One readable line per pydantic problem: ``scheduler.batch_size: must be >= 1``."""
    parts = []
    for problem in err.errors():
        where = ".".join(str(p) for p in problem["loc"]) or "value"
        parts.append(f"{where}: {_problem_text(problem)}")
    return "; ".join(parts)


# Settable keys, what they accept, and how to turn the typed text into a value.
CONFIG_KEYS: dict[str, str] = {
    "scheduler.max_polecats": "an integer >= -1 (-1 or 0 = direct dispatch, N > 0 = deferred with cap N)",
    "scheduler.batch_size": "an integer >= 1",
    "scheduler.spawn_delay": "a duration such as 500ms, 3s, 1m30s",
    "scheduler.max_dispatch_failures": "an integer >= 1",
    "scheduler.polecat_timeout": "a duration (0 = no timeout)",
    "scheduler.retry_base": "a duration",
    "scheduler.retry_max": "a duration",
    "scheduler.missing_grace": "a duration (how long a queued item may be missing before its context closes)",
    "scheduler.notify": 'a JSON array of argv strings run on chosen events, e.g. ["notify-send", "{event}"]',
    "scheduler.notify_on": f"a JSON array or comma-separated list of: {', '.join(NOTIFY_EVENTS)}",
    "scheduler.notify_timeout": "a duration (a notifier still running then is killed)",
    "scheduler.compact_retention": "a duration (closed contexts older than this are archived)",
    "scheduler.compact_at": "an integer >= 0 (log lines before the daemon compacts; 0 = never)",
    "scheduler.label_caps.LABEL": "an integer >= 1 (at most N running polecats whose item carries LABEL)",
    "scheduler.token_budget": "an integer >= 0 (tokens per scheduler.budget_window; 0 = no budget)",
    "scheduler.budget_window": "a duration such as 1h, 30m",
    "scheduler.throttle_exit_code": "an integer 1..255 (a polecat exiting with it throttles its rig)",
    "scheduler.throttle_for": "a duration such as 5m",
    "scheduler.breaker_cooldown": "a duration (0 = a circuit-broken item stays broken)",
    "scheduler.retry_failed_runs": "an integer >= 0 (retries of a failed run; 0 = none)",
    "items.command_timeout": "a duration (an item command still running then is killed)",
    "items.refresh": "a duration (an item command runs again at least this often)",
    "items.read_wait": "a duration (how long a read command waits for an item command)",
    "rigs.NAME.items.command_timeout": "a duration, or none for items.command_timeout (command rigs only)",
    "rigs.NAME.items.refresh": "a duration, or none for items.refresh (command rigs only)",
    "scheduler.host.max_load": "a number > 0 (1-minute load average per core above which nothing launches;"
    " off = no limit)",
    "scheduler.host.min_free_memory": "a size such as 2GiB (free memory below which nothing launches; off)",
    "scheduler.host.min_free_disk": "a size such as 5GiB (free disk on the town's or any rig's filesystem"
    " below which nothing launches; off)",
    "scheduler.hold_file": "a path (relative to the town root): while it exists nothing launches;"
    " empty = none",
    "rigs.NAME.max_polecats": "an integer >= 1 (the rig's own cap under the town cap)",
    "rigs.NAME.token_budget": "an integer >= 0 (tokens per scheduler.budget_window; 0 = no budget)",
    "executor.kind": "one of local, tmux, ray, demo, memory",
    "executor.command": 'a JSON array of argv strings, e.g. ["my-agent", "{item_id}"]',
    "executor.ray.address": "a Ray dashboard address, e.g. http://127.0.0.1:8265",
    "executor.ray.resources": 'a JSON object of resource amounts, e.g. {"agent_slot": 1}',
    "executor.workspace": "repo (polecats run in the rig's checkout) or clone (each run in a fresh clone)",
    "executor.workspace_root": "a directory for workspaces (relative: to the town root; empty ="
    " .sluice/runtime/workspaces/<host>)",
    "executor.workspace_keep": "an integer >= 0 (workspaces kept per rig for unsaved work or failed runs)",
    "executor.workspace_branch": "a branch template holding {item_id} (and {rig}), e.g. sluice/{item_id}",
    "rigs.NAME.workspace": "repo, clone, or none for executor.workspace",
    "rigs.NAME.remote": "a URL workspaces on other machines clone the rig from; none = not set",
}


_INTEGER_KEYS = ("max_polecats", "batch_size", "max_dispatch_failures", "token_budget", "throttle_exit_code",
                 "compact_at", "retry_failed_runs", "workspace_keep")


_NONE_KEYS = ("rigs.NAME.workspace", "rigs.NAME.remote")  # `none` unsets them


def config_pattern(key: str) -> str:
    """The :data:`CONFIG_KEYS` entry of ``key``: ``rigs.api.max_polecats`` → ``rigs.NAME.max_polecats``."""
    parts = key.split(".")
    if len(parts) == 3 and parts[0] == "rigs" and parts[1]:
        return f"rigs.NAME.{parts[2]}"
    if len(parts) == 4 and parts[0] == "rigs" and parts[1] and parts[2] == "items":
        return f"rigs.NAME.items.{parts[3]}"
    if len(parts) == 3 and parts[:2] == ["scheduler", "label_caps"] and parts[2]:
        return "scheduler.label_caps.LABEL"
    return key


def _known(key: str) -> str:
    pattern = config_pattern(key)
    if pattern not in CONFIG_KEYS:
        raise UsageError(f"unknown config key {key!r}; known keys: {', '.join(CONFIG_KEYS)}")
    return pattern


def parse_config_value(key: str, raw: str) -> Any:
    """Turn the text a person typed into the value for ``key``, or say why not."""
    pattern = _known(key)
    expect = CONFIG_KEYS[pattern]
    try:
        if key in ("executor.command", "executor.ray.resources", "scheduler.notify"):
            value = json.loads(raw)
        elif key == "scheduler.notify_on":
            text = raw.strip()
            parts = [p.strip() for p in text.split(",") if p.strip()]
            value = json.loads(text) if text.startswith("[") else parts
            if not all(isinstance(v, str) and v in NOTIFY_EVENTS for v in value):
                raise ValueError
        elif key == "scheduler.host.max_load":
            text = raw.strip().lower()
            value = None if text in ("", "off", "none") else float(text)
            if value is not None and not 0 < value <= 1_000_000:
                raise ValueError
        elif key.startswith("scheduler.host."):
            value = _size_field(raw)
        elif pattern == "scheduler.label_caps.LABEL" or key.endswith(_INTEGER_KEYS):
            value = int(raw.strip())
        elif (pattern.startswith("rigs.NAME.items.") or pattern in _NONE_KEYS) \
                and raw.strip().lower() in ("none", "null", ""):
            value = None
        else:
            value = raw.strip()
        # `[]` is the default ("not set": the executor's own command, or none for local).
        if key in ("executor.command", "scheduler.notify") and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            raise ValueError
        if key == "executor.ray.resources" and not isinstance(value, dict):
            raise ValueError
    except ValueError:
        raise UsageError(f"invalid value for {key}: {raw!r} (expected {expect})") from None
    return value


def apply_config_value(config: TownConfig, key: str, value: Any) -> TownConfig:
    """A copy of ``config`` with ``key`` set, validated as a whole."""
    pattern = _known(key)
    data = config.model_dump()
    _parent(data, key, pattern)[key.rsplit(".", 1)[1]] = value
    try:
        return TownConfig.model_validate(data)
    except ValidationError as err:
        expect = CONFIG_KEYS.get(pattern, "a valid value")
        why = "; ".join(_problem_text(problem) for problem in err.errors())
        raise UsageError(f"invalid value for {key}: {value!r} ({why}; expected {expect})") from None


def _problem_text(problem: dict) -> str:
    """A pydantic problem as a person reads it: our own validators' sentence, pydantic's otherwise."""
    if problem["type"] == "value_error":
        return str(problem["ctx"]["error"])
    return problem["msg"]


def _parent(data: dict, key: str, pattern: str) -> dict:
    """The dict of ``data`` (a dumped config) that holds ``key``'s last part (a missing one made)."""
    node = data
    *parents, _ = key.split(".")
    for part in parents:
        if part not in node:
            if pattern.startswith("rigs."):
                raise UsageError(f"unknown rig {part!r} in {key} (see `sluice rig list`)")
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):  # `rigs.NAME.items.…` of a rig reading an export file
            raise UsageError(f"{key}: rig {parents[1]!r} does not read its items through a command")
    return node


def get_config_value(config: TownConfig, key: str) -> Any:
    """The value of ``key``: None for a label without a cap."""
    return _parent(config.model_dump(), key, _known(key)).get(key.rsplit(".", 1)[1])


def load_model(model: type[BaseModel], path, text: str) -> BaseModel:
    """Parse ``text`` from ``path`` into ``model`` or raise a ConfigError naming the file."""
    data = json_object(path, text)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{path}: {validation_message(err)}") from None
