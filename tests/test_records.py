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
    expected = {"paused": True, "paused_by": "ann", "paused_at": None, "last_dispatch_at": None,
                "last_dispatch_count": 2, "from_the_future": [1]}
    assert changed.to_dict() == expected
    assert state.last_dispatch_count == 0
    with pytest.raises(RecordError, match="paused"):
        SchedulerState.from_dict({"paused": "no"})
