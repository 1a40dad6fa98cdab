"""The forecast model and the queue simulation, on plain values."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core.forecast import (
    Limits,
    Model,
    Queued,
    Running,
    Sample,
    censored_mean,
    censored_quantile,
    learn,
    quantile,
    remaining,
    residual_median,
    sample_of,
    simulate,
)
from sluice.errors import ConfigError


def run(rig="api", runtime=60.0, outcome="ok", labels=(), tokens_used=None, tokens_estimated=None, **extra):
    return {"rig": rig, "runtime_seconds": runtime, "outcome": outcome, "labels": list(labels),
            "tokens_used": tokens_used, "tokens_estimated": tokens_estimated, **extra}


# --------------------------------------------------------------------------
# Samples


@pytest.mark.parametrize("outcome", ["throttled", "stopped", "vanished", "running"])
def test_outcomes_that_say_nothing_about_runtime_are_left_out(outcome):
    assert sample_of(run(outcome=outcome)) is None


@pytest.mark.parametrize("outcome", ["ok", "failed"])
def test_finished_runs_count(outcome):
    sample = sample_of(run(outcome=outcome, runtime=42.0))
    assert sample is not None and sample.runtime == 42.0 and not sample.censored


def test_a_timed_out_run_is_censored_at_no_less_than_its_timeout():
    sample = sample_of(run(outcome="timed-out", runtime=590.0))
    assert sample.censored and sample.runtime == 590.0
    assert Model.of_kinds({("town",): [sample]}, timeout=600.0).kinds[("town",)][0].runtime == 600.0
    assert sample_of(run(outcome="timed-out", runtime=None)) is None


def test_tokens_are_the_reported_usage_else_the_launch_estimate():
    assert sample_of(run(tokens_used=900, tokens_estimated=1500)).tokens == 900
    assert sample_of(run(tokens_used=None, tokens_estimated=1500)).tokens == 1500
    assert sample_of(run()).tokens is None


def test_the_type_comes_from_the_record_else_it_is_unknown():
    assert sample_of(run(issue_type="bug")).issue_type == "bug"
    assert sample_of(run()).issue_type is None


def test_a_run_of_unknown_type_counts_for_its_rig_and_the_town_only():
    model = learn([Sample("api", None, ("slow",), 60.0)] * 5)
    assert model.estimate("api", "task", ["slow"]).level == "rig"


# --------------------------------------------------------------------------
# Quantiles


def test_quantile_is_nearest_rank():
    assert quantile([5, 1, 3, 2, 4], 0.5) == 3
    assert quantile(list(range(1, 11)), 0.9) == 9
    assert quantile([7], 0.9) == 7


def test_censored_quantile_without_censoring_is_the_plain_quantile():
    values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    for q in (0.5, 0.9):
        assert censored_quantile([(v, False) for v in values], q) == quantile(values, q)


def test_censored_runs_push_the_quantile_up_and_never_below_what_was_seen():
    finished = [(10.0, False)] * 5
    # Half the runs hit a 100 s timeout: the median is no longer 10 s.
    samples = finished + [(100.0, True)] * 5
    assert censored_quantile(samples, 0.5) == 10.0  # five of ten finished at 10 s: exactly half
    samples = finished + [(100.0, True)] * 6
    assert censored_quantile(samples, 0.5) == 100.0  # the median lies beyond the timeout: a lower bound


@given(st.lists(st.tuples(st.floats(0, 1e6), st.booleans()), min_size=1, max_size=50),
       st.sampled_from([0.5, 0.9]))
def test_censored_quantile_is_one_of_the_values_and_at_least_the_uncensored_quantile(samples, q):
    value = censored_quantile(samples, q)
    assert value in [v for v, _ in samples]
    finished = [v for v, c in samples if not c]
    if len(finished) == len(samples):
        assert value == quantile(finished, q)


# --------------------------------------------------------------------------
# The model's levels


def samples(n, rig="api", issue_type="task", labels=(), runtime=60.0):
    return [Sample(rig, issue_type, tuple(labels), runtime) for _ in range(n)]


def test_the_most_specific_level_with_enough_samples_speaks():
    model = learn(samples(5, labels=("area:db",), runtime=600.0) + samples(5, issue_type="bug", runtime=60.0)
                  + samples(5, rig="web", runtime=6.0))
    by_label = model.estimate("api", "task", ["area:db"])
    assert (by_label.level, by_label.samples, by_label.runtime_p50) == ("rig+type+label", 5, 600.0)
    assert by_label.kind == "api/task/area:db"
    by_type = model.estimate("api", "bug", ["area:db"])
    assert (by_type.level, by_type.samples, by_type.runtime_p50) == ("rig+type", 5, 60.0)
    by_rig = model.estimate("api", "feature")
    assert (by_rig.level, by_rig.samples) == ("rig", 10)
    town = model.estimate("docs", "task")
    assert (town.level, town.samples, town.kind) == ("town", 15, "town")


def test_a_level_below_min_samples_falls_through():
    model = learn(samples(4, labels=("slow",), runtime=600.0) + samples(3, runtime=60.0), min_samples=5)
    estimate = model.estimate("api", "task", ["slow"])
    assert (estimate.level, estimate.samples) == ("rig+type", 7)
    assert learn(samples(4, labels=("slow",)), min_samples=4).estimate("api", "task", ["slow"]).level == (
        "rig+type+label")


def test_of_several_labels_the_best_founded_speaks():
    model = learn(samples(5, labels=("a",), runtime=1.0) + samples(9, labels=("b",), runtime=2.0))
    assert model.estimate("api", "task", ["a", "b"]).runtime_p50 == 2.0


def test_no_history_uses_estimated_minutes_then_the_default():
    model = Model()
    estimate = model.estimate("api", estimated_minutes=30)
    assert (estimate.runtime_p50, estimate.basis) == (1800.0, {"level": "estimated_minutes", "samples": 0})
    fallback = model.estimate("api", default_runtime=900.0)
    assert (fallback.runtime_p50, fallback.basis) == (900.0, {"level": "default", "samples": 0})


def test_the_window_keeps_the_last_runs_of_each_kind():
    model = learn(samples(10, runtime=1000.0) + samples(5, runtime=10.0), window=5)
    estimate = model.estimate("api")
    assert (estimate.samples, estimate.runtime_p50, estimate.runtime_p90) == (5, 10.0, 10.0)


def test_tokens_have_their_own_quantiles():
    model = learn([Sample("api", "task", (), 60.0, tokens=t) for t in range(100, 1100, 100)])
    estimate = model.estimate("api")
    assert (estimate.tokens_p50, estimate.tokens_p90) == (500, 900)


@pytest.mark.parametrize("kwargs", [{"window": 0}, {"min_samples": 0}])
def test_bad_model_settings_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        Model(**kwargs)


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["task", "bug"]),
                          st.floats(1, 1e5), st.booleans()), max_size=60),
       st.sampled_from(["a", "b", "c"]), st.integers(1, 8))
def test_every_estimate_says_its_basis_and_p90_is_never_below_p50(runs, rig, min_samples):
    model = learn([Sample(r, t, (), v, censored=c) for r, t, v, c in runs], min_samples=min_samples)
    estimate = model.estimate(rig, "task")
    assert estimate.runtime_p90 >= estimate.runtime_p50 > 0
    assert estimate.level in ("rig+type", "rig", "town", "default")
    assert (estimate.samples >= min_samples) == (estimate.level != "default")


def test_remaining_is_the_median_less_elapsed_never_below_the_floor():
    assert remaining(600.0, 100.0) == 500.0
    assert remaining(600.0, 900.0, floor=30.0) == 30.0


# --------------------------------------------------------------------------
# The simulation


def item(n, rig="api", p50=100.0, p90=None, **kw):
    return Queued(f"it-{n}", rig, p50, p90 if p90 is not None else p50, **kw)


def starts(forecast):
    return [s.start_at for s in forecast.slots]


def test_launches_happen_at_ticks_in_batches_spaced_by_the_spawn_delay():
    queue = [item(n) for n in range(5)]
    limits = Limits(batch_size=2, spawn_delay=5.0, interval=60.0, first_tick=10.0)
    forecast = simulate(0.0, queue, limits=limits)
    assert starts(forecast) == [10.0, 15.0, 70.0, 75.0, 130.0]
    assert forecast.slots[0].done_at == 110.0 and forecast.drain_at == 230.0


def test_running_polecats_hold_their_slots_for_their_remaining_time():
    forecast = simulate(0.0, [item(1)], [Running("api", 250.0)], Limits(town_cap=1, interval=60.0))
    assert starts(forecast) == [300.0]  # the first tick after the slot frees at 250
    assert forecast.drain_at == 400.0


def test_rig_caps_pass_over_an_item_whose_rig_is_full():
    queue = [item(1, "api"), item(2, "api"), item(3, "web")]
    forecast = simulate(0.0, queue, limits=Limits(rig_caps={"api": 1}, interval=10.0))
    assert starts(forecast) == [0.0, 100.0, 0.0]


def test_a_throttled_item_waits_for_its_end_and_others_go_around_it():
    queue = [item(1, not_before=125.0), item(2)]
    forecast = simulate(0.0, queue, limits=Limits(interval=60.0))
    assert starts(forecast) == [180.0, 0.0]


def test_items_that_cannot_start_say_why_and_do_not_hold_the_queue():
    queue = [item(1, why="blocked"), item(2), item(3, "web")]
    forecast = simulate(0.0, queue, limits=Limits(rig_caps={"web": 0}))
    first, second, third = forecast.slots
    assert (first.start_at, first.why, first.position) == (None, "blocked", 1)
    assert second.start_at == 0.0 and second.why is None
    assert (third.start_at, third.why) == (None, "capacity")


def test_no_queue_drains_when_the_running_end():
    assert simulate(0.0, []).drain_at is None
    assert simulate(0.0, [], [Running("api", 40.0)]).drain_at == 40.0


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"interval": 0}, {"spawn_delay": -1}])
def test_bad_limits_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        Limits(**kwargs)


queues = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 500), st.integers(0, 400),
                            st.integers(0, 900)), max_size=25)
running_sets = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 500)), max_size=4)


def build(rows):
    return [Queued(f"it-{n}", rig, float(p50), float(p50 + extra), not_before=float(nb))
            for n, (rig, p50, extra, nb) in enumerate(rows)]


@settings(max_examples=150, deadline=None)
@given(queues, st.integers(1, 4), st.integers(0, 30), st.integers(1, 120))
def test_a_town_cap_of_one_gives_strictly_sequential_runs(rows, batch, spawn, interval):
    forecast = simulate(0.0, build(rows), limits=Limits(town_cap=1, batch_size=batch, spawn_delay=spawn,
                                                       interval=interval))
    runs = sorted((s.start_at, s.done_at) for s in forecast.slots)
    for (_, done), (start, _) in itertools.pairwise(runs):
        assert start >= done


@settings(max_examples=150, deadline=None)
@given(queues, running_sets, st.integers(1, 4), st.integers(1, 4), st.integers(1, 120))
def test_no_item_starts_before_its_throttle_ends_or_before_now(rows, running, cap, batch, interval):
    queue = build(rows)
    forecast = simulate(0.0, queue, [Running(r, float(t)) for r, t in running],
                        Limits(town_cap=cap, batch_size=batch, interval=interval))
    for slot, queued in zip(forecast.slots, queue, strict=True):
        assert slot.start_at >= max(0.0, queued.not_before)
        assert slot.done_p90_at >= slot.done_at >= slot.start_at
        assert forecast.drain_at >= slot.done_at and forecast.drain_p90_at >= slot.done_p90_at


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.just("a"), st.integers(1, 500), st.just(0), st.just(0)), max_size=25),
       st.lists(st.tuples(st.just("a"), st.integers(0, 500)), max_size=4),
       st.integers(1, 4), st.integers(1, 4), st.integers(1, 120))
def test_raising_the_town_cap_never_makes_an_eta_later(rows, running, cap, batch, interval):
    # Without throttles: a throttled item passed over at one tick can find the slots a larger cap
    # gave to the items behind it still held when its throttle ends, as dispatch itself would have it.
    queue = build(rows)
    held = [Running(r, float(t)) for r, t in running]
    lower = simulate(0.0, queue, held, Limits(town_cap=cap, batch_size=batch, interval=interval))
    higher = simulate(0.0, queue, held, Limits(town_cap=cap + 1, batch_size=batch, interval=interval))
    for low, high in zip(lower.slots, higher.slots, strict=True):
        assert high.start_at <= low.start_at


@given(queues, running_sets, st.integers(1, 4), st.integers(1, 120))
def test_the_simulation_is_deterministic(rows, running, cap, interval):
    held = [Running(r, float(t)) for r, t in running]
    args = (0.0, build(rows), held, Limits(town_cap=cap, interval=interval))
    assert simulate(*args) == simulate(*args)


def test_a_kind_learns_what_is_added_after_it_was_estimated():
    model = learn(samples(5, runtime=10.0))
    assert model.estimate("api").runtime_p50 == 10.0
    for sample in samples(6, runtime=500.0):
        model.add(sample)
    assert model.estimate("api").runtime_p50 == 500.0


# --------------------------------------------------------------------------
# Means, what is left of a running run, and slots held for the mean


def test_censored_mean_without_censoring_is_the_plain_mean_and_a_lower_bound_with_it():
    assert censored_mean([(1.0, False), (2.0, False), (6.0, False)]) == 3.0
    # All runs timed out at 100 s: they lasted at least that long.
    assert censored_mean([(100.0, True)] * 3) == 100.0
    assert censored_mean([(10.0, False), (100.0, True)]) == 55.0


@given(st.lists(st.tuples(st.floats(0, 1e5), st.booleans()), min_size=1, max_size=40))
def test_censored_mean_lies_between_the_least_and_the_longest_value(samples):
    values = [v for v, _ in samples]
    assert min(values) - 1e-6 <= censored_mean(samples) <= max(values) + 1e-6


def test_what_is_left_of_a_run_is_judged_by_the_runs_that_lasted_as_long():
    samples = [(float(v), False) for v in (10, 20, 30, 40, 400)]
    assert residual_median(samples, 0.0) == 30.0  # the plain median
    assert residual_median(samples, 25.0) == 15.0  # of 30, 40, 400: half ended by 40
    assert residual_median(samples, 35.0) == 5.0  # of 40 and 400, by nearest rank as every quantile here
    assert residual_median(samples, 45.0) == 355.0  # past 40 only the 400 s run is left to judge by
    assert residual_median(samples, 500.0) is None


def test_a_running_polecat_past_every_run_of_its_kind_waits_the_floor_or_its_median():
    model = learn(samples(5, runtime=2.0))
    assert model.left("api", 1.0) == 1.0
    assert model.left("api", 9.0) == 2.0  # a one-second kind is not held for a floor meant for minutes
    assert learn(samples(5, runtime=600.0)).left("api", 900.0, floor=30.0) == 30.0
    assert Model().left("api", 100.0, default_runtime=900.0) == 800.0


def test_an_estimate_carries_the_mean_and_the_slot_is_held_for_it():
    model = learn([Sample("api", "task", (), v) for v in (10.0, 10.0, 10.0, 10.0, 60.0)])
    estimate = model.estimate("api")
    assert (estimate.runtime_p50, estimate.runtime_mean) == (10.0, 20.0)
    queue = [Queued(f"it-{n}", "api", 10.0, 60.0, runtime_mean=20.0) for n in range(2)]
    forecast = simulate(0.0, queue, limits=Limits(town_cap=1, interval=1.0))
    first, second = forecast.slots
    assert (first.start_at, first.done_at) == (0.0, 10.0)  # its own median finish
    assert second.start_at == 20.0  # the slot frees when a run of its kind ends on average
    assert forecast.drain_at == 40.0 and forecast.drain_p90_at == 80.0


def test_a_label_kind_speaks_once_a_run_added_gives_it_enough_samples():
    model = learn(samples(5, runtime=10.0) + samples(4, labels=("slow",), runtime=500.0))
    assert model.estimate("api", "task", ["slow"]).level == "rig+type"
    model.add(Sample("api", "task", ("slow",), 500.0))
    estimate = model.estimate("api", "task", ["slow"])
    assert (estimate.level, estimate.runtime_p50) == ("rig+type+label", 500.0)
