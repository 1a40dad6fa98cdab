"""The results' frozen records behave as the dataclasses they replace: fields, defaults, order, frozen."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import ClassVar

import pytest

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
