"""The scoring policy file, ``.sluice/schedule/policy.json`` (metagit's shape).

The file holds the four weights, the merge-pressure settings and per-graph
weight overrides.  Two metagit failures shape this module:

* metagit accepted ``merge_queue_threshold 0`` on ``policy set`` and then
  failed on every later command until the file was fixed by hand.  Here the
  threshold is validated on construction, on assignment, on set (before
  anything is written) and on load, and a bad file is reported in one line
  that names it: never a pydantic dump.
* metagit read the policy outside its lock and wrote it in place, so two
  concurrent sets could lose one update and a reader could see half a file.
  Here a set re-reads under the lock and replaces the file atomically.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sluice.core import scoring
from sluice.core.text import unencodable_problem
from sluice.errors import ConfigError, InvalidOperation, UsageError
from sluice.store.files.fsutil import atomic_write_json, file_lock, read_edited

WEIGHT_NAMES = scoring.WEIGHT_NAMES
#: A weight (or penalty, or aging setting) as the file may hold it: finite, and small enough that no
#: score can overflow (:data:`sluice.core.scoring.MAX_WEIGHT`).
BoundedFloat = Annotated[float, Field(ge=-scoring.MAX_WEIGHT, le=scoring.MAX_WEIGHT)]


class PolicyWeights(BaseModel):
    """Base weights; with the defaults one priority point outweighs affinity plus cost."""

    model_config = ConfigDict(validate_assignment=True, allow_inf_nan=False)

    priority: BoundedFloat = 1.0
    affinity: BoundedFloat = 0.5
    cost: BoundedFloat = 0.25
    fairness: BoundedFloat = 0.0
    deadline: BoundedFloat = 0.0  # beads' due_at; 0 keeps every score metagit's


class GraphOverride(BaseModel):
    """Per-graph weights; ``None`` means "use the base weight"."""

    model_config = ConfigDict(validate_assignment=True, allow_inf_nan=False)

    priority: BoundedFloat | None = None
    affinity: BoundedFloat | None = None
    cost: BoundedFloat | None = None
    fairness: BoundedFloat | None = None
    deadline: BoundedFloat | None = None


class Policy(BaseModel):
    """The whole policy.  Unknown keys in the file are ignored (as metagit does)."""

    model_config = ConfigDict(validate_assignment=True, allow_inf_nan=False)

    weights: PolicyWeights = Field(default_factory=PolicyWeights)
    merge_queue_threshold: int = 3
    merge_pressure_penalty: BoundedFloat = 2.0
    skip_on_merge_pressure: bool = False
    graph_overrides: dict[str, GraphOverride] = Field(default_factory=dict)
    # Aging: score points per hour a context has been queued, at most ``aging_max`` (0 = off, so
    # scores stay metagit's), so low-priority work is not starved forever.
    aging: float = Field(0.0, ge=0, le=scoring.MAX_WEIGHT)
    aging_max: float = Field(2.0, ge=0, le=scoring.MAX_WEIGHT)

    @field_validator("merge_queue_threshold")
    @classmethod
    def _threshold_at_least_one(cls, value: int) -> int:
        # A threshold of 0 would put every rig under pressure, always.
        if value < 1:
            raise ValueError(f"merge_queue_threshold must be >= 1 (got {value})")
        return value

    def weights_for(self, graph_id: str | None) -> scoring.Weights:
        """The weights scoring should use for items of ``graph_id``."""
        return scoring.resolve_weights(self, graph_id)


# --------------------------------------------------------------------------
# Reading


def load_policy(path: Path) -> Policy:
    """Read the policy; a missing file means the defaults.

    Anything else that is wrong with the file is a :class:`ConfigError` whose
    one-line message names the file, so ``sluice`` can print it as is.
    """
    return read_policy(path)[1]


def read_policy(path: Path) -> tuple[bytes | None, Policy]:
    """The policy and the exact bytes it was read from (None: no file, the defaults)."""
    path = Path(path)
    try:
        raw = read_edited(path, "policy")
        if raw is None:
            return None, Policy()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the policy file ({exc})") from None
    return raw, _parse_policy(path, text)


def _parse_policy(path: Path, text: str) -> Policy:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ConfigError(f"{path}: invalid JSON ({where}: {exc.msg})") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid JSON (nested too deeply)") from None
    if not isinstance(document, dict):
        kind = type(document).__name__ if document is not None else "null"
        raise ConfigError(f"{path}: invalid schedule policy document (expected a JSON object, got {kind})")
    problem = unencodable_problem(document)
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")
    try:
        return Policy.model_validate(document)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe_validation_error(exc)}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """Pydantic's error list as one readable line: ``field: problem (got value)``."""
    parts = []
    for error in exc.errors():
        if error["type"] == "value_error":
            # Our own validators already wrote a complete sentence.
            parts.append(str(error["ctx"]["error"]))
            continue
        where = ".".join(str(step) for step in error["loc"]) or "policy"
        got = repr(error["input"])
        if len(got) > 60:
            got = got[:57] + "..."
        parts.append(f"{where}: {error['msg']} (got {got})")
    return "; ".join(parts)


# --------------------------------------------------------------------------
# Writing


def _weight_flag(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{name} must be a number (got {value!r})", parameters=(name,))
    number = float(value)
    if not math.isfinite(number):
        raise UsageError(f"{name} must be a finite number (got {value!r})", parameters=(name,))
    if abs(number) > scoring.MAX_WEIGHT:
        raise UsageError(f"{name} must be between -{scoring.MAX_WEIGHT:g} and {scoring.MAX_WEIGHT:g}"
                         f" (got {value!r}), so that no score can overflow", parameters=(name,))
    return number


def set_policy(
    path: Path,
    lock_path: Path,
    *,
    priority: float | None = None,
    affinity: float | None = None,
    cost: float | None = None,
    fairness: float | None = None,
    deadline: float | None = None,
    merge_queue_threshold: int | None = None,
    merge_pressure_penalty: float | None = None,
    skip_on_merge_pressure: bool | None = None,
    graph_id: str | None = None,
    aging: float | None = None,
    aging_max: float | None = None,
) -> Policy:
    """Change some policy fields and return the policy as saved.

    Weights go to ``graph_overrides[graph_id]`` when a graph is named (only
    the weights given are set there; the rest stay null), else to the base
    weights.  Threshold, penalty and skip are always global.  Every argument
    is checked before the lock is taken, so a refused set writes nothing.
    The file is rewritten even when nothing changed (as metagit does), which
    also normalises a hand-edited file.
    """
    given = {"priority": priority, "affinity": affinity, "cost": cost, "fairness": fairness,
             "deadline": deadline}
    weight_updates = {name: _weight_flag(name, v) for name, v in given.items() if v is not None}
    if merge_queue_threshold is not None:
        if isinstance(merge_queue_threshold, bool) or not isinstance(merge_queue_threshold, int):
            raise UsageError(f"merge_queue_threshold must be an integer (got {merge_queue_threshold!r})",
                             parameters=("merge_queue_threshold",))
        if merge_queue_threshold < 1:
            raise UsageError(f"merge_queue_threshold must be >= 1 (got {merge_queue_threshold})",
                             parameters=("merge_queue_threshold",))
    if merge_pressure_penalty is not None:
        merge_pressure_penalty = _weight_flag("merge_pressure_penalty", merge_pressure_penalty)
    if skip_on_merge_pressure is not None and not isinstance(skip_on_merge_pressure, bool):
        # metagit's bool("false") stored True; only a real boolean is accepted.
        raise UsageError(f"skip_on_merge_pressure must be true or false (got {skip_on_merge_pressure!r})",
                         parameters=("skip_on_merge_pressure",))
    if graph_id is not None and (not isinstance(graph_id, str) or not graph_id.strip()):
        raise UsageError(f"graph_id must be a non-empty string (got {graph_id!r})", parameters=("graph_id",))
    given_ages = (("aging", aging), ("aging_max", aging_max))
    ages = {name: _weight_flag(name, v) for name, v in given_ages if v is not None}
    for name, value in ages.items():
        if value < 0:
            raise UsageError(f"{name} must be >= 0 (got {value:g})", parameters=(name,))

    path = Path(path)
    with file_lock(lock_path):
        document = load_policy(path).model_dump()
        if weight_updates:
            if graph_id is not None:
                overrides = document["graph_overrides"]
                target = overrides.setdefault(graph_id, dict.fromkeys(WEIGHT_NAMES))
            else:
                target = document["weights"]
            target.update(weight_updates)
        settings = (("merge_queue_threshold", merge_queue_threshold),
                    ("merge_pressure_penalty", merge_pressure_penalty),
                    ("skip_on_merge_pressure", skip_on_merge_pressure), *ages.items())
        document.update((name, value) for name, value in settings if value is not None)
        policy = Policy.model_validate(document)
        atomic_write_json(path, policy.model_dump(mode="json"), mode=0o600)
    return policy


def unset_graph_override(path: Path, lock_path: Path, graph_id: str) -> Policy:
    """Remove ``graph_overrides[graph_id]`` (its items score with the base weights again).

    The graph need not exist any more: an override left by an epic that was
    closed or deleted is exactly what one wants to remove.  Naming a graph
    that has no override is refused, naming the ones that do.
    """
    if not isinstance(graph_id, str) or not graph_id.strip():
        raise UsageError(f"graph_id must be a non-empty string (got {graph_id!r})", parameters=("graph_id",))
    graph_id = graph_id.strip()
    path = Path(path)
    with file_lock(lock_path):
        document = load_policy(path).model_dump()
        overrides = document["graph_overrides"]
        if graph_id not in overrides:
            known = ", ".join(sorted(overrides)) or "none"
            raise InvalidOperation(f"graph {graph_id!r} has no policy override (overridden: {known})")
        del overrides[graph_id]
        policy = Policy.model_validate(document)
        atomic_write_json(path, policy.model_dump(mode="json"), mode=0o600)
    return policy
