"""Sling-context fields and the scheduler state: plain records, checked as strictly as JSON allows."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.core.records import RecordError, SchedulerState, SlingContextFields

text = st.text(max_size=20)
contexts = st.builds(
    SlingContextFields,
    work_bead_id=text, target_rig=text, enqueued_at=text, formula=text, args=text, vars=text, agent=text,
    force=st.booleans(), dispatch_failures=st.integers(0, 10**6), last_failure=text,
    missing_since=text,
    # A newer sluice's keys; like every field, one holding a default ("", 0, false) is left out.
    extra=st.dictionaries(st.text(min_size=1).filter(lambda k: k not in SlingContextFields._kinds),
                          st.integers(min_value=1) | st.text(min_size=1), max_size=3),
)


@given(contexts)
def test_a_context_survives_its_description(fields):
    assert SlingContextFields.from_description(fields.to_description()) == fields


@pytest.mark.parametrize("change", [
    {"work_bead_id": 7}, {"force": "yes"}, {"dispatch_failures": -1}, {"dispatch_failures": True},
    {"dispatch_failures": 1.5}, {"version": "1"}, {"target_rig": None},
])
def test_a_field_of_the_wrong_type_makes_the_description_no_context(change):
    good = {"work_bead_id": "a-1", "target_rig": "alpha", "enqueued_at": "2026-01-01T00:00:00Z"}
    assert SlingContextFields.from_description(json.dumps(good)) is not None
    assert SlingContextFields.from_description(json.dumps({**good, **change})) is None


def test_a_missing_required_field_makes_the_description_no_context():
    assert SlingContextFields.from_description('{"work_bead_id": "a-1", "target_rig": "alpha"}') is None


def test_unknown_keys_are_kept_through_a_copy():
    state = SchedulerState.from_dict({"paused": True, "paused_by": "ann", "from_the_future": [1]})
    changed = state.copy(last_dispatch_count=2)
    expected = {"paused": True, "paused_by": "ann", "last_dispatch_count": 2, "from_the_future": [1]}
    assert changed.to_dict(exclude_none=True) == expected
    assert state.last_dispatch_count == 0
    with pytest.raises(RecordError, match="paused"):
        SchedulerState.from_dict({"paused": "no"})


def _through_init(cls, data: dict):
    """``from_dict`` as the dataclass's own ``__init__`` builds the record: the reference the fast
    construction must equal, attribute order included."""
    from sluice.core.records import _check

    if not isinstance(data, dict):
        raise RecordError("not an object")
    if any(name not in data for name in cls._required):
        raise RecordError("required")
    known, extra = {}, {}
    for key, value in data.items():
        spec = cls._kinds.get(key)
        if spec is None:
            extra[key] = value
        else:
            known[key] = value if type(value) is spec[0] else _check(key, value, *spec)
    record = cls(**known, extra=extra)
    record._validate()
    return record


values = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-3, 3) | text | st.lists(text, max_size=2)
keys = st.sampled_from([*SlingContextFields._kinds, *SchedulerState._kinds, "extra", "new"])


@st.composite
def objects(draw, cls):
    """Mostly well-typed objects with the required keys (the valid records), some anything at all."""
    typed = {str: text, int: st.integers(-1, 10**6), bool: st.booleans()}
    data = {name: draw(typed[cls._kinds[name][0]] | values) for name in cls._required}
    data.update(draw(st.dictionaries(keys, values, max_size=8)))
    if draw(st.booleans()):  # keep the order of the keys a writer would not choose
        data = dict(reversed(list(data.items())))
    return data


@given(st.sampled_from([SlingContextFields, SchedulerState]).flatmap(lambda c: st.tuples(st.just(c),
                                                                                     objects(c))))
def test_from_dict_builds_what_the_dataclass_init_builds(case):
    cls, data = case
    try:
        expected = _through_init(cls, data)
    except RecordError:
        with pytest.raises(RecordError):
            cls.from_dict(data)
        return
    got = cls.from_dict(data)
    assert got == expected and got.extra == expected.extra and got.extra is not data
    assert list(vars(got)) == list(vars(expected)) and got.to_dict() == expected.to_dict()
