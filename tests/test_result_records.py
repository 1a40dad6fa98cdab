"""The results' frozen records behave as the dataclasses they replace: fields, defaults, order, frozen."""

from __future__ import annotations

from typing import ClassVar

import pytest

from sluice import results
from sluice.core.recordclass import FrozenInstanceError
from sluice.results import ItemRows, QueueEntry, RigInfo, _Document, field, result


@result
class Base(_Document):
    name: str
    size: int = 0
    tags: list = field(default_factory=list)
    kind: ClassVar[str] = "base"  # a class constant, not a field


@result
class Child(Base):
    extra: str | None = None


def test_fields_come_base_first_with_their_defaults_and_class_constants_are_not_fields():
    assert list(Child._spec) == ["document", "name", "size", "tags", "extra"]
    made = Child("n", document={})
    assert (made.name, made.size, made.tags, made.extra, made.kind) == ("n", 0, [], None, "base")
    assert made.tags is not Child("m", document={}).tags  # a factory makes one per record


def test_positional_and_keyword_arguments_as_a_dataclass_takes_them():
    # the document is not compared
    assert Child("n", 3, document={}) == Child(name="n", size=3, document={"other": 1})
    assert ItemRows(['{"id": "a"}']).records == [{"id": "a"}]
    with pytest.raises(TypeError, match="missing required argument 'name'"):
        Child(document={})
    with pytest.raises(TypeError, match="unexpected or repeated argument 'colour'"):
        Child("n", colour="red", document={})
    with pytest.raises(TypeError, match="unexpected or repeated argument 'name'"):
        Child("n", name="again", document={})
    with pytest.raises(TypeError):
        Child("n", 1, [], None, "too many", document={})


def test_records_are_frozen_hashable_and_show_their_fields_but_not_the_document():
    made = Child("n", document={"secret": 1})
    with pytest.raises(FrozenInstanceError):
        made.name = "other"
    with pytest.raises(FrozenInstanceError):
        del made.name
    entry = {"name": "a", "prefix": "a", "repo": "/r", "items": "/i", "read_only": False, "source": "own"}
    assert hash(RigInfo.from_json(entry)) == hash(RigInfo.from_json({**entry, "extra": 1}))
    with pytest.raises(TypeError, match="unhashable"):  # as a frozen dataclass with a list field
        hash(Base("n", document={}))
    assert repr(Base("n", 2, document={"secret": 1})) == "Base(name='n', size=2, tags=[])"
    assert Base("n", document={}) != Child("n", document={})  # another class is never equal


def test_a_document_missing_a_required_key_fails_at_once_and_optional_keys_take_their_default():
    row = {"id": "al-1", "title": "t", "status": "open", "target_rig": "alpha", "blocked": False,
           "context_id": "al-wisp-1", "enqueued_at": "x", "dispatch_failures": 0, "last_failure": None,
           "retry_at": None, "score": 1.0}
    entry = QueueEntry.from_json(row)
    assert entry.start_at is None and entry.to_json() is row
    with pytest.raises(KeyError, match="target_rig"):
        QueueEntry.from_json({k: v for k, v in row.items() if k != "target_rig"})
    rig = RigInfo.from_json({"name": "a", "prefix": "a", "repo": "/r", "items": "/i", "read_only": False,
                             "source": "own", "remote": "u"})
    assert (rig.remote, rig.items_command) == ("u", None)


def _parts() -> list[tuple[type, str, results._Part]]:
    classes = [value for value in vars(results).values()
               if isinstance(value, type) and "_spec" in vars(value)]
    return [(cls, name, value) for cls in classes for name, value in vars(cls).items()
            if isinstance(value, results._Part) and value.row is None]  # typed rows: see the next test


def _bare(cls: type, document: dict):
    made = object.__new__(cls)  # no fields: only the parts are read
    object.__setattr__(made, "document", document)
    return made


def test_every_part_reads_its_own_key_and_an_optional_one_reads_none_or_empty_when_absent():
    parts = _parts()
    assert {"binding", "basis", "labels"} <= {name for _, name, part in parts if not part.required}
    assert {"reasons", "rigs", "event"} <= {name for _, name, part in parts if part.required}
    for cls, name, part in parts:
        value = object()
        others = {key: object() for _, key, _ in parts if key != name}
        assert getattr(_bare(cls, {**others, name: value}), name) is value, (cls, name)
        if part.required:
            with pytest.raises(KeyError, match=name):
                getattr(_bare(cls, others), name)
        else:
            assert getattr(_bare(cls, others), name) == ([] if part.empty else None), (cls, name)
    assert results.Item.from_json({"id": "a", "labels": None}).labels == []


def test_typed_rows_are_read_from_their_own_key_once():
    snap = _bare(results.Snapshot, {"runs": [{"run_id": "r-1"}], "queue": []})
    assert [run.run_id for run in snap.runs] == ["r-1"] and snap.runs is snap.runs and snap.queue == []
    with pytest.raises(KeyError, match="queue"):
        _ = _bare(results.Snapshot, {"runs": []}).queue


def test_parts_are_not_fields_and_cannot_be_assigned():
    status = _bare(results.QueueStatus, {"binding": {"code": "paused"}})
    assert "binding" not in results.QueueStatus._spec
    assert "``{\"code\", \"detail\"}``" in results.QueueStatus.binding.__doc__
    with pytest.raises(FrozenInstanceError):
        status.binding = None
    with pytest.raises(FrozenInstanceError):
        results.QueueStatus.binding.__set__(status, None)


def _twin(cls):
    """The frozen dataclass ``cls`` was before it became a record: same fields, same defaults."""
    import dataclasses

    from sluice.core.recordclass import MISSING

    specs = []
    for name, f in cls._spec.items():
        options = {"repr": f.repr, "compare": f.compare}
        if f.default is not MISSING:
            options["default"] = f.default
        elif f.factory is not MISSING:
            options["default_factory"] = f.factory
        specs.append((name, object, dataclasses.field(**options)))
    return dataclasses.make_dataclass(cls.__name__, specs, frozen=True)


def test_core_classes_made_records_behave_as_their_frozen_dataclasses():
    from sluice.core import admission, gates, replay
    from sluice.core.admission import Throttle

    cases = [(admission.Limits, (3, 2), {"rig_caps": {"a": 1}}), (Throttle, (5.0,), {"reason": "r"}),
             (replay.Limits, (4, {}, 1, 0.0, 30.0), {}), (gates.HostLimits, (), {})]
    for cls, args, kwargs in cases:
        made, twin = cls(*args, **kwargs), _twin(cls)(*args, **kwargs)
        assert repr(made) == repr(twin)
        assert made == cls(*args, **kwargs) and made != twin  # equal by fields, never to another class
        with pytest.raises(FrozenInstanceError):
            made.anything = 1
    throttle = Throttle(5.0, "alpha")
    assert hash(throttle) == hash(Throttle(5.0, "alpha")) and {throttle: 1}[Throttle(5.0, "alpha")] == 1
    assert admission.Limits(1, 1).rig_caps is not admission.Limits(1, 1).rig_caps  # a factory per record
