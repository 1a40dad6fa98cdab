"""Scoring: metagit RFC-0012 on beads priorities (P = 4 - priority)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.core.recordclass import replace
from sluice.core.scoring import (
    Candidate,
    Scored,
    Selection,
    Weights,
    effective_tokens,
    rank,
    rank_key,
    resolve_weights,
    score_all,
    score_candidate,
    select,
    underrepresented_rigs,
)
from sluice.errors import ConfigError, UsageError

T0 = "2026-01-01T00:00:00Z"


def cand(item_id, priority=2, tokens=1000, rig="rig-a", order=T0, graph_id=None, payload=None):
    return Candidate(item_id, priority, tokens, rig, order, graph_id, payload)


def score(c, weights=None, *, warm=False, under=False, depth=0, threshold=3, penalty=2.0):
    return score_candidate(
        c,
        weights if weights is not None else Weights(),
        warm=warm,
        underrepresented=under,
        merge_depth=depth,
        threshold=threshold,
        penalty=penalty,
    )


@dataclass
class StubPolicy:
    """Just the attributes scoring reads; the real model is tested in test_policy."""

    weights: Weights = field(default_factory=Weights)
    graph_overrides: dict = field(default_factory=dict)
    merge_queue_threshold: int = 3
    merge_pressure_penalty: float = 2.0


def override(priority=None, affinity=None, cost=None, fairness=None):
    return SimpleNamespace(priority=priority, affinity=affinity, cost=cost, fairness=fairness)


def ids(items):
    return [(s.scored if isinstance(s, Selection) else s).candidate.item_id for s in items]


# --------------------------------------------------------------------------
# metagit's catalogue, translated to beads priorities


def test_higher_urgency_wins_when_other_factors_equal():
    weights = Weights(affinity=0.0, cost=0.0)
    low = score(cand("a", priority=3), weights)  # P = 1
    high = score(cand("b", priority=0), weights)  # P = 4
    assert (low.score, high.score) == (1.0, 4.0)
    assert ids(rank([low, high])) == ["b", "a"]


def test_affinity_boosts_warm_rig():
    weights = Weights(priority=0.0, affinity=1.0, cost=0.0)
    cold = score(cand("cold"), weights, warm=False)
    warm = score(cand("warm"), weights, warm=True)
    assert (cold.score, warm.score) == (0.0, 1.0)
    assert ids(rank([cold, warm])) == ["warm", "cold"]


def test_cheaper_tokens_win_on_cost_weight():
    weights = Weights(priority=0.0, affinity=0.0, cost=1.0)
    costly = score(cand("costly", tokens=4000), weights)
    cheap = score(cand("cheap", tokens=100), weights)
    assert costly.score == 0.2
    assert cheap.score == 0.909091  # 1 / 1.1
    assert ids(rank([costly, cheap])) == ["cheap", "costly"]


def test_tie_break_by_id_when_all_weights_are_zero():
    weights = Weights(0.0, 0.0, 0.0, 0.0)
    z = score(cand("z-node", priority=0), weights)
    a = score(cand("a-node", priority=4), weights)
    assert z.score == a.score == 0.0
    assert ids(rank([z, a])) == ["a-node", "z-node"]


def test_merge_pressure_penalty_prefers_the_clear_rig():
    policy = StubPolicy(weights=Weights(affinity=0.0, cost=0.0), merge_pressure_penalty=20.0)
    pressured = cand("pressured", priority=0, rig="rig-a")  # 4 - 20 = -16
    clear = cand("clear", priority=3, rig="rig-b")  # 1
    ranked = score_all(
        [pressured, clear], policy, warm_rigs=set(), merge_depths={"rig-a": 3}, decision_counts={}
    )
    assert ids(ranked) == ["clear", "pressured"]
    assert [s.score for s in ranked] == [1.0, -16.0]
    assert ranked[1].pressured and not ranked[0].pressured
    assert ranked[1].reasons[-1] == "merge_pressure depth=3 threshold=3 penalty=20.0"


def test_skip_mode_emits_a_skipped_selection():
    only = score(cand("n1", priority=0), Weights(affinity=0.0, cost=0.0), depth=3)
    assert only.score == 2.0  # 4 - default penalty 2
    [picked] = select([only], limit=1, skip_on_pressure=True)
    assert picked.skipped
    assert picked.reasons[-1] == "skipped_due_to_merge_pressure"
    assert "skipped_due_to_merge_pressure" not in only.reasons


def test_skipped_selection_counts_toward_the_limit():
    weights = Weights(affinity=0.0, cost=0.0)
    top = score(cand("top", priority=0), weights, depth=3, penalty=0.0)  # 4, pressured
    second = score(cand("second", priority=1), weights)  # 3
    ranked = rank([second, top])
    two = select(ranked, limit=2, skip_on_pressure=True)
    assert [(ids([s])[0], s.skipped) for s in two] == [("top", True), ("second", False)]
    one = select(ranked, limit=1, skip_on_pressure=True)
    assert [(ids([s])[0], s.skipped) for s in one] == [("top", True)]


def test_without_skip_mode_a_pressured_candidate_is_selected_normally():
    pressured = score(cand("p", priority=0), depth=4, penalty=0.5)
    [picked] = select([pressured], limit=1, skip_on_pressure=False)
    assert not picked.skipped
    assert picked.reasons == pressured.reasons
    assert picked.reasons[-1] == "merge_pressure depth=4 threshold=3 penalty=0.5"


def test_pressured_candidate_below_the_limit_leaves_no_skip_record():
    clear = score(cand("clear", priority=0))
    pressured = score(cand("pressured", priority=1), depth=9)
    chosen = select(rank([pressured, clear]), limit=1, skip_on_pressure=True)
    assert [(ids([s])[0], s.skipped) for s in chosen] == [("clear", False)]


@pytest.mark.parametrize("limit", [0, -1])
def test_limit_below_one_is_a_usage_error(limit):
    with pytest.raises(UsageError, match="limit must be >= 1"):
        select([], limit, False)


def test_limit_none_takes_everything():
    ranked = rank([score(cand(f"x{i}", priority=i % 5)) for i in range(7)])
    assert len(select(ranked, None, False)) == 7
    assert len(select(ranked, 100, False)) == 7


# --------------------------------------------------------------------------
# Exact scores and reasons (default weights 1.0 / 0.5 / 0.25 / 0.0)


EXACT_CASES = [
    # priority 1 -> P 3; cold; C = 1/(1+1.5) = 0.4
    # 1.0*3 + 0.5*0 + 0.25*0.4 = 3.1
    (
        dict(c=cand("a", priority=1, tokens=1500)),
        3.1,
        ("priority=1", "affinity=0", "cost=0.4000(tokens=1500)"),
    ),
    # priority 2 -> P 2; warm; C = 1/1.5 = 0.666667
    # 2 + 0.5 + 0.25*0.6666667 = 2.6666667 -> 2.666667
    (
        dict(c=cand("b", priority=2, tokens=500), warm=True),
        2.666667,
        ("priority=2", "affinity=1", "cost=0.6667(tokens=500)"),
    ),
    # priority 0 -> P 4; C = 1/3; pressured (depth 3 >= threshold 3)
    # 4 + 0.25/3 - 2.0 = 2.0833333 -> 2.083333
    (
        dict(c=cand("c", priority=0, tokens=2000), depth=3),
        2.083333,
        (
            "priority=0",
            "affinity=0",
            "cost=0.3333(tokens=2000)",
            "merge_pressure depth=3 threshold=3 penalty=2.0",
        ),
    ),
    # priority 4 -> P 0; C = 0.5: 0 + 0 + 0.125 = 0.125 (metagit's "n1 scores 0.125")
    (dict(c=cand("d", priority=4)), 0.125, ("priority=4", "affinity=0", "cost=0.5000(tokens=1000)")),
    # fairness weight 1: priority 2, warm, T 0 (C 1.0), under-represented
    # 2 + 0.5 + 0.25 + 1 = 3.75
    (
        dict(c=cand("e", priority=2, tokens=0), weights=Weights(fairness=1.0), warm=True, under=True),
        3.75,
        ("priority=2", "affinity=1", "cost=1.0000(tokens=0)", "fairness=1"),
    ),
    # fairness weight 0.5 but not under-represented: reason present, F 0
    # P 1 + 0.125 = 1.125
    (
        dict(c=cand("f", priority=3), weights=Weights(fairness=0.5)),
        1.125,
        ("priority=3", "affinity=0", "cost=0.5000(tokens=1000)", "fairness=0"),
    ),
    # nothing is clamped: priority -1 -> P 5 (metagit sample's api-billing)
    # 5 + 0.25*0.4 = 5.1
    (
        dict(c=cand("g", priority=-1, tokens=1500)),
        5.1,
        ("priority=-1", "affinity=0", "cost=0.4000(tokens=1500)"),
    ),
    # priority 7 -> P -3: -3 + 0.125 = -2.875
    (dict(c=cand("h", priority=7)), -2.875, ("priority=7", "affinity=0", "cost=0.5000(tokens=1000)")),
    # depth 5 >= threshold 2, penalty 1.5: 2 + 0.125 - 1.5 = 0.625
    (
        dict(c=cand("i", priority=2), depth=5, threshold=2, penalty=1.5),
        0.625,
        (
            "priority=2",
            "affinity=0",
            "cost=0.5000(tokens=1000)",
            "merge_pressure depth=5 threshold=2 penalty=1.5",
        ),
    ),
    # an integer penalty still prints as a float repr: 2 + 0.125 - 2 = 0.125
    (
        dict(c=cand("j", priority=2), depth=3, penalty=2),
        0.125,
        (
            "priority=2",
            "affinity=0",
            "cost=0.5000(tokens=1000)",
            "merge_pressure depth=3 threshold=3 penalty=2.0",
        ),
    ),
    # depth below threshold: no pressure, no reason
    (dict(c=cand("k", priority=2), depth=2), 2.125, ("priority=2", "affinity=0", "cost=0.5000(tokens=1000)")),
]


@pytest.mark.parametrize(("kwargs", "expected_score", "expected_reasons"), EXACT_CASES)
def test_exact_scores_and_reasons(kwargs, expected_score, expected_reasons):
    kwargs = dict(kwargs)
    result = score(kwargs.pop("c"), **kwargs)
    assert result.score == expected_score
    assert result.reasons == expected_reasons


def test_cost_reason_is_present_even_with_zero_cost_weight():
    result = score(cand("a", tokens=250), Weights(cost=0.0))
    assert "cost=0.8000(tokens=250)" in result.reasons
    assert result.score == 2.0


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (0, 1.0),
        (250, 0.8),
        (500, 0.666667),
        (1000, 0.5),
        (1500, 0.4),
        (2000, 0.333333),
        (4000, 0.2),
        (8000, 0.111111),
    ],
)
def test_cost_table(tokens, expected):
    only_cost = Weights(priority=0.0, affinity=0.0, cost=1.0)
    assert score(cand("x", tokens=tokens), only_cost).score == expected


def test_scores_never_come_out_as_negative_zero():
    # -1e-9 rounds to -0.0; it must read 0.0
    result = score(cand("x", priority=4), Weights(priority=0.0, affinity=0.0, cost=-1e-9))
    assert result.score == 0.0
    assert math.copysign(1.0, result.score) == 1.0


# --------------------------------------------------------------------------
# Effective tokens


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        (None, 1000),
        ({}, 1000),
        ("{}", 1000),  # not a mapping: no usable metadata
        ({"estimated_tokens": 2500}, 2500),
        ({"estimated_tokens": 0}, 0),  # 0 is honoured
        ({"estimated_tokens": 0, "context_budget": 500}, 0),
        ({"context_budget": 700}, 700),
        ({"context_budget": 0}, 0),
        ({"estimated_tokens": -5, "context_budget": 700}, 700),
        ({"estimated_tokens": -5}, 1000),
        ({"context_budget": -1}, 1000),
        ({"estimated_tokens": True, "context_budget": 300}, 300),  # bools are not ints
        ({"estimated_tokens": False}, 1000),
        ({"estimated_tokens": 12.5, "context_budget": 40}, 40),
        ({"estimated_tokens": "400"}, 1000),
        ({"estimated_tokens": None, "context_budget": None}, 1000),
    ],
)
def test_effective_tokens(metadata, expected):
    assert effective_tokens(metadata) == expected


# --------------------------------------------------------------------------
# Graph overrides


def test_resolve_weights_without_override_is_the_base():
    policy = StubPolicy(weights=Weights(2.0, 0.4, 0.3, 0.1), graph_overrides={"g": override(priority=9.0)})
    assert resolve_weights(policy, None) == Weights(2.0, 0.4, 0.3, 0.1)
    assert resolve_weights(policy, "other") == Weights(2.0, 0.4, 0.3, 0.1)


def test_override_fields_replace_and_nulls_fall_back():
    policy = StubPolicy(graph_overrides={"g": override(priority=3.0, fairness=0.0)})
    assert resolve_weights(policy, "g") == Weights(priority=3.0, affinity=0.5, cost=0.25, fairness=0.0)
    policy.graph_overrides["n"] = override()
    assert resolve_weights(policy, "n") == Weights()


def test_metagit_sample_with_weight_and_graph_override():
    # policy {"weights": {"priority": 2}, "graph_overrides": {"release": {"cost": 4}}}
    policy = StubPolicy(weights=Weights(priority=2.0), graph_overrides={"release": override(cost=4.0)})
    candidates = [
        cand("api-billing", priority=-1, tokens=1500, rig="api", graph_id="release"),  # 2*5 + 4*0.4 = 11.6
        cand("api-auth", priority=-1, tokens=4000, rig="api", graph_id="release"),  # 10 + 4*0.2 = 10.8
        cand("ci-cache", priority=-2, tokens=2000, rig="ci", graph_id="release"),  # 12 + 4/3 - 2 = 11.333333
    ]
    ranked = score_all(candidates, policy, warm_rigs=set(), merge_depths={"ci": 3}, decision_counts={})
    assert [(s.candidate.item_id, s.score) for s in ranked] == [
        ("api-billing", 11.6),
        ("ci-cache", 11.333333),
        ("api-auth", 10.8),
    ]


def test_metagit_sample_ranking_with_the_default_policy():
    # metagit §3.3, beads priority = 4 - metagit priority
    candidates = [
        cand("docs-readme", priority=3, tokens=1000, rig=None, graph_id="release"),
        cand("web-theme", priority=2, tokens=500, rig="web", graph_id="release"),
        cand("web-i18n", priority=2, tokens=0, rig="web", graph_id="release"),
        cand("ci-cache", priority=-2, tokens=2000, rig="ci", graph_id="release"),
        cand("api-auth", priority=-1, tokens=4000, rig="api", graph_id="release"),
        cand("hotfix-api", priority=-1, tokens=1500, rig="api", graph_id="hotfix"),
        cand("api-billing", priority=-1, tokens=1500, rig="api", graph_id="release"),
    ]
    ranked = score_all(
        candidates,
        StubPolicy(),
        warm_rigs={"web"},
        merge_depths={"ci": 3, "api": 1},
        decision_counts={},
    )
    assert [(s.candidate.item_id, s.score) for s in ranked] == [
        ("api-billing", 5.1),
        ("hotfix-api", 5.1),
        ("api-auth", 5.05),
        ("ci-cache", 4.083333),
        ("web-i18n", 2.75),
        ("web-theme", 2.666667),
        ("docs-readme", 1.125),
    ]
    assert ranked[3].reasons == (
        "priority=-2",
        "affinity=0",
        "cost=0.3333(tokens=2000)",
        "merge_pressure depth=3 threshold=3 penalty=2.0",
    )


# --------------------------------------------------------------------------
# Fairness


def test_underrepresented_rigs():
    assert underrepresented_rigs({}, ["a", "b"]) == {"a", "b"}
    assert underrepresented_rigs({"a": 2, "b": 1, "c": 1}, ["a", "b", "c"]) == {"b", "c"}
    assert underrepresented_rigs({"a": 3, "x": 0}, ["a"]) == {"a"}  # rigs not ready do not count
    assert underrepresented_rigs({"a": 1}, ["a", "b", None, ""]) == {"b"}
    assert underrepresented_rigs({"a": 1}, []) == frozenset()
    assert underrepresented_rigs({"a": 1}, [None]) == frozenset()


def _fair_candidates():
    return [
        cand("a-1", priority=2, rig="rig-a"),
        cand("b-1", priority=2, rig="rig-b"),
        cand("n-1", priority=2, rig=None),
    ]


def test_fairness_first_run_favours_every_ready_rig():
    policy = StubPolicy(weights=Weights(fairness=1.0))
    ranked = score_all(_fair_candidates(), policy, warm_rigs=set(), merge_depths={}, decision_counts={})
    by_id = {s.candidate.item_id: s for s in ranked}
    assert by_id["a-1"].score == by_id["b-1"].score == 3.125  # 2 + 0.125 + 1
    assert "fairness=1" in by_id["a-1"].reasons and "fairness=1" in by_id["b-1"].reasons
    assert by_id["n-1"].score == 2.125 and "fairness=0" in by_id["n-1"].reasons


def test_fairness_later_favours_only_the_least_scheduled_rig():
    policy = StubPolicy(weights=Weights(fairness=1.0))
    ranked = score_all(
        _fair_candidates(), policy, warm_rigs=set(), merge_depths={}, decision_counts={"rig-a": 2}
    )
    assert ids(ranked) == ["b-1", "a-1", "n-1"]
    assert ranked[0].reasons[-1] == "fairness=1"
    assert ranked[1].reasons[-1] == "fairness=0"


def test_decision_history_is_read_only_when_fairness_is_on():
    calls = []

    def counts():
        calls.append(1)
        return {"rig-a": 1}

    score_all(_fair_candidates(), StubPolicy(), warm_rigs=set(), merge_depths={}, decision_counts=counts)
    assert calls == []
    score_all(
        _fair_candidates(),
        StubPolicy(weights=Weights(fairness=0.5)),
        warm_rigs=set(),
        merge_depths={},
        decision_counts=counts,
    )
    assert calls == [1]


def test_fairness_override_applies_only_to_its_graph():
    policy = StubPolicy(graph_overrides={"fair": override(fairness=1.0)})
    candidates = [cand("f-1", rig="rig-a", graph_id="fair"), cand("o-1", rig="rig-a", graph_id="other")]
    ranked = score_all(candidates, policy, warm_rigs=set(), merge_depths={}, decision_counts={})
    by_id = {s.candidate.item_id: s for s in ranked}
    assert by_id["f-1"].reasons[-1] == "fairness=1" and by_id["f-1"].score == 3.125
    assert all(not r.startswith("fairness") for r in by_id["o-1"].reasons)


def test_no_rig_means_no_affinity_and_no_pressure():
    ranked = score_all(
        [cand("x", rig=None)], StubPolicy(), warm_rigs={""}, merge_depths={"": 10}, decision_counts={}
    )
    assert ranked[0].reasons == ("priority=2", "affinity=0", "cost=0.5000(tokens=1000)")
    assert not ranked[0].pressured


# --------------------------------------------------------------------------
# Ranking details


def test_rounding_happens_before_sorting():
    # a's raw score is 4e-7 (P 4 * 1e-7), b's is 0; both round to 0.0, so the
    # tie-break decides: b has fewer tokens and wins despite the lower raw score.
    weights = Weights(priority=1e-7, affinity=0.0, cost=0.0)
    a = score(cand("a", priority=0, tokens=2000), weights)
    b = score(cand("b", priority=4, tokens=1000), weights)
    assert a.score == b.score == 0.0
    assert ids(rank([a, b])) == ["b", "a"]


def test_tie_break_order_tokens_then_timestamp_then_id():
    weights = Weights(0.0, 0.0, 0.0, 0.0)
    rows = [
        cand("d", tokens=10, order="2026-01-01T00:00:02Z"),
        cand("c", tokens=10, order="2026-01-01T00:00:01Z"),
        cand("b", tokens=10, order="2026-01-01T00:00:01Z"),
        cand("a", tokens=20, order="2026-01-01T00:00:00Z"),
    ]
    assert ids(rank(score(c, weights) for c in rows)) == ["b", "c", "d", "a"]


def test_candidate_payload_is_carried_but_ignored_by_equality():
    first = cand("x", payload={"ctx": 1})
    second = cand("x", payload={"ctx": 2})
    assert first == second and hash(first) == hash(second)
    assert score(first).candidate.payload == {"ctx": 1}


def test_invalid_values_are_refused():
    with pytest.raises(ValueError):
        cand("x", tokens=-1)
    with pytest.raises(ValueError):
        Weights(priority=math.nan)
    with pytest.raises(ValueError):
        score(cand("x"), threshold=0)
    with pytest.raises(ValueError):
        score(cand("x"), penalty=math.inf)


@pytest.mark.parametrize(
    "weights",
    [
        Weights(priority=1e308),  # 2 * 1e308 overflows to inf
        Weights(priority=1e308, affinity=1e308, cost=-1e308),  # inf - inf: nan
    ],
)
def test_a_score_that_overflows_is_an_error_naming_the_policy_not_infinity(weights):
    """An infinite score would be invalid JSON and would rank arbitrarily."""
    with pytest.raises(ConfigError, match=r"priority 2 scores (inf|nan) under this policy"):
        score(cand("x"), weights, warm=True)
    with pytest.raises(ConfigError, match="choose smaller weights"):
        score_all([cand("x"), cand("y")], StubPolicy(weights), warm_rigs={"rig-a"}, merge_depths={},
                  decision_counts={}, top=1)


# --------------------------------------------------------------------------
# Properties

finite = st.floats(min_value=-5, max_value=5, allow_nan=False, allow_infinity=False)
weights_st = st.builds(Weights, priority=finite, affinity=finite, cost=finite, fairness=finite)
RIGS = [None, "rig-a", "rig-b", "rig-c"]
STAMPS = ["2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z", "2026-01-02T00:00:00Z"]


@st.composite
def candidate_lists(draw):
    item_ids = draw(st.lists(st.text("abcxyz-0123", min_size=1, max_size=6), unique=True, max_size=25))
    return [
        Candidate(
            item_id=item_id,
            priority=draw(st.integers(min_value=-2, max_value=6)),
            tokens=draw(st.sampled_from([0, 100, 500, 1000, 1500, 4000])),
            rig=draw(st.sampled_from(RIGS)),
            order=draw(st.sampled_from(STAMPS)),
            graph_id=draw(st.sampled_from([None, "g1", "g2"])),
        )
        for item_id in item_ids
    ]


@st.composite
def policies(draw):
    overrides = {
        graph: override(
            priority=draw(st.none() | finite),
            affinity=draw(st.none() | finite),
            cost=draw(st.none() | finite),
            fairness=draw(st.none() | finite),
        )
        for graph in draw(st.lists(st.sampled_from(["g1", "g2"]), unique=True))
    }
    return StubPolicy(
        weights=draw(weights_st),
        graph_overrides=overrides,
        merge_queue_threshold=draw(st.integers(min_value=1, max_value=4)),
        merge_pressure_penalty=draw(finite),
    )


context_st = st.fixed_dictionaries(
    {
        "warm_rigs": st.sets(st.sampled_from(RIGS[1:])),
        "merge_depths": st.dictionaries(st.sampled_from(RIGS[1:]), st.integers(min_value=0, max_value=6)),
        "decision_counts": st.dictionaries(st.sampled_from(RIGS[1:]), st.integers(min_value=0, max_value=4)),
    }
)


@given(candidate_lists(), policies(), context_st, st.randoms(use_true_random=False))
def test_rank_is_a_sorted_permutation_independent_of_input_order(candidates, policy, context, rnd):
    ranked = score_all(candidates, policy, **context)
    assert sorted(s.candidate.item_id for s in ranked) == sorted(c.item_id for c in candidates)
    keys = [rank_key(s) for s in ranked]
    assert keys == sorted(keys)

    shuffled = list(candidates)
    rnd.shuffle(shuffled)
    again = score_all(shuffled, policy, **context)
    assert [(s.candidate.item_id, s.score, s.reasons) for s in again] == [
        (s.candidate.item_id, s.score, s.reasons) for s in ranked
    ]
    assert rank(list(reversed(ranked))) == ranked


@given(candidate_lists(), policies(), context_st, st.integers(min_value=0, max_value=30), st.booleans())
def test_top_shortcut_matches_the_full_ranking(candidates, policy, context, top, skip):
    full = score_all(candidates, policy, **context)
    short = score_all(candidates, policy, **context, top=top)
    assert short == full[:top]
    if top >= 1:
        assert select(short, top, skip) == select(full, top, skip)


@given(candidate_lists(), policies(), context_st, st.lists(st.sampled_from([0.0, 0.5, 3.0]), max_size=25),
       st.sampled_from([(0.0, 0.0), (0.5, 1.0)]))
def test_each_candidate_scores_as_it_would_alone(candidates, policy, context, ages, aging):
    """Ranking a set changes no candidate's score or reasons, however many are alike."""
    policy = SimpleNamespace(**vars(policy), aging=aging[0], aging_max=aging[1])
    ages = ages + [0.0] * (len(candidates) - len(ages))
    # Each candidate with a twin alike in all but id and age: kinds are shared for sure.
    candidates = [twin for c, age in zip(candidates, ages, strict=False)
                  for twin in (replace(c, age_hours=age), replace(c, item_id=c.item_id + "'", age_hours=3.0))]
    favoured = underrepresented_rigs(context["decision_counts"], (c.rig for c in candidates))
    alone = {}
    for c in candidates:
        rigged = c.rig is not None
        alone[c.item_id] = score_candidate(
            c, resolve_weights(policy, c.graph_id),
            warm=rigged and c.rig in context["warm_rigs"],
            underrepresented=rigged and c.rig in favoured,
            merge_depth=context["merge_depths"].get(c.rig, 0) if rigged else 0,
            threshold=policy.merge_queue_threshold, penalty=policy.merge_pressure_penalty, aging=aging,
        )
    for s in score_all(candidates, policy, **context):
        assert s == alone[s.candidate.item_id]


@given(
    priority=st.integers(min_value=-3, max_value=6),
    tokens=st.integers(min_value=0, max_value=20_000),
    weights=st.builds(
        Weights,
        priority=st.floats(min_value=0, max_value=5),
        affinity=finite,
        cost=finite,
        fairness=finite,
    ),
    warm=st.booleans(),
    under=st.booleans(),
    depth=st.integers(min_value=0, max_value=6),
)
def test_score_is_monotone_in_urgency(priority, tokens, weights, warm, under, depth):
    def at(p: int) -> Scored:
        return score(cand("x", priority=p, tokens=tokens), weights, warm=warm, under=under, depth=depth)

    more_urgent, less_urgent = at(priority), at(priority + 1)
    assert more_urgent.score >= less_urgent.score
    assert more_urgent.reasons[1:] == less_urgent.reasons[1:]
