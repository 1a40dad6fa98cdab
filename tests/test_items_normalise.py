"""The beads import defaults and the context test, held to their plain statements on random records.

Both run once per queued item in every survey, so they take shortcuts for the
common record (a beads priority, no labels); the shortcuts must give exactly
what the rules give, key order included.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core.items import CONTEXT_LABEL, is_context, labels_of, normalise, priority_of

scalars = st.none() | st.booleans() | st.integers(-2, 6) | st.floats(-1, 5) | st.sampled_from(["", "x", "2"])
labels = st.none() | st.just([]) | st.lists(st.sampled_from([CONTEXT_LABEL, "gpu", 3, None]), max_size=3) \
    | st.sampled_from(["", CONTEXT_LABEL])
records = st.fixed_dictionaries({"id": st.just("a-1")}, optional={
    "status": scalars, "issue_type": scalars, "priority": st.integers(-1, 6) | scalars, "wisp": scalars,
    "ephemeral": scalars, "labels": labels, "title": st.text(max_size=3)})


def _rules(record: dict) -> dict:
    """normalise as the rules say it: each default applied in turn, the priority always rewritten."""
    if "wisp" in record and "ephemeral" not in record:
        record["ephemeral"] = bool(record.pop("wisp"))
    record.setdefault("status", "open")
    if not record.get("status"):
        record["status"] = "open"
    if not record.get("issue_type"):
        record["issue_type"] = "task"
    record["priority"] = priority_of(record)
    return record


@settings(max_examples=300)
@given(records)
def test_normalise_gives_what_the_rules_give(record):
    expected = _rules(copy.deepcopy(record))
    got = normalise(record)
    assert got == expected and list(got) == list(expected)
    assert all(type(got[key]) is type(expected[key]) for key in got)


@given(records)
def test_is_context_is_the_label_among_the_text_labels(record):
    assert is_context(record) == (CONTEXT_LABEL in labels_of(record))
