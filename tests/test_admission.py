"""The pure admission core: every rule, their combinations, and properties over random towns."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core.admission import (
    CODES,
    Applicant,
    Limits,
    Running,
    Spend,
    Throttle,
    admit,
    touch_prefix,
    touches_overlap,
)
from sluice.errors import ConfigError

NOW = 1_000_000.0


def ap(key, rig="r", tokens=1000, labels=(), touches=()):
    return Applicant(
        key=key, item_id=f"i-{key}", rig=rig, tokens=tokens, labels=frozenset(labels), touches=tuple(touches)
    )


def run(rig="r", labels=(), touches=(), item="busy"):
    return Running(item_id=item, rig=rig, labels=frozenset(labels), touches=tuple(touches))


def keys(admission):
    return [a.key for a in admission.to_dispatch]


def codes(admission, key):
    return [r.code for r in admission.held[key]]


# -- the town cap and batch keep Gas Town's plan ----------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "batch", "ready", "planned", "reason"),
    [
        (0, 3, 2, 0, "capacity"),
        (5, 3, 0, 0, "none"),
        (5, 3, 2, 2, "ready"),
        (2, 3, 5, 2, "capacity"),
        (5, 2, 5, 2, "batch"),
        (2, 2, 5, 2, "batch"),
        (2, 5, 2, 2, "batch"),  # Gas Town's tie rule: no strictly smaller limit
    ],
)
def test_town_cap_and_batch_match_plan_dispatch(capacity, batch, ready, planned, reason):
    admission = admit([ap(str(n)) for n in range(ready)], [], Limits(capacity, batch), now=NOW)
    assert len(admission.to_dispatch) == planned
    assert admission.reason == reason
    assert admission.skipped == ready - planned
    for key in admission.held:
        assert codes(admission, key) == ["capacity" if capacity < batch else "batch"]


def test_batch_below_one_is_a_config_error():
    with pytest.raises(ConfigError, match="batch_size"):
        admit([], [], Limits(3, 0), now=NOW)


# -- each rule alone ---------------------------------------------------------------------------


def test_rig_cap_counts_running_and_planned_and_lets_other_rigs_through():
    applicants = [ap("a1", "a"), ap("a2", "a"), ap("a3", "a"), ap("b1", "b")]
    admission = admit(applicants, [run("a")], Limits(10, 10, rig_caps={"a": 2}), now=NOW)
    assert keys(admission) == ["a1", "b1"]
    assert codes(admission, "a2") == ["rig-cap"] and codes(admission, "a3") == ["rig-cap"]
    assert "runs 2 of its 2" in admission.held["a2"][0].detail
    assert admission.reason == "rig-cap"


def test_label_cap_holds_only_items_with_the_label():
    applicants = [ap("g1", labels=["gpu"]), ap("g2", labels=["gpu", "x"]), ap("plain")]
    admission = admit(applicants, [run(labels=["gpu"])], Limits(10, 10, label_caps={"gpu": 2}), now=NOW)
    assert keys(admission) == ["g1", "plain"]
    assert codes(admission, "g2") == ["label-cap"]
    assert "label gpu" in admission.held["g2"][0].detail


def test_town_budget_counts_the_window_spend_and_this_cycles_launches():
    applicants = [ap("a", tokens=400), ap("b", tokens=400), ap("c", tokens=100)]
    admission = admit(applicants, [], Limits(10, 10, town_budget=1000), spend=Spend(town=300), now=NOW)
    assert keys(admission) == ["a", "c"]  # 300 + 400 + 100 = 800; b would make 1100
    assert codes(admission, "b") == ["budget"]


def test_rig_budget_is_per_rig():
    applicants = [ap("a", "a", 600), ap("b", "b", 600)]
    admission = admit(
        applicants, [], Limits(10, 10, rig_budgets={"a": 1000}), spend=Spend(rigs={"a": 500}), now=NOW
    )
    assert keys(admission) == ["b"]
    assert "rig a budget" in admission.held["a"][0].detail


def test_zero_budget_means_none():
    admission = admit([ap("a", tokens=10**9)], [], Limits(1, 1, town_budget=0), spend=Spend(10**12), now=NOW)
    assert keys(admission) == ["a"]


def test_throttles_hold_their_rig_or_the_town_until_they_end():
    applicants = [ap("a", "a"), ap("b", "b")]
    rig_throttle = Throttle(until=NOW + 60, rig="a", reason="rate limit")
    admission = admit(applicants, [], Limits(10, 10), throttles=[rig_throttle], now=NOW)
    assert keys(admission) == ["b"]
    assert codes(admission, "a") == ["throttled"] and "rate limit" in admission.held["a"][0].detail
    town = Throttle(until=NOW + 60)
    assert keys(admit(applicants, [], Limits(10, 10), throttles=[town], now=NOW)) == []
    assert keys(admit(applicants, [], Limits(10, 10), throttles=[town], now=NOW + 60)) == ["a", "b"]


def test_overlap_with_running_and_planned_in_the_same_rig_only():
    applicants = [
        ap("api", touches=["src/api/**"]),
        ap("auth", touches=["src/api/auth.py"]),
        ap("web", touches=["src/web/*"]),
        ap("docs", touches=["*.md"]),
        ap("free"),
        ap("other-rig", rig="o", touches=["src/api/**"]),
    ]
    admission = admit(applicants, [run(touches=["docs/guide.md"], item="i-writer")], Limits(10, 10), now=NOW)
    assert keys(admission) == ["api", "web", "free", "other-rig"]
    assert codes(admission, "auth") == ["overlap"] and "i-api" in admission.held["auth"][0].detail
    assert codes(admission, "docs") == ["overlap"]


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        (["src/api/**"], ["src/api/auth.py"], True),
        (["src/api/*"], ["src/web/*"], False),
        (["*.md"], ["src/x.py"], True),
        (["src/a*"], ["src/api/x.py"], True),
        (["src/a"], ["src/api"], False),  # literal paths: a path prefix, not a string prefix
        (["src/api"], ["src/api/*"], True),
        (["./src//api/x"], ["/src/api/x"], True),
        ([], ["*"], False),
        (["docs/[ab].md"], ["docs/c.md"], True),  # cut at the bracket: docs/ covers docs/c.md
    ],
)
def test_touches_overlap_table(a, b, overlap):
    assert touches_overlap(a, b) is overlap
    assert touches_overlap(b, a) is overlap


def test_touch_prefix_cuts_at_the_first_wildcard():
    assert touch_prefix("src/api/**") == ("src/api/", True)
    assert touch_prefix("src/{a,b}/x") == ("src/", True)
    assert touch_prefix("README.md") == ("README.md", False)


# -- combinations ------------------------------------------------------------------------------


def test_all_rules_in_one_cycle():
    applicants = [
        ap("a1", "a", 100, ["gpu"], ["src/x/**"]),  # planned
        ap("a2", "a", 100),  # rig cap (a: 1 running + a1)
        ap("b1", "b", 100, ["gpu"]),  # label cap (gpu: a1 + running)
        ap("b2", "b", 5000),  # budget
        ap("c1", "c", 100, touches=["src/**"]),  # overlap with running c polecat
        ap("c2", "c", 100),  # planned: second slot
        ap("c3", "c", 100),  # town capacity now full
    ]
    running = [run("a", item="i-run-a"), run("c", ["gpu"], ["src/y.py"], item="i-run-c")]
    limits = Limits(capacity=2, batch=5, rig_caps={"a": 2}, label_caps={"gpu": 2}, town_budget=1000)
    admission = admit(applicants, running, limits, now=NOW)
    assert keys(admission) == ["a1", "c2"]
    assert codes(admission, "a2") == ["rig-cap"]
    assert codes(admission, "b1") == ["label-cap"]
    assert codes(admission, "b2") == ["budget"]
    assert codes(admission, "c1") == ["overlap"]
    assert codes(admission, "c3") == ["capacity"]
    assert admission.reason == "capacity"  # an admissible item was left for the town cap


def test_every_reason_is_listed_not_only_the_first():
    applicants = [ap("a1", "a", 5000, ["gpu"], ["x/**"])]
    running = [run("a", ["gpu"], ["x/y"])]
    limits = Limits(capacity=0, batch=1, rig_caps={"a": 1}, label_caps={"gpu": 1}, town_budget=100)
    throttle = Throttle(until=NOW + 1, rig="a")
    admission = admit(applicants, running, limits, throttles=[throttle], now=NOW)
    assert codes(admission, "a1") == ["throttled", "rig-cap", "label-cap", "budget", "overlap", "capacity"]
    assert admission.reason == "capacity"


# -- properties --------------------------------------------------------------------------------

RIGS = st.sampled_from(["a", "b", "c"])
LABELS = st.frozensets(st.sampled_from(["gpu", "db", "ui"]), max_size=2)
TOUCHES = st.lists(st.sampled_from(["src/**", "src/api/*", "src/web/x.py", "*.md", "docs/a.md"]), max_size=2)


@st.composite
def towns(draw):
    n = draw(st.integers(0, 25))
    applicants = [
        Applicant(
            key=f"k{i}",
            item_id=f"i{i}",
            rig=draw(RIGS),
            tokens=draw(st.integers(0, 3000)),
            labels=draw(LABELS),
            touches=tuple(draw(TOUCHES)),
        )
        for i in range(n)
    ]
    running = [
        Running(item_id=f"r{i}", rig=draw(RIGS), labels=draw(LABELS), touches=tuple(draw(TOUCHES)))
        for i in range(draw(st.integers(0, 5)))
    ]
    limits = Limits(
        capacity=draw(st.integers(0, 10)),
        batch=draw(st.integers(1, 10)),
        rig_caps=draw(st.dictionaries(RIGS, st.integers(1, 4))),
        label_caps=draw(st.dictionaries(st.sampled_from(["gpu", "db", "ui"]), st.integers(1, 4))),
        town_budget=draw(st.integers(0, 8000)),
        rig_budgets=draw(st.dictionaries(RIGS, st.integers(0, 5000))),
    )
    spend = Spend(town=draw(st.integers(0, 4000)), rigs=draw(st.dictionaries(RIGS, st.integers(0, 3000))))
    throttles = [
        Throttle(until=NOW + draw(st.integers(-5, 5)), rig=draw(st.one_of(st.none(), RIGS)))
        for _ in range(draw(st.integers(0, 2)))
    ]
    return applicants, running, limits, spend, throttles


@settings(max_examples=300, deadline=None)
@given(towns())
def test_no_plan_exceeds_any_cap_or_budget(town):
    applicants, running, limits, spend, throttles = town
    admission = admit(applicants, running, limits, spend=spend, throttles=throttles, now=NOW)
    plan = admission.to_dispatch
    assert len(plan) <= max(0, min(limits.capacity, limits.batch))
    for rig, cap in limits.rig_caps.items():
        before = sum(1 for r in running if r.rig == rig)
        assert sum(1 for a in plan if a.rig == rig) <= max(0, cap - before)
    for label, cap in limits.label_caps.items():
        before = sum(1 for r in running if label in r.labels)
        assert sum(1 for a in plan if label in a.labels) <= max(0, cap - before)
    if limits.town_budget > 0 and plan:
        assert spend.town + sum(a.tokens for a in plan) <= limits.town_budget
    for rig, budget in limits.rig_budgets.items():
        planned = [a for a in plan if a.rig == rig]
        if budget > 0 and planned:
            assert spend.rigs.get(rig, 0) + sum(a.tokens for a in planned) <= budget
    for a in plan:
        assert not any(t.until > NOW and t.rig in (None, a.rig) for t in throttles)
    busy = [(r.rig, r.item_id, r.touches) for r in running] + [(a.rig, a.item_id, a.touches) for a in plan]
    for a in plan:
        for rig, item_id, touches in busy:
            if rig == a.rig and item_id != a.item_id:
                assert not touches_overlap(a.touches, touches)


@settings(max_examples=300, deadline=None)
@given(towns())
def test_every_skipped_item_has_a_reason_and_nothing_is_lost(town):
    applicants, running, limits, spend, throttles = town
    admission = admit(applicants, running, limits, spend=spend, throttles=throttles, now=NOW)
    planned = {a.key for a in admission.to_dispatch}
    assert planned.isdisjoint(admission.held)
    assert planned | set(admission.held) == {a.key for a in applicants}
    for reasons in admission.held.values():
        assert reasons and all(r.code in CODES and r.detail for r in reasons)
    assert admission.reason in CODES or admission.reason in ("none", "ready")
    # The plan keeps rank order.
    order = [a.key for a in applicants if a.key in planned]
    assert [a.key for a in admission.to_dispatch] == order


# -- aging ---------------------------------------------------------------------------------


class _Policy:
    """A policy-shaped object: default weights, aging as given."""

    def __init__(self, aging=0.0, aging_max=2.0):
        from sluice.store.files.policy import Policy

        base = Policy()
        self.weights, self.graph_overrides = base.weights, base.graph_overrides
        self.merge_queue_threshold, self.merge_pressure_penalty = 3, 2.0
        self.aging, self.aging_max = aging, aging_max


def _rank(policy, *candidates):
    from sluice.core.scoring import score_all

    return score_all(candidates, policy, warm_rigs=(), merge_depths={}, decision_counts={})


def test_aging_lifts_long_queued_work_up_to_its_maximum():
    from sluice.core.scoring import Candidate, aging_bonus

    old_p2 = Candidate("old", 2, 1000, "r", "2026-01-01T00:00:00.000000Z", age_hours=10.0)
    new_p1 = Candidate("new", 1, 1000, "r", "2026-01-02T00:00:00.000000Z", age_hours=0.1)
    off = _rank(_Policy(), old_p2, new_p1)
    assert [s.candidate.item_id for s in off] == ["new", "old"]
    assert not any(r.startswith("aging") for s in off for r in s.reasons)  # off: metagit's scores
    on = _rank(_Policy(aging=0.25, aging_max=1.5), old_p2, new_p1)
    assert [s.candidate.item_id for s in on] == ["old", "new"]
    assert "aging=+1.50" in on[0].reasons and "aging=+0.03" in on[1].reasons
    assert on[0].score == off[1].score + 1.5
    assert aging_bonus(3, 0.5, 2.0) == 1.5 and aging_bonus(100, 0.5, 2.0) == 2.0 and aging_bonus(5, 0, 2) == 0


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 1000), st.floats(0, 5), st.floats(0, 10))
def test_aging_never_exceeds_its_maximum_and_grows_with_time(hours, rate, cap):
    from sluice.core.scoring import aging_bonus

    bonus = aging_bonus(hours, rate, cap)
    assert 0 <= bonus <= cap
    assert aging_bonus(hours + 1, rate, cap) >= bonus
