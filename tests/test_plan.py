"""Dispatch planning: Gas Town's PlanDispatch table, circuit breaker, back-off."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.core.plan import (
    DispatchPlan,
    is_circuit_broken,
    next_attempt_at,
    pick_oldest_per_item,
    plan_dispatch,
    retry_delay,
)
from sluice.core.recordclass import FrozenInstanceError
from sluice.errors import ConfigError

# (name, capacity, batch, ready count) -> (dispatched, skipped, reason)
PLAN_TABLE = [
    # Gas Town TestPlanDispatch
    ("no ready beads", 5, 3, 0, 0, 0, "none"),
    ("no capacity (negative)", -1, 3, 10, 0, 10, "capacity"),
    ("no capacity (zero)", 0, 3, 10, 0, 10, "capacity"),
    ("capacity constrains", 2, 3, 10, 2, 8, "capacity"),
    ("batch constrains", 10, 3, 10, 3, 7, "batch"),
    ("ready constrains", 10, 5, 2, 2, 0, "ready"),
    ("large capacity, batch constrains", 100, 3, 10, 3, 7, "batch"),
    ("large capacity, ready constrains", 100, 5, 2, 2, 0, "ready"),
    ("all equal", 3, 3, 3, 3, 0, "batch"),
    ("single bead", 10, 3, 1, 1, 0, "ready"),
    ("capacity 1", 1, 3, 10, 1, 9, "capacity"),
    # vectors derived from the code (reference §4.1)
    ("tie capacity=ready below batch", 3, 5, 3, 3, 0, "batch"),
    ("tie capacity=batch below ready", 2, 2, 5, 2, 3, "batch"),
    ("ready strictly smallest", 4, 5, 3, 3, 0, "ready"),
    ("capacity strictly smallest", 3, 5, 4, 3, 1, "capacity"),
    ("empty queue beats zero capacity", 0, 3, 0, 0, 0, "none"),
    # one ready bead, cap 5, batch 1: ready == batch is a tie => batch (reference §3.4)
    ("one bead, batch 1", 5, 1, 1, 1, 0, "batch"),
]


@pytest.mark.parametrize(
    ("capacity", "batch", "ready", "count", "skipped", "reason"),
    [row[1:] for row in PLAN_TABLE],
    ids=[row[0] for row in PLAN_TABLE],
)
def test_plan_dispatch_table(capacity, batch, ready, count, skipped, reason):
    pending = [f"ctx-{i}" for i in range(ready)]
    plan = plan_dispatch(capacity, batch, pending)
    assert len(plan.to_dispatch) == count
    assert plan.skipped == skipped
    assert plan.reason == reason


def test_plan_takes_the_first_n_in_input_order():
    pending = ["ctx-c", "ctx-a", "ctx-b", "ctx-d"]
    plan = plan_dispatch(capacity=10, batch=3, pending=pending)
    assert plan.to_dispatch == ("ctx-c", "ctx-a", "ctx-b")


def test_plan_accepts_any_sequence_and_returns_a_tuple():
    plan = plan_dispatch(2, 5, ("a", "b", "c"))
    assert plan == DispatchPlan(to_dispatch=("a", "b"), skipped=1, reason="capacity")


@pytest.mark.parametrize("batch", [0, -1])
def test_batch_below_one_is_a_config_error(batch):
    with pytest.raises(ConfigError, match=rf"scheduler\.batch_size must be >= 1 \(got {batch}\)"):
        plan_dispatch(5, batch, ["a", "b"])


def test_batch_below_one_is_refused_even_with_an_empty_queue():
    with pytest.raises(ConfigError):
        plan_dispatch(5, 0, [])


def test_plan_is_frozen():
    plan = plan_dispatch(1, 1, ["a"])
    with pytest.raises(FrozenInstanceError):
        plan.skipped = 3  # type: ignore[misc]


@given(
    capacity=st.integers(min_value=-5, max_value=30),
    batch=st.integers(min_value=1, max_value=30),
    ready=st.integers(min_value=0, max_value=40),
)
def test_plan_properties(capacity, batch, ready):
    pending = list(range(ready))
    plan = plan_dispatch(capacity, batch, pending)
    count = len(plan.to_dispatch)

    assert count == min(max(capacity, 0), batch, ready)
    assert count + plan.skipped == ready
    assert plan.to_dispatch == tuple(pending[:count])

    if ready == 0:
        assert plan.reason == "none"
    elif capacity <= 0:
        assert plan.reason == "capacity"
    elif capacity < batch and capacity < ready:
        assert plan.reason == "capacity"
        assert count == capacity
    elif ready < batch and ready < capacity:
        assert plan.reason == "ready"
        assert count == ready and plan.skipped == 0
    else:
        # batch is the limit, or two limits tie for it
        assert plan.reason == "batch"
        assert count == batch or count == capacity == ready


# --------------------------------------------------------------------------
# Circuit breaker


@pytest.mark.parametrize(("failures", "broken"), [(0, False), (1, False), (2, False), (3, True), (5, True)])
def test_circuit_breaker_threshold_three(failures, broken):
    assert is_circuit_broken(failures, 3) is broken


@pytest.mark.parametrize("failures", [0, 1, 5])
def test_threshold_zero_breaks_everything(failures):
    # Gas Town's NoRetryPolicy: always quarantine.
    assert is_circuit_broken(failures, 0)


# --------------------------------------------------------------------------
# Back-off


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(0, 0.0), (1, 30.0), (2, 60.0), (3, 120.0), (4, 240.0), (5, 300.0), (50, 300.0), (5000, 300.0)],
)
def test_retry_delay_doubles_up_to_the_maximum(failures, expected):
    assert retry_delay(failures, base=30.0, maximum=300.0) == expected


def test_retry_delay_with_zero_base_never_waits():
    assert retry_delay(10_000, base=0.0, maximum=60.0) == 0.0


def test_retry_delay_refuses_negative_settings():
    with pytest.raises(ValueError):
        retry_delay(1, base=-1.0, maximum=10.0)


def test_next_attempt_at():
    assert next_attempt_at(None, 0, 30.0, 300.0) is None
    assert next_attempt_at(None, 2, 30.0, 300.0) is None
    assert next_attempt_at(1000.0, 0, 30.0, 300.0) is None
    assert next_attempt_at(1000.0, 1, 30.0, 300.0) == 1030.0
    assert next_attempt_at(1000.0, 3, 30.0, 300.0) == 1120.0
    assert next_attempt_at(1000.0, 9, 30.0, 300.0) == 1300.0


@given(
    failures=st.integers(min_value=0, max_value=3000),
    base=st.floats(min_value=0, max_value=1e6),
    maximum=st.floats(min_value=0, max_value=1e9),
)
def test_retry_delay_is_bounded_and_monotone(failures, base, maximum):
    delay = retry_delay(failures, base, maximum)
    assert 0.0 <= delay <= maximum
    assert retry_delay(failures + 1, base, maximum) >= delay


# --------------------------------------------------------------------------
# One context per item


def _ctx(ctx_id, item, enqueued_at):
    return SimpleNamespace(id=ctx_id, item=item, enqueued_at=enqueued_at)


def test_oldest_context_per_item_wins():
    contexts = [
        _ctx("c1", "gt-a", "2026-01-02T00:00:00Z"),
        _ctx("c2", "gt-b", "2026-01-01T00:00:00Z"),
        _ctx("c3", "gt-a", "2026-01-01T00:00:00Z"),  # older duplicate of gt-a
        _ctx("c4", "gt-c", "2026-01-03T00:00:00Z"),
        _ctx("c5", "gt-b", "2026-01-05T00:00:00Z"),
    ]
    survivors, duplicates = pick_oldest_per_item(
        contexts, item_of=lambda c: c.item, order_key=lambda c: c.enqueued_at, id_of=lambda c: c.id
    )
    assert [c.id for c in survivors] == ["c2", "c3", "c4"]
    assert [c.id for c in duplicates] == ["c1", "c5"]


def test_same_timestamp_is_decided_by_context_id():
    contexts = [_ctx("ctx-z", "gt-a", "2026-01-01T00:00:00Z"), _ctx("ctx-m", "gt-a", "2026-01-01T00:00:00Z")]
    survivors, duplicates = pick_oldest_per_item(
        contexts, item_of=lambda c: c.item, order_key=lambda c: c.enqueued_at, id_of=lambda c: c.id
    )
    assert [c.id for c in survivors] == ["ctx-m"]
    assert [c.id for c in duplicates] == ["ctx-z"]


def test_without_id_of_the_first_listed_wins_a_tie():
    contexts = [_ctx("ctx-z", "gt-a", "t"), _ctx("ctx-m", "gt-a", "t")]
    survivors, duplicates = pick_oldest_per_item(contexts, lambda c: c.item, lambda c: c.enqueued_at)
    assert [c.id for c in survivors] == ["ctx-z"]
    assert [c.id for c in duplicates] == ["ctx-m"]


@given(
    st.lists(
        st.tuples(st.sampled_from("abcd"), st.integers(min_value=0, max_value=5)),
        max_size=20,
    )
)
def test_pick_oldest_keeps_exactly_one_minimal_context_per_item(rows):
    contexts = [_ctx(f"ctx-{i:02d}", item, stamp) for i, (item, stamp) in enumerate(rows)]
    survivors, duplicates = pick_oldest_per_item(
        contexts, lambda c: c.item, lambda c: c.enqueued_at, id_of=lambda c: c.id
    )
    assert len(survivors) + len(duplicates) == len(contexts)
    assert sorted(c.item for c in survivors) == sorted({c.item for c in contexts})
    for winner in survivors:
        rivals = [c for c in contexts if c.item == winner.item]
        assert (winner.enqueued_at, winner.id) == min((c.enqueued_at, c.id) for c in rivals)
    # both lists keep input order
    assert survivors == [c for c in contexts if c in survivors]
    assert duplicates == [c for c in contexts if c in duplicates]


def _oldest_by_every_key(contexts, item_of, order_key, id_of=None):
    """The reference: a key for every context, the smallest per item wins, both lists in input order."""
    listed = list(contexts)
    best: dict = {}
    for position, context in enumerate(listed):
        key = (order_key(context), id_of(context) if id_of is not None else None, position)
        item = item_of(context)
        if item not in best or key < best[item]:
            best[item] = key
    won = {key[2] for key in best.values()}
    return ([c for i, c in enumerate(listed) if i in won], [c for i, c in enumerate(listed) if i not in won])


@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 3), st.sampled_from(["x", "y", "z"])),
                max_size=25), st.booleans())
def test_pick_oldest_equals_a_key_for_every_context(rows, with_ids):
    """Keys are compared only among an item's contexts: the answer is the one that keys all of them."""
    contexts = [_ctx(context_id, item, stamp) for item, stamp, context_id in rows]
    id_of = (lambda c: c.id) if with_ids else None
    got = pick_oldest_per_item(contexts, lambda c: c.item, lambda c: c.enqueued_at, id_of)
    expected = _oldest_by_every_key(contexts, lambda c: c.item, lambda c: c.enqueued_at, id_of)
    assert [list(map(id, side)) for side in got] == [list(map(id, side)) for side in expected]
