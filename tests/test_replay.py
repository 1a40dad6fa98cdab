"""The queue replay under label caps, the overlap gate, token budgets and backoff, on plain values."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sluice.core.admission import touches_overlap
from sluice.core.replay import Charge, Limits, Queued, Running, simulate, simulate_first, simulate_head
from sluice.errors import ConfigError


def item(n, rig="api", p50=100.0, labels=(), touches=(), tokens=0, **kw):
    return Queued(f"it-{n}", rig, p50, p50, labels=frozenset(labels), touches=tuple(touches), tokens=tokens,
                  **kw)


def starts(forecast):
    return [s.start_at for s in forecast.slots]


# --------------------------------------------------------------------------
# Each rule on plain values


def test_a_label_cap_passes_over_an_item_whose_label_is_full():
    queue = [item(1, labels=["db"]), item(2, labels=["db", "slow"]), item(3, labels=["ui"])]
    forecast = simulate(0.0, queue, limits=Limits(label_caps={"db": 1}, interval=10.0))
    assert starts(forecast) == [0.0, 100.0, 0.0]


def test_a_running_polecat_holds_its_labels_cap():
    forecast = simulate(0.0, [item(1, labels=["db"])], [Running("api", 250.0, labels=frozenset({"db"}))],
                        Limits(label_caps={"db": 1}, interval=60.0))
    assert starts(forecast) == [300.0]


def test_overlapping_touches_in_one_rig_wait_for_each_other_and_others_go_around():
    queue = [item(1, touches=["src/api/**"]), item(2, touches=["src/api/auth.py"]),
             item(3, touches=["src/web/*"]), item(4, "web", touches=["src/api/auth.py"]), item(5)]
    forecast = simulate(0.0, queue, limits=Limits(batch_size=10, interval=10.0))
    assert starts(forecast) == [0.0, 100.0, 0.0, 0.0, 0.0]  # another rig's tree never overlaps


def test_a_running_polecat_holds_the_paths_it_touches():
    forecast = simulate(0.0, [item(1, touches=["docs/*.md"])],
                        [Running("api", 45.0, touches=("docs/guide.md",))], Limits(interval=30.0))
    assert starts(forecast) == [60.0]


def test_a_town_budget_holds_launches_until_charges_leave_the_window():
    queue = [item(n, tokens=600) for n in range(3)]
    limits = Limits(town_budget=1000, budget_window=3600.0, interval=60.0)
    assert starts(simulate(0.0, queue, limits=limits)) == [0.0, 3600.0, 7200.0]
    # A charge already in the ledger counts until a window after it was made.
    held = simulate(0.0, queue[:1], limits=limits, charges=[Charge(-3000.0, 500, "api")])
    assert starts(held) == [600.0]
    # A charge older than the window counts for nothing.
    assert starts(simulate(0.0, queue[:1], limits=limits, charges=[Charge(-3600.0, 900, "api")])) == [0.0]


def test_a_rig_budget_holds_only_its_rig():
    queue = [item(1, tokens=600), item(2, tokens=600), item(3, "web", tokens=600)]
    forecast = simulate(0.0, queue, limits=Limits(rig_budgets={"api": 1000}, budget_window=600.0,
                                                  interval=60.0))
    assert starts(forecast) == [0.0, 600.0, 0.0]


def test_an_item_over_its_budget_alone_can_never_start_and_says_so():
    forecast = simulate(0.0, [item(1, tokens=5000), item(2, "web", tokens=10)],
                        limits=Limits(town_budget=4000))
    first, second = forecast.slots
    assert (first.start_at, first.why) == (None, "budget")
    assert (second.start_at, second.why) == (0.0, None)
    over_rig = simulate(0.0, [item(1, tokens=500)], limits=Limits(rig_budgets={"api": 400})).slots[0]
    assert over_rig.why == "budget"


def test_a_backing_off_item_waits_for_its_retry_and_the_rest_go_first():
    queue = [item(1, not_before=95.0), item(2), item(3)]
    forecast = simulate(0.0, queue, limits=Limits(town_cap=1, interval=10.0))
    assert starts(forecast) == [100.0, 0.0, 200.0]  # free at 100 and due by then: it goes before it-3


def test_a_label_cap_of_zero_means_no_slot():
    assert simulate(0.0, [item(1, labels=["x"])], limits=Limits(label_caps={"x": 0})).slots[0].why == (
        "capacity")


def test_a_budget_window_must_be_positive():
    with pytest.raises(ConfigError):
        Limits(budget_window=0)


def test_raising_a_label_cap_can_make_an_eta_later():
    # it-2 carries both labels: under db=1 it waits for it-1's db slot while it-3 takes the ui slot;
    # with db=2 it goes at once, takes the ui slot, and it-3 waits for it.
    queue = [item(1, labels=["db"]), item(2, labels=["db", "ui"]), item(3, labels=["ui"])]
    low = simulate(0.0, queue, limits=Limits(label_caps={"db": 1, "ui": 1}, interval=10.0))
    high = simulate(0.0, queue, limits=Limits(label_caps={"db": 2, "ui": 1}, interval=10.0))
    assert starts(low) == [0.0, 100.0, 0.0] and starts(high) == [0.0, 0.0, 100.0]


# --------------------------------------------------------------------------
# Properties

RIGS = ["a", "b"]
LABELS = ["x", "y", "z"]
TOUCHES = ["src/**", "src/a.py", "src/b/*", "docs/*.md", "docs/x.md"]

rows = st.lists(st.tuples(st.sampled_from(RIGS), st.integers(1, 400), st.frozensets(st.sampled_from(LABELS),
                                                                                     max_size=2),
                          st.lists(st.sampled_from(TOUCHES), max_size=2), st.integers(0, 700),
                          st.integers(0, 600)), max_size=20)
held = st.lists(st.tuples(st.sampled_from(RIGS), st.integers(0, 400), st.frozensets(st.sampled_from(LABELS),
                                                                                    max_size=2),
                          st.lists(st.sampled_from(TOUCHES), max_size=1)), max_size=3)


def build(rows_):
    return [Queued(f"it-{n}", rig, float(p50), float(p50), not_before=float(nb), labels=labels,
                   touches=tuple(touches), tokens=tokens)
            for n, (rig, p50, labels, touches, tokens, nb) in enumerate(rows_)]


def running_of(held_):
    return [Running(rig, float(left), labels, tuple(touches)) for rig, left, labels, touches in held_]


def intervals(forecast, queue, running):
    """(start, end, rig, labels, touches) of every run the replay holds, running ones from 0."""
    out = [(0.0, r.remaining, r.rig, r.labels, r.touches) for r in running]
    for slot, queued in zip(forecast.slots, queue, strict=True):
        if slot.start_at is not None:
            out.append((slot.start_at, slot.done_at, queued.rig, queued.labels, queued.touches))
    return out


@settings(max_examples=150, deadline=None)
@given(rows, held, st.integers(1, 3), st.integers(1, 4), st.integers(1, 120))
def test_no_label_is_ever_held_by_more_runs_than_its_cap(rows_, held_, cap, batch, interval):
    queue, running = build(rows_), running_of(held_)
    caps = {"x": cap, "y": cap + 1}
    forecast = simulate(0.0, queue, running, Limits(label_caps=caps, batch_size=batch, interval=interval))
    spans = intervals(forecast, queue, running)
    for start, _, _, _, _ in spans[len(running):]:
        for label, limit in caps.items():
            live = [s for s in spans if label in s[3] and s[0] <= start < s[1]]
            # what already ran over the cap (the running polecats) is left as it is; nothing new joins it
            over = sum(1 for r in running if label in r.labels and r.remaining > start)
            assert len(live) <= max(limit, over)


@settings(max_examples=150, deadline=None)
@given(rows, held, st.integers(1, 4), st.integers(1, 120))
def test_no_two_runs_of_one_rig_whose_touches_overlap_are_held_at_once(rows_, held_, batch, interval):
    queue, running = build(rows_), running_of(held_)
    forecast = simulate(0.0, queue, running, Limits(batch_size=batch, interval=interval))
    spans = intervals(forecast, queue, running)
    for n, (start, end, rig, _, touches) in enumerate(spans):
        for m, (other_start, other_end, other_rig, _, other_touches) in enumerate(spans):
            if m <= n or rig != other_rig or not touches_overlap(touches, other_touches):
                continue
            if n < len(running) and m < len(running):
                continue  # both were running already
            assert end <= other_start or other_end <= start


@settings(max_examples=150, deadline=None)
@given(rows, st.lists(st.tuples(st.integers(-900, 0), st.integers(0, 700)), max_size=3),
       st.integers(400, 1500), st.integers(1, 4), st.integers(1, 120))
def test_no_window_spends_more_than_the_budget(rows_, ledger, budget, batch, interval):
    queue = build(rows_)
    charges = [Charge(float(at), tokens, "a") for at, tokens in ledger]
    window = 900.0
    forecast = simulate(0.0, queue, limits=Limits(town_budget=budget, budget_window=window, batch_size=batch,
                                                  interval=interval), charges=charges)
    launches = [(s.start_at, q.tokens) for s, q in zip(forecast.slots, queue, strict=True)
                if s.start_at is not None]
    for start, _ in launches:
        spent = sum(c.tokens for c in charges if start - window < c.at <= start)
        spent += sum(t for at, t in launches if start - window < at <= start)
        assert spent <= budget
    for slot, queued in zip(forecast.slots, queue, strict=True):
        assert (slot.why == "budget") == (queued.tokens > budget)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(RIGS), st.integers(1, 400)), max_size=20),
       st.lists(st.tuples(st.sampled_from(RIGS), st.integers(0, 400)), max_size=3),
       st.integers(1, 4), st.integers(1, 3), st.integers(1, 120))
def test_raising_the_town_cap_never_makes_an_eta_later_under_rig_caps(rows_, held_, cap, rig_cap, interval):
    # A batch that never binds: one that does goes to the items first in the queue (next test).
    queue = [Queued(f"it-{n}", rig, float(p50), float(p50)) for n, (rig, p50) in enumerate(rows_)]
    running = [Running(rig, float(left)) for rig, left in held_]
    batch = len(queue) + 1
    low = simulate(0.0, queue, running, Limits(town_cap=cap, rig_caps={"a": rig_cap}, batch_size=batch,
                                               interval=interval))
    high = simulate(0.0, queue, running, Limits(town_cap=cap + 1, rig_caps={"a": rig_cap}, batch_size=batch,
                                                interval=interval))
    for before, after in zip(low.slots, high.slots, strict=True):
        assert after.start_at <= before.start_at


def test_raising_the_town_cap_can_make_an_eta_later_when_the_batch_binds():
    # Under a town cap of 4 the api items it-3 and it-4 wait for 12 and web's it-6 takes the batch at 9;
    # under 5 they go at 9, first in the queue, and fill that tick's batch of 2: it-6 waits for 12.
    rows_ = [("b", 7), ("a", 7), ("a", 4), ("a", 1), ("a", 1), ("b", 1), ("b", 1)]
    queue = [Queued(f"it-{n}", rig, float(p50), float(p50)) for n, (rig, p50) in enumerate(rows_)]
    running = [Running("a", 1.0), Running("b", 4.0), Running("b", 7.0)]
    limits = {"rig_caps": {"a": 2}, "batch_size": 2, "interval": 3.0}
    low = simulate(0.0, queue, running, Limits(town_cap=4, **limits))
    high = simulate(0.0, queue, running, Limits(town_cap=5, **limits))
    assert starts(low) == [0.0, 3.0, 6.0, 12.0, 12.0, 9.0, 9.0]
    assert starts(high) == [0.0, 0.0, 3.0, 9.0, 9.0, 6.0, 12.0]


def test_raising_a_rig_cap_can_make_another_rigs_eta_later():
    # Under a:1 the second api item is passed over and the web item takes the town's second slot;
    # under a:2 the api item takes it, and the web item waits for a slot to free.
    queue = [item(1, "a", p50=2.0), item(2, "a", p50=1.0), item(3, "b", p50=1.0)]
    limits = {"town_cap": 2, "batch_size": 1, "interval": 1.0}
    low = simulate(0.0, queue, limits=Limits(rig_caps={"a": 1}, **limits))
    high = simulate(0.0, queue, limits=Limits(rig_caps={"a": 2}, **limits))
    assert starts(low) == [0.0, 2.0, 1.0] and starts(high) == [0.0, 1.0, 2.0]


@given(rows, held, st.integers(1, 4), st.integers(1, 120))
def test_the_replay_under_every_rule_is_deterministic(rows_, held_, cap, interval):
    limits = Limits(town_cap=cap, label_caps={"x": 1}, town_budget=1000, budget_window=600.0,
                    interval=interval)
    args = (0.0, build(rows_), running_of(held_), limits, [Charge(-100.0, 300, "a")])
    assert simulate(*args) == simulate(*args)


class Watched(list):
    """A queue that notes which of its items a replay asks for."""

    def __init__(self, items):
        super().__init__(items)
        self.asked: set[int] = set()

    def __getitem__(self, index):
        self.asked.add(index)
        return list.__getitem__(self, index)


@settings(max_examples=200, deadline=None)
@given(rows, held, st.dictionaries(st.sampled_from(LABELS), st.integers(0, 2)),
       st.dictionaries(st.sampled_from(RIGS), st.integers(0, 2)), st.one_of(st.none(), st.integers(0, 3)),
       st.integers(1, 4), st.integers(1, 120), st.sampled_from([0, 900]), st.integers(0, 25))
def test_a_replay_of_the_first_rows_gives_them_the_slots_of_the_whole_replay(
        rows_, held_, label_caps, rig_caps, cap, batch, interval, budget, first):
    queue, running = build(rows_), running_of(held_)
    limits = Limits(town_cap=cap, rig_caps=rig_caps, label_caps=label_caps, batch_size=batch,
                    interval=interval, town_budget=budget)
    whole = simulate(0.0, queue, running, limits)
    assert simulate_head(0.0, queue, first, running, limits) == whole.slots[:first]


def test_a_replay_of_the_first_rows_stops_once_they_have_started():
    queue = Watched([item(n, p50=100 + n) for n in range(1000)])
    head = simulate_head(0.0, queue, 5, limits=Limits(town_cap=10, batch_size=5, interval=60.0))
    assert [slot.start_at for slot in head] == [0.0] * 5 and queue.asked == set(range(5))
    queue = Watched(queue)  # a rig cap of one: the first tick walks the whole queue looking for room
    head = simulate_head(0.0, queue, 2, limits=Limits(town_cap=10, batch_size=5, rig_caps={"api": 1},
                                                      interval=60.0))
    assert [slot.start_at for slot in head] == [0.0, 120.0] and len(queue.asked) == 1000


# --------------------------------------------------------------------------
# Items alike are walked together, with the answer of walking them one by one

#: What an item may be, but its id: queues drawn from a few of these hold long runs of items alike.
kinds = st.tuples(st.sampled_from(RIGS), st.sampled_from([30.0, 100.0, 400.0]), st.sampled_from([0.0, 50.0]),
                  st.one_of(st.none(), st.sampled_from([80.0, 150.0])),
                  st.frozensets(st.sampled_from(LABELS), max_size=2),
                  st.lists(st.sampled_from(TOUCHES), max_size=1), st.sampled_from([0, 200, 700]),
                  st.sampled_from([0.0, 90.0, 500.0]), st.sampled_from([None, None, None, "blocked"]))


def alike(base, variants, picks):
    """A queue of ``picks`` over ``base`` and its variants, each of which differs from it in one field."""
    shapes = [base, *((*base[:field], other[field], *base[field + 1:]) for field, other in variants)]
    out = []
    for n, pick in enumerate(picks):
        rig, p50, spread, mean, labels, touches, tokens, not_before, why = shapes[pick % len(shapes)]
        out.append(Queued(f"it-{n}", rig, p50, p50 + spread, not_before, why, mean, labels, tuple(touches),
                          tokens))
    return out


@settings(max_examples=800, deadline=None)
@given(kinds, st.lists(st.tuples(st.integers(0, 8), kinds), max_size=3),
       st.lists(st.integers(0, 3), max_size=40), held,
       st.one_of(st.none(), st.integers(0, 6)), st.dictionaries(st.sampled_from(RIGS), st.integers(0, 3)),
       st.dictionaries(st.sampled_from(LABELS), st.integers(0, 3)), st.integers(1, 5),
       st.sampled_from([0.0, 0.0, 7.0]), st.sampled_from([15.0, 60.0]), st.sampled_from([None, 0.0, 45.0]),
       st.sampled_from([0, 0, 900, 1500]), st.lists(st.tuples(st.integers(-900, 0), st.integers(0, 700)),
                                                    max_size=2),
       st.integers(0, 45))
@example(("a", 100.0, 0.0, None, frozenset(), [], 700, 0.0, None),  # alike but for the tokens charged
         [(6, ("a", 100.0, 0.0, None, frozenset(), [], 200, 0.0, None))], [1, 0, 1, 1], [], None, {}, {}, 4,
         0.0, 60.0, None, 900, [], 4)
def test_walking_items_alike_together_gives_every_slot_of_walking_them_one_by_one(
        base, variants, picks, held_, cap, rig_caps, label_caps, batch, spawn, interval, first_tick, budget,
        ledger, first):
    from helpers.replay_reference import simulate_one_by_one

    queue, running = alike(base, variants, picks), running_of(held_)
    limits = Limits(town_cap=cap, rig_caps=rig_caps, label_caps=label_caps, batch_size=batch,
                    spawn_delay=spawn, interval=interval, first_tick=first_tick, town_budget=budget,
                    budget_window=900.0)
    charges = [Charge(float(at), tokens, "a") for at, tokens in ledger]
    assert simulate(0.0, queue, running, limits, charges) == simulate_one_by_one(0.0, queue, running, limits,
                                                                                  charges)
    whole = simulate(0.0, queue, running, limits, charges)
    firsts = simulate_first(0.0, queue, first, running, limits, charges)
    assert firsts.slots == whole.slots[:first] and (firsts.drain_at, firsts.drain_p90_at) == (
        whole.drain_at, whole.drain_p90_at)
    watched, reference = Watched(queue), Watched(queue)
    head = simulate_head(0.0, watched, first, running, limits, charges)
    assert head == simulate_one_by_one(0.0, reference, running, limits, charges, rows=first).slots
    assert watched.asked == reference.asked  # a first page reads no further into the queue than before
    # Past the first rows, one object for each stretch of items alike, and where each stretch ends.
    stretched = simulate_first(0.0, Stretches(queue, first), first, running, limits, charges)
    assert stretched.slots == whole.slots[:first] and (stretched.drain_at, stretched.drain_p90_at) == (
        whole.drain_at, whole.drain_p90_at)


class Stretches(list):
    """A queue whose items past its first ``rows`` are one object per stretch of items alike but for
    their ids, and which says where each stretch ends (``alike_until``); it counts the items asked for."""

    def __init__(self, items, rows):
        out, ends = list(items[:rows]), []
        for position in range(rows, len(items)):
            if position > rows and _but_id(items[position]) == _but_id(items[position - 1]):
                out.append(out[-1])
                continue
            if position > rows:
                ends.append(position)
            out.append(items[position])
        ends.append(len(items))
        super().__init__(out)
        self.ends, self.asked = ends, 0

    def __getitem__(self, index):
        self.asked += 1
        return list.__getitem__(self, index)

    def alike_until(self, position):
        return self.ends[bisect.bisect_right(self.ends, position)]


def _but_id(item):
    return (item.rig, item.runtime_p50, item.runtime_p90, item.not_before, item.why, item.runtime_mean,
            item.labels, item.touches, item.tokens)


@pytest.mark.parametrize("cap", [None, 40], ids=["no-cap", "town-cap"])
def test_a_drain_counts_a_stretch_of_items_alike_instead_of_reaching_each(cap):
    # 20,000 items in three stretches: the walk for the drain reads a few items a tick, not every one.
    queue = ([item(n, p50=100.0) for n in range(8000)] + [item(n, p50=300.0) for n in range(8000, 12000)]
             + [item(n, p50=100.0) for n in range(12000, 20000)])
    limits = Limits(town_cap=cap, batch_size=50, interval=60.0)
    stretched = Stretches(queue, 10)
    forecast = simulate_first(0.0, stretched, 10, limits=limits)
    whole = simulate(0.0, queue, limits=limits)
    assert forecast.slots == whole.slots[:10] and forecast.drain_at == whole.drain_at
    ticks = {slot.start_at for slot in whole.slots}
    assert stretched.asked < 4 * len(ticks) + 100 < len(queue)


class Counted:
    """A queued item (duck-typed) that counts how often a replay reads when it may go."""

    reads = 0

    def __init__(self, n: int, p50: float = 100.0, tokens: int = 0):
        self.item_id, self.rig, self.runtime_p50, self.runtime_p90 = f"it-{n}", "api", p50, p50
        self.why, self.runtime_mean, self.labels, self.touches = None, None, frozenset(), ()
        self.tokens = tokens

    @property
    def not_before(self) -> float:
        Counted.reads += 1
        return 0.0


@pytest.mark.parametrize("made", [
    lambda n: Counted(n),
    lambda n: Counted(n, p50=100.0 + n / 1000),  # each its own runtime: it counts only once the item goes
    lambda n: Counted(n, tokens=n),  # each its own tokens, and no budget to charge them to
], ids=["alike", "own-runtimes", "own-tokens"])
def test_a_tick_asks_a_run_of_items_alike_once_not_each_of_them(made):
    # 400 items behind a rig cap of one: 400 ticks, each of which used to walk every item still waiting.
    queue = [made(n) for n in range(400)]
    Counted.reads = 0
    forecast = simulate(0.0, queue, limits=Limits(rig_caps={"api": 1}, interval=60.0))
    assert all(slot.start_at is not None for slot in forecast.slots)
    assert sorted(slot.start_at for slot in forecast.slots) == [slot.start_at for slot in forecast.slots]
    assert Counted.reads < 10 * len(queue)


def test_alike_items_going_together_leave_an_earlier_waiting_item_its_turn():
    # a-0 and b-1 wait out a hold, c-2 and c-3 fill tick 0's batch, and a-4 is not reached then. At the
    # next tick a-0 goes first and b-1, waiting ahead of a-4, takes the batch's second place.
    held_until = 60.0
    queue = [Queued("a-0", "a", 100.0, 100.0, not_before=held_until), Queued("b-1", "b", 100.0, 100.0,
                                                                              not_before=held_until),
             Queued("c-2", "c", 100.0, 100.0), Queued("c-3", "c", 100.0, 100.0),
             Queued("a-4", "a", 100.0, 100.0, not_before=held_until)]
    forecast = simulate(0.0, queue, limits=Limits(batch_size=2, interval=60.0))
    assert starts(forecast) == [60.0, 60.0, 0.0, 0.0, 120.0]


def test_alike_items_going_together_are_each_charged_their_tokens():
    queue = [item(n, tokens=300) for n in range(4)]
    forecast = simulate(0.0, queue, limits=Limits(batch_size=4, interval=60.0, town_budget=900,
                                                  budget_window=900.0))
    assert starts(forecast) == [0.0, 0.0, 0.0, 900.0]


# --------------------------------------------------------------------------
# Ticks that can only launch a batch of one stretch each are taken together

#: What the items of a stretch may be: mostly what lets whole ticks be taken together (no touches, no
#: hold, no budget), sometimes what does not.
stretch_kinds = st.tuples(st.sampled_from(RIGS), st.sampled_from([30.0, 100.0, 900.0]),
                          st.sampled_from([0.0, 300.0]), st.one_of(st.none(), st.sampled_from([80.0, 600.0])),
                          st.frozensets(st.sampled_from(LABELS), max_size=1),
                          st.sampled_from([(), (), (), ("src/**",)]), st.sampled_from([0, 200]),
                          st.sampled_from([0.0, 0.0, 90.0, 2000.0]),
                          st.sampled_from([None, None, None, None, "blocked"]))


def stretched_queue(kinds_, runs, rows_):
    """The first ``rows_`` items each their own object, and past them one object for each run."""
    out = []
    for kind, length in runs:
        rig, p50, spread, mean, labels, touches, tokens, not_before, why = kinds_[kind % len(kinds_)]
        shared = Queued(f"run-{len(out)}", rig, p50, p50 + spread, not_before, why, mean, labels, touches,
                        tokens)
        out.extend(Queued(f"it-{len(out) + n}", rig, p50, p50 + spread, not_before, why, mean, labels,
                          touches, tokens) if len(out) + n < rows_ else shared for n in range(length))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(stretch_kinds, min_size=1, max_size=3),
       st.lists(st.tuples(st.integers(0, 2), st.one_of(st.integers(1, 40), st.integers(100, 1500))),
                min_size=1, max_size=4),
       st.lists(st.tuples(st.sampled_from(RIGS), st.integers(0, 2000)), max_size=3),
       st.one_of(st.none(), st.integers(1, 40), st.integers(100, 2000)),
       st.dictionaries(st.sampled_from(RIGS), st.one_of(st.integers(0, 30), st.integers(200, 1500))),
       st.dictionaries(st.sampled_from(LABELS), st.one_of(st.integers(1, 30), st.integers(200, 1500))),
       st.integers(1, 30), st.sampled_from([0.0, 0.0, 7.0]), st.sampled_from([15.0, 60.0]),
       st.sampled_from([None, 0.0, 45.0]), st.sampled_from([0, 5000]), st.sampled_from([0, 0, 1, 7, 40]))
@example([("a", 100.0, 0.0, None, frozenset(), (), 0, 90.0, None)], [(0, 500)], [], None, {}, {}, 5, 0.0,
         60.0, None, 0, 0)  # a stretch held back at the tick the walk reaches it: it waits
@example([("a", 30.0, 0.0, None, frozenset(), (), 200, 0.0, None)], [(0, 500)], [], None, {}, {}, 5, 0.0,
         60.0, None, 5000, 0)  # runs that end within a tick still spend the budget's window
def test_a_long_stretch_taken_a_run_of_ticks_at_once_gives_the_slots_and_drain_of_every_tick(
        kinds_, runs, held_, cap, rig_caps, label_caps, batch, spawn, interval, first_tick, budget, first):
    from helpers.replay_reference import simulate_one_by_one

    queue = stretched_queue(kinds_, runs, first)
    running = [Running(rig, float(left)) for rig, left in held_]
    limits = Limits(town_cap=cap, rig_caps=rig_caps, label_caps=label_caps, batch_size=batch,
                    spawn_delay=spawn, interval=interval, first_tick=first_tick, town_budget=budget,
                    budget_window=900.0)
    charges = [Charge(-300.0, 1000, "a")]
    # A plain list says nothing of its stretches: its replay walks every tick.
    every_tick = simulate_first(0.0, queue, first, running, limits, charges)
    assert simulate_first(0.0, Stretches(queue, first), first, running, limits, charges) == every_tick
    if len(queue) <= 300:
        whole = simulate_one_by_one(0.0, queue, running, limits, charges)
        assert every_tick.slots == whole.slots[:first] and (every_tick.drain_at, every_tick.drain_p90_at) == (
            whole.drain_at, whole.drain_p90_at)


class OneKind(Sequence):
    """``size`` items that are all one object past the first ``rows``; it counts the items asked for."""

    def __init__(self, size, rows_, **kind):
        self.size, self.asked = size, 0
        self.shown = [Queued(f"it-{n}", "api", **kind) for n in range(rows_)]
        self.rest = Queued("rest", "api", **kind)

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        if not 0 <= index < self.size:
            raise IndexError(index)
        self.asked += 1
        return self.shown[index] if index < len(self.shown) else self.rest

    def alike_until(self, index):
        return self.size


@pytest.mark.parametrize("spawn", [0.0, 2.0], ids=["no-delay", "spawn-delay"])
def test_a_stretch_no_cap_binds_is_launched_a_run_of_ticks_at_a_time(spawn):
    # 100,000 items of 15 minutes, 20 a minute under a town cap of 1,000 that never binds: 5,000 ticks.
    limits = Limits(town_cap=1000, batch_size=20, interval=60.0, spawn_delay=spawn)
    stretch = OneKind(100_000, 50, runtime_p50=900.0, runtime_p90=1200.0)
    forecast = simulate_first(0.0, stretch, 50, limits=limits)
    assert forecast == simulate_first(0.0, list(OneKind(100_000, 50, runtime_p50=900.0, runtime_p90=1200.0)),
                                      50, limits=limits)
    assert forecast.drain_at == 4999 * 60.0 + 19 * spawn + 900.0 and forecast.drain_p90_at == (
        forecast.drain_at + 300.0)
    assert stretch.asked < 500  # a few reads a run of ticks, not a few a tick


def test_a_stretch_that_can_never_start_is_passed_over_whole():
    stretch = OneKind(100_000, 50, runtime_p50=900.0, runtime_p90=1200.0, why="blocked")
    forecast = simulate_first(0.0, stretch, 50, [Running("api", 30.0)], Limits(batch_size=20))
    assert [slot.why for slot in forecast.slots] == ["blocked"] * 50 and forecast.drain_at == 30.0
    assert stretch.asked < 100
