"""The two records sluice writes for itself many times a day: sling-context fields and the state.

Both are read on the hot path (``scheduler status`` and ``list`` parse every
open context and the state), where importing pydantic would cost more than
the answer, and both are written by sluice alone, so a few plain type checks
say all there is to say about them.  They are plain dataclasses that keep
any key they do not know (a newer sluice's fields survive an older one).

A value of the wrong type makes a context unparseable (its description is not
a context) and makes the state file a :class:`~sluice.errors.ConfigError`
naming it, as a hand edit gone wrong should.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from sluice.core.recordclass import field, fields, recordclass


class RecordError(ValueError):
    """A field of a record has a value of the wrong type or range."""


def json_object(path, text: str) -> dict[str, Any]:
    """The JSON object in ``text`` read from ``path``, or a ConfigError naming the file."""
    from sluice.core.text import unencodable_problem
    from sluice.errors import ConfigError

    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:  # RecursionError: nested too deeply to parse
        raise ConfigError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    problem = unencodable_problem(data)
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")
    return data


def _check(name: str, value: Any, kind: type, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if kind is int:
        # As JSON has it: an integer, not a boolean, not a float with a fraction.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise RecordError(f"{name}: expected an integer (got {value!r})")
        return int(value)
    if not isinstance(value, kind):
        raise RecordError(f"{name}: expected {'text' if kind is str else kind.__name__} (got {value!r})")
    return value


class _Record:
    """Shared parsing, dumping and copying of the records below."""

    _required: ClassVar[tuple[str, ...]] = ()
    _kinds: ClassVar[dict[str, tuple[type, bool]]] = {}
    extra: dict[str, Any]

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """The record of a parsed JSON object; :class:`RecordError` names what is wrong."""
        if not isinstance(data, dict):
            raise RecordError(f"expected a JSON object (got {type(data).__name__})")
        missing = [name for name in cls._required if name not in data]
        if missing:
            raise RecordError(f"{', '.join(missing)}: required")
        known, extra = {}, {}
        kinds = cls._kinds
        for key, value in data.items():
            spec = kinds.get(key)
            if spec is None:
                extra[key] = value
            elif type(value) is spec[0]:  # the common case, checked at the cost of one comparison
                known[key] = value
            else:
                known[key] = _check(key, value, *spec)
        record = cls(**known, extra=extra)
        record._validate()
        return record

    def _validate(self) -> None:
        """Range checks beyond the types."""

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        data.update(self.extra)
        return data

    def copy(self, **changes: Any):
        """A copy with ``changes`` applied (and checked)."""
        return type(self).from_dict({**json.loads(json.dumps(self.to_dict())), **changes})


def _kinds(cls) -> dict[str, tuple[type, bool]]:
    """Each field's JSON type and whether it may be null, read off the dataclass annotations."""
    types = {"str": str, "int": int, "bool": bool}
    out = {}
    for f in fields(cls):
        if f.name == "extra":
            continue
        text = str(f.type).replace(" ", "")
        optional = text.endswith("|None")
        out[f.name] = (types[text.removesuffix("|None")], optional)
    return out


@recordclass
class SlingContextFields(_Record):
    """The JSON a sling context carries in its description (Gas Town's shape)."""

    work_bead_id: str
    target_rig: str
    enqueued_at: str
    version: int = 1
    formula: str = ""
    args: str = ""
    vars: str = ""
    agent: str = ""
    force: bool = False
    dispatch_failures: int = 0
    run_failures: int = 0  # failed runs of the item since it was slung (retries carry it over)
    last_failure: str = ""
    last_failure_at: str = ""
    launch_started_at: str = ""
    missing_since: str = ""  # when a cycle first found the work item missing from every rig
    promoted_at: str = ""  # `scheduler promote`: ahead of score order, in the order of promotion
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    _required: ClassVar[tuple[str, ...]] = ("work_bead_id", "target_rig", "enqueued_at")

    def _validate(self) -> None:
        if self.dispatch_failures < 0:
            raise RecordError(f"dispatch_failures: must be >= 0 (got {self.dispatch_failures})")
        if self.run_failures < 0:
            raise RecordError(f"run_failures: must be >= 0 (got {self.run_failures})")

    def to_description(self) -> str:
        """The compact JSON written into the context's description: defaults left out (``from_dict``
        reads it back whole)."""
        keep = {"version", "work_bead_id", "target_rig", "enqueued_at"}
        compact = {k: v for k, v in self.to_dict().items() if k in keep or v not in ("", False, 0, None)}
        return json.dumps(compact, separators=(",", ":"), ensure_ascii=False)

    def queue_facts(self) -> tuple[str | None, str, int]:
        """``(target_rig, enqueued_at normalised, plain)``: the town database's queue columns.

        Plain: the context's place in the queue is decided by its item alone
        (the views count and order such contexts with SQL, and read the rest
        whole).
        """
        from sluice.core.clock import order_text

        plain = bool(self.work_bead_id and self.target_rig) and not (
            self.dispatch_failures or self.run_failures or self.last_failure or self.last_failure_at
            or self.launch_started_at or self.missing_since or self.force or self.promoted_at)
        return self.target_rig or None, order_text(self.enqueued_at), int(plain)

    @classmethod
    def from_description(cls, text: str | None) -> SlingContextFields | None:
        """The parsed fields, or None when the description is not a valid context."""
        if not isinstance(text, str):  # a hand-edited log may hold any JSON value here
            return None
        try:
            return cls.from_dict(json.loads(text or ""))
        except (ValueError, RecursionError):  # RecordError is a ValueError, as is bad JSON
            return None

@recordclass
class SchedulerState(_Record):
    """The scheduler's state (the town database's ``scheduler_state`` row): the pause flag and the last
    dispatch."""

    paused: bool = False
    paused_by: str | None = None
    paused_at: str | None = None
    last_dispatch_at: str | None = None
    last_dispatch_count: int = 0
    extra: dict[str, Any] = field(default_factory=dict, repr=False)


SlingContextFields._kinds = _kinds(SlingContextFields)
SchedulerState._kinds = _kinds(SchedulerState)
