"""A cycle takes its queue from the one the last cycle left only while that queue is exactly what a survey
would find, and then plans and reports exactly what a survey's cycle would."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import make_repo
from helpers.foundation import quick_town
from helpers.scheduler import configure, counted_surveys, ephemeral_path, item, write_items
from sluice.core import admission as rules
from sluice.errors import ExecutorError
from sluice.scheduler import chain
from sluice.scheduler.dispatch import run_cycle
from sluice.scheduler.sling import SlingOptions, sling
from sluice.store.rigs import add_rig
from sluice.store.town import Town

# -- the pure tally: the head in rank order and the rest by shape admit as the whole ranking -------------

SHAPES = [("a", frozenset(), 10, ()), ("a", frozenset({"db"}), 10, ()), ("b", frozenset(), 50, ()),
          ("b", frozenset({"db", "ui"}), 10, ("src/*",)), ("a", frozenset({"ui"}), 500, ("src/api/x",))]


@settings(max_examples=300, deadline=None)
@given(picks=st.lists(st.integers(0, len(SHAPES) - 1), max_size=40), cut=st.integers(0, 40),
       capacity=st.integers(0, 6), batch=st.integers(1, 5), rig_cap=st.one_of(st.none(), st.integers(0, 3)),
       label_cap=st.one_of(st.none(), st.integers(0, 3)), budget=st.sampled_from([0, 60, 400]),
       running=st.lists(st.integers(0, len(SHAPES) - 1), max_size=3), gated=st.booleans(),
       throttled=st.booleans())
def test_a_head_and_the_shapes_of_the_rest_admit_as_the_whole_ranking(
        picks, cut, capacity, batch, rig_cap, label_cap, budget, running, gated, throttled):
    applicants = [rules.Applicant(f"c{n}", f"i{n}", SHAPES[p][0], SHAPES[p][2], SHAPES[p][1], SHAPES[p][3])
                  for n, p in enumerate(picks)]
    runs = [rules.Running(f"r{n}", SHAPES[p][0], SHAPES[p][1], SHAPES[p][3]) for n, p in enumerate(running)]
    limits = rules.Limits(capacity, batch, rig_caps={"b": rig_cap} if rig_cap is not None else {},
                          label_caps={"db": label_cap} if label_cap is not None else {}, town_budget=budget)
    extra = {"throttles": [rules.Throttle(100.0, "a", "test")] if throttled else [],
             "gates": [rules.Reason(rules.HOLD_FILE, "held")] if gated else [], "now": 0.0}
    whole = rules.admit(applicants, runs, limits, **extra)
    head, rest = applicants[:cut], {}
    for a in applicants[cut:]:
        rest[rules.shape_of(a)] = rest.get(rules.shape_of(a), 0) + 1
    tally = rules.admit_head(head, rest, runs, limits, **extra)
    if tally is None:  # only when the rest's order could matter
        assert rest and _order_of_rest_matters(head, rest, runs, limits, extra)
        return
    assert tally.to_dispatch == whole.to_dispatch
    assert tally.skipped == whole.skipped and tally.reason == whole.reason
    assert dict(tally.held) == {a.key: whole.held[a.key] for a in head if a.key in whole.held}
    why: dict[str, int] = {}
    for reasons in whole.held.values():
        for code in dict.fromkeys(r.code for r in reasons):
            why[code] = why.get(code, 0) + 1
    assert dict(tally.why) == why


def _order_of_rest_matters(head, rest, runs, limits, extra) -> bool:
    """Whether admitting the rest in one order or another could plan or report otherwise: the plan is
    not full after the head and a work of the rest could still be planned, or no work of the head was
    held by a rule but works of the rest are, by rules of different first codes (the reason names the
    first)."""
    not_rules = {rules.BATCH, rules.CAPACITY, *(gate.code for gate in extra["gates"])}

    def first_rule(reasons) -> str | None:
        return next((r.code for r in reasons if r.code not in not_rules), None)

    after_head = rules.admit(head, runs, limits, **extra)
    probes = [rules.Applicant("probe", "probe", rig, tokens, labels, touches)
              for rig, labels, tokens, touches in rest]
    with_probe = [rules.admit([*head, probe], runs, limits, **extra) for probe in probes]
    slots = 0 if extra["gates"] else min(limits.capacity, limits.batch)
    could = any(len(found.to_dispatch) > len(after_head.to_dispatch) for found in with_probe)
    head_rule = any(first_rule(reasons) for reasons in after_head.held.values())
    firsts = {first_rule(found.held.get("probe", ())) for found in with_probe} - {None}
    return (len(after_head.to_dispatch) < slots and could) or (not head_rule and len(firsts) > 1)


def test_a_head_whose_plan_is_not_full_leaves_the_rest_to_a_survey():
    applicants = [rules.Applicant(f"c{n}", f"i{n}", "a") for n in range(3)]
    limits = rules.Limits(5, 5)
    assert rules.admit_head(applicants[:1], {rules.shape_of(applicants[1]): 2}, [], limits, now=0.0) is None
    assert rules.admit_head(applicants, {}, [], limits, now=0.0).to_dispatch == tuple(applicants)


def test_a_plan_a_cap_leaves_short_is_told_when_no_work_of_the_rest_could_join_it():
    """Behind a binding rig cap the plan is not full, yet no work of the rest can be planned (each is
    of the capped rig): the head and the rest's shapes tell the whole admission, as they do for a full
    plan, instead of leaving a long capped queue to a survey at every cycle and view."""
    applicants = [rules.Applicant(f"c{n}", f"i{n}", "a") for n in range(6)]
    limits = rules.Limits(10, 5, rig_caps={"a": 2})
    rest = {rules.shape_of(applicants[3]): 3}
    tally = rules.admit_head(applicants[:3], rest, [], limits, now=0.0)
    whole = rules.admit(applicants, [], limits, now=0.0)
    assert tally is not None and tally.to_dispatch == whole.to_dispatch == tuple(applicants[:2])
    assert tally.reason == whole.reason == rules.RIG_CAP and tally.skipped == 4
    assert dict(tally.why) == {rules.RIG_CAP: 4}  # no batch reason: the plan is not full
    other = {**rest, ("b", frozenset(), 0, ()): 1}  # a work of another rig could still be planned
    assert rules.admit_head(applicants[:3], other, [], limits, now=0.0) is None


@settings(max_examples=100, deadline=None)
@given(kept=st.sets(st.text(max_size=12), max_size=40), added=st.sets(st.text(max_size=12), max_size=10),
       other=st.text(max_size=12))
def test_the_ids_a_chain_has_seen_hold_every_one_added_through_a_write_and_a_read(kept, added, other):
    """Never a key added taken for one not (a false "new" would fold a change as a new context)."""
    from sluice.scheduler.chaintail import Seen

    seen = Seen.of(kept)
    for key in added:
        seen.add(key)
    again = Seen.from_json(json.loads(json.dumps(seen.to_json())))
    for held in (seen, again):
        assert all(key in held for key in kept | added)
        if other not in kept | added and other in held:  # a CRC shared with a key held: possible, rare
            assert any(zlib.crc32(other.encode()) == zlib.crc32(k.encode()) for k in kept | added)
    assert len(again) == len({zlib.crc32(k.encode()) for k in kept | added})


# -- in a town: every chained cycle is checked against a survey of the same moment -------------------------


def two_rigs(base: Path, clock):
    from sluice.executors.memory import MemoryExecutor

    town_dir = quick_town(base)
    add_rig(Town(town_dir), "alpha", make_repo(base / "repos" / "alpha"), "al")
    add_rig(Town(town_dir), "beta", make_repo(base / "repos" / "beta"), "be")
    configure(town_dir, "executor.kind", "memory")
    configure(town_dir, "scheduler.max_polecats", "3")
    configure(town_dir, "scheduler.batch_size", "2")
    configure(town_dir, "scheduler.label_caps.db", "1")
    configure(town_dir, "rigs.beta.max_polecats", "1")
    memory = MemoryExecutor(clock).serve(Town(town_dir))
    records = {}
    for prefix, rig in (("al", "alpha"), ("be", "beta")):
        records[rig] = {f"{prefix}-{n}": item(f"{prefix}-{n}", priority=n % 3,
                                              labels=["db"] if n % 4 == 0 else [])
                        for n in range(SLUNG + FRESH)}
        write_items(town_dir, rig, list(records[rig].values()))
    return town_dir, memory, records


#: Items of each rig slung before the operations; the next ``FRESH`` ones are first slung by them.
SLUNG, FRESH = 8, 4

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("cycle"), st.integers(1, 3)),
        st.tuples(st.just("cycle"), st.integers(1, 3)),
        st.tuples(st.just("sling"), st.sampled_from(["alpha", "beta"]), st.integers(0, SLUNG + FRESH - 1)),
        st.tuples(st.just("sling"), st.sampled_from(["alpha", "beta"]),
                  st.integers(SLUNG, SLUNG + FRESH - 1)),
        st.tuples(st.just("close"), st.sampled_from(["alpha", "beta"]), st.integers(0, SLUNG + FRESH - 1)),
        st.tuples(st.just("finish"), st.sampled_from(["al", "be"]), st.integers(0, SLUNG + FRESH - 1)),
        st.tuples(st.just("advance"), st.integers(1, 90)),
        st.tuples(st.just("clear"), st.booleans()),
        st.tuples(st.just("unsling"), st.sampled_from(["alpha", "beta"]), st.integers(0, SLUNG + FRESH - 1)),
    ),
    min_size=1, max_size=10,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, head=st.integers(1, 12), beta=st.booleans(), fair=st.booleans())
def test_a_chained_cycle_plans_and_reports_what_a_survey_would(clock, checked, monkeypatch, ops, head, beta,
                                                               fair):
    """``head``: how many ready works a chain keeps in rank order (a plan may reach past them);
    ``beta``: whether rig beta has anything queued (else its log does not exist); ``fair``: a fairness
    weight that outweighs priority, so each launch can move one rig's kinds past the other's; a sling
    between two cycles (of an item not queued yet, or of one queued or running: then nothing) lands
    before the views and the next cycle."""
    _run_ops(clock, monkeypatch, ops, head, beta, fair)


def test_views_after_slings_between_cycles_take_the_chain_as_the_survey_would(clock, checked, monkeypatch):
    """The operations of the property test above, in one order where slings land between cycles and
    views: some of those views (each held to a survey) take the chain with the slung works folded in,
    and so do the cycles after them."""
    ops = [("cycle", 1), ("sling", "alpha", 8), ("sling", "beta", 9), ("cycle", 1), ("sling", "alpha", 10),
           ("advance", 5), ("sling", "alpha", 9), ("cycle", 2), ("sling", "beta", 11), ("cycle", 1)]
    seen = _run_ops(clock, monkeypatch, ops, 12, True, False)
    assert any(op == "sling" and appended and any(views) for op, appended, views in seen)
    assert len(checked) >= 6  # the cycles after the first survey, and views, each held to a survey


def _run_ops(clock, monkeypatch, ops, head: int, beta: bool, fair: bool
             ) -> list[tuple[str, bool, list[bool]]]:
    """Run ``ops`` on a town of two rigs, holding every status and page of list after each to a survey;
    per op: its name, whether it appended to a log, and which of those views took the chain."""
    from sluice.executors.memory import MemoryExecutor
    from sluice.scheduler import advisor
    from sluice.scheduler.control import clear

    monkeypatch.setattr(chain, "HEAD_WORKS", head)
    base = Path(tempfile.mkdtemp(prefix="chain-"))
    seen = []
    try:
        town_dir, memory, records = two_rigs(base, clock)
        if fair:
            advisor.policy_set(Town(town_dir), fairness=3.0)
        for rig, items in records.items():
            if rig == "alpha" or beta:
                sling(Town(town_dir), [*list(items)[:SLUNG], rig], SlingOptions())
        _listed(town_dir)  # the digests a cycle's chain stands on (a cycle that read a log whole leaves none)
        for op in ops:
            sizes = [_size(ephemeral_path(town_dir, rig)) for rig in records]
            if op[0] == "cycle":
                for _ in range(op[1]):
                    run_cycle(Town(town_dir))
            elif op[0] == "sling":
                sling(Town(town_dir), [f"{op[1][:2]}-{op[2]}", op[1]], SlingOptions())
            elif op[0] == "close":
                records[op[1]][f"{op[1][:2]}-{op[2]}"]["status"] = "closed"
                write_items(town_dir, op[1], list(records[op[1]].values()))
            elif op[0] == "finish":
                with contextlib.suppress(ExecutorError):  # not running: nothing to end
                    memory.finish(f"{op[1]}-{op[2]}", op[2] % 2)
            elif op[0] == "advance":
                clock.advance(op[1])
            elif op[0] == "clear" and op[1]:
                clear(Town(town_dir))
            elif op[0] == "unsling":  # a clear of one item: queued, running or neither
                clear(Town(town_dir), f"{op[1][:2]}-{op[2]}")
            appended = sizes != [_size(ephemeral_path(town_dir, rig)) for rig in records]
            STATUS_FROM_CHAIN.clear()
            assert_snapshot_as_surveyed(town_dir, monkeypatch, 5)  # first: the reading is the last op's
            for limit in (2, 50):
                assert_status_as_surveyed(town_dir, monkeypatch, limit)
            seen.append((op[0], appended, list(STATUS_FROM_CHAIN)))
        MemoryExecutor.forget_town(Town(town_dir))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return seen


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else -1


#: Whether each status checked by :func:`assert_status_as_surveyed` came from the chain.
STATUS_FROM_CHAIN: list[bool] = []


def assert_snapshot_as_surveyed(town_dir: Path, monkeypatch, limit: int) -> None:
    """A snapshot's queue, counts and forecast, from the chain and the forecast's reading as kept or carried
    past the lines since, are a survey's of the same files at the same moment."""
    from sluice.scheduler import queue, queuekeep

    now = time.time()
    for name in (queuekeep.FILE, queuekeep.REPLAY_SUMMARY_FILE):
        queuekeep.path(Town(town_dir), name).unlink(missing_ok=True)
    shown = _snapshot_parts(town_dir, now, limit)
    for name in (queuekeep.FILE, queuekeep.REPLAY_SUMMARY_FILE, queuekeep.REPLAY_FILE):
        queuekeep.path(Town(town_dir), name).unlink(missing_ok=True)
    with monkeypatch.context() as patched:
        patched.setattr(queue, "_chain_page", lambda session, rows: None)
        assert shown == _snapshot_parts(town_dir, now, limit)


def _snapshot_parts(town_dir: Path, now: float, limit: int) -> dict:
    """What of ``snapshot --limit`` stands on the queue (not the polecats' running times or the logs)."""
    from sluice.scheduler.session import Session
    from sluice.scheduler.snapshot import snapshot

    snap = snapshot(Session(Town(town_dir), now=now), limit=limit)
    return {key: snap[key] for key in ("scheduler", "forecast", "queue", "rigs")}


def assert_status_as_surveyed(town_dir: Path, monkeypatch, limit: int) -> dict:
    """``scheduler status`` as it answers (from the chain when one stands) equals a survey's of the same
    files and moment, neither with a kept head to give."""
    from sluice.scheduler import forecast, queue, queuekeep
    from sluice.scheduler.forecast import list_queue
    from sluice.scheduler.session import Session

    real = queue._chain_page

    def spied(session, rows):
        page = real(session, rows)
        STATUS_FROM_CHAIN.append(page is not None)
        return page

    queuekeep.path(Town(town_dir)).unlink(missing_ok=True)
    with monkeypatch.context() as patched:
        patched.setattr(queue, "_chain_page", spied)
        answered, counts = queue.status_with_counts(Town(town_dir), limit=limit, chained=True)
    queuekeep.path(Town(town_dir)).unlink(missing_ok=True)
    with monkeypatch.context() as patched:
        patched.setattr(queue, "_chain_page", lambda session, rows: None)
        surveyed, surveyed_counts = queue.status_with_counts(Town(town_dir), limit=limit, chained=True)
    assert answered == surveyed
    assert counts.rigs == surveyed_counts.rigs  # per rig, as the snapshot would show them
    # A page of `scheduler list`, its rows' times replayed from the chain's walk when it reaches them
    # (both at one moment: the first launch is forecast for now).
    now = time.time()
    for name in (queuekeep.FILE, queuekeep.REPLAY_HEAD_FILE, queuekeep.REPLAY_FILE):
        queuekeep.path(Town(town_dir), name).unlink(missing_ok=True)
    with monkeypatch.context() as patched:
        patched.setattr(queue, "_chain_page", spied)
        listed = list_queue(Session(Town(town_dir), now=now), limit=limit)
    for name in (queuekeep.FILE, queuekeep.REPLAY_HEAD_FILE, queuekeep.REPLAY_FILE):
        queuekeep.path(Town(town_dir), name).unlink(missing_ok=True)
    with monkeypatch.context() as patched:
        patched.setattr(queue, "_chain_page", lambda session, rows: None)
        patched.setattr(forecast, "_chain_reading", lambda session: None)
        assert listed == list_queue(Session(Town(town_dir), now=now), limit=limit)
    return answered


def test_after_a_cycle_status_answers_from_its_chain_as_a_survey_would(cli, rig, town_dir, memory, checked,
                                                                        monkeypatch):
    """A daemon's every cycle changes the queue, so each status after one used to survey all of it."""
    from sluice.scheduler import queue

    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "3")
    configure(town_dir, "scheduler.label_caps.db", "1")
    gate = item("al-gate")  # open and never queued: the items behind it stay blocked
    write_items(town_dir, "alpha", [gate] + [
        item(f"al-{n:02}", priority=n % 4, labels=["db"] if n % 5 == 0 else [],
             deps=(("blocks", "al-gate"),) if n >= 16 else ()) for n in range(20)])
    sling(Town(town_dir), [f"al-{n:02}" for n in range(20)] + ["alpha"], SlingOptions())
    queue.status(Town(town_dir))  # the digest a cycle's chain stands on (a cycle that read the log whole
    for cycles in range(1, 4):        # leaves none)
        run_cycle(Town(town_dir))
        surveys = counted_surveys(monkeypatch, queue)
        STATUS_FROM_CHAIN.clear()
        answered = assert_status_as_surveyed(town_dir, monkeypatch, 5)
        # status and a page of list from the chain; the two surveys are the comparisons', and the third
        # the list's replay: to find room under the label cap it walks into the blocked works the chain
        # does not keep, so it reads the whole queue
        assert STATUS_FROM_CHAIN == [True, True] and len(surveys) == 3
        assert answered["queued_total"] == 20 - 3 * cycles and len(answered["items"]) == 5
        assert answered["queued_ready"] == 16 - 3 * cycles  # the four behind al-gate are counted blocked
        assert any("label-cap" in row["why"] or "batch" in row["why"] for row in answered["items"])
    with monkeypatch.context() as patched:  # a status after a cycle, past the chain's walk: surveyed
        patched.setattr(queue, "_chain_page", lambda session, rows: None)
        assert queue.status(Town(town_dir), limit=50)["items_total"] == 11
    from sluice.scheduler.control import pause

    pause(Town(town_dir), actor="ops")  # no cycle runs, the chain stands: every row says why
    STATUS_FROM_CHAIN.clear()
    paused = assert_status_as_surveyed(town_dir, monkeypatch, 5)
    assert STATUS_FROM_CHAIN == [True, True] and paused["binding"]["code"] == "paused"
    assert all(row["why"][0] == "paused" for row in paused["items"])


def test_after_a_cycle_a_page_of_list_replays_from_its_chain_as_a_survey_would(cli, rig, town_dir, memory,
                                                                                checked, monkeypatch):
    from sluice.scheduler import forecast, queue

    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "3")
    write_items(town_dir, "alpha", [item(f"al-{n:02}", priority=n % 4) for n in range(30)])
    sling(Town(town_dir), [f"al-{n:02}" for n in range(30)] + ["alpha"], SlingOptions())
    queue.status(Town(town_dir))
    readings: list[bool] = []
    real = forecast._chain_reading
    monkeypatch.setattr(forecast, "_chain_reading", lambda session: readings.append(1) or real(session))
    for _ in range(2):
        run_cycle(Town(town_dir))
        surveys = counted_surveys(monkeypatch, queue)
        STATUS_FROM_CHAIN.clear()
        readings.clear()
        assert_status_as_surveyed(town_dir, monkeypatch, 5)
        assert STATUS_FROM_CHAIN == [True, True] and readings == [1] and len(surveys) == 2


def _slung_one_by_one(town_dir: Path, records: list[dict]) -> None:
    from sluice.scheduler import queue

    write_items(town_dir, "alpha", records)
    for record in records:
        sling(Town(town_dir), [record["id"], "alpha"], SlingOptions())
    queue.status(Town(town_dir))  # the digest a cycle's chain stands on


def test_a_binding_limit_named_only_past_the_walk_is_left_to_a_survey(cli, rig, town_dir, memory, checked,
                                                                       monkeypatch):
    """The walk plans its works in full, every work past it is held by the label cap: the plan's reason
    is the cap, whose sentence only a work the chain did not walk can give."""
    monkeypatch.setattr(chain, "HEAD_WORKS", 4)
    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "2")
    configure(town_dir, "scheduler.label_caps.db", "1")
    names = ["al-d0", "al-a0", "al-b1", "al-b2", "al-a3", "al-a4"]
    _slung_one_by_one(town_dir, [item(name, priority=0, labels=["db"] if name in ("al-d0", "al-a3", "al-a4")
                                      else []) for name in names])
    run_cycle(Town(town_dir))
    STATUS_FROM_CHAIN.clear()
    answered = assert_status_as_surveyed(town_dir, monkeypatch, 2)
    assert STATUS_FROM_CHAIN[0] is False  # surveyed: the chain stood, its walk could not name the limit
    assert answered["binding"]["code"] == "label-cap" and answered["binding"]["detail"]


def test_backing_off_work_counts_as_ready_in_a_status_from_the_chain(cli, rig, town_dir, memory, checked,
                                                                     monkeypatch):
    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "2")
    _slung_one_by_one(town_dir, [item(f"al-{n:02}", priority=0) for n in range(10)])
    memory.fail_next("al-00")
    run_cycle(Town(town_dir))  # al-00's launch fails: no chain
    run_cycle(Town(town_dir))  # a survey, al-00 backing off: a chain
    run_cycle(Town(town_dir))  # taken
    STATUS_FROM_CHAIN.clear()
    answered = assert_status_as_surveyed(town_dir, monkeypatch, 3)
    assert STATUS_FROM_CHAIN[0] is True
    assert json.loads((Town(town_dir).runtime / chain.FILE).read_bytes())["backing_off"] == 1  # al-00
    assert answered["queued_total"] == answered["queued_ready"] == 5  # al-00 among them, waiting


def test_an_executor_that_cannot_say_what_runs_leaves_status_to_a_survey(cli, rig, town_dir, memory, checked,
                                                                          monkeypatch):
    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "2")
    _slung_one_by_one(town_dir, [item(f"al-{n:02}", priority=0) for n in range(10)])
    run_cycle(Town(town_dir))
    run_cycle(Town(town_dir))
    memory.unavailable = "down"
    STATUS_FROM_CHAIN.clear()
    answered = assert_status_as_surveyed(town_dir, monkeypatch, 3)
    assert STATUS_FROM_CHAIN[0] is False and "down" in answered["executor_error"]


def test_a_drain_surveys_once_and_launches_in_the_surveyed_order(cli, rig, town_dir, memory, checked,
                                                                   monkeypatch):
    from sluice.scheduler import dispatch

    surveys = counted_surveys(monkeypatch, dispatch)
    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "3")
    write_items(town_dir, "alpha", [item(f"al-{n:02}", priority=n % 4) for n in range(20)])
    sling(Town(town_dir), [*(f"al-{n:02}" for n in range(20)), "alpha"], SlingOptions())
    expected = [row["id"] for row in _listed(town_dir)]
    launched = []
    for _ in range(8):
        launched += [row["item_id"] for row in run_cycle(Town(town_dir)).launched]
    assert launched == expected
    # The first cycle surveyed (from the digest the listing left) and left a chain; every later one took
    # it, the last one too, over an empty queue.
    assert len(surveys) == 1 and len(checked) == 7


def _listed(town_dir: Path) -> list[dict]:
    from sluice.scheduler.queue import list_queue

    return list_queue(Town(town_dir))


def _drained_once(town_dir: Path) -> None:
    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "1")
    write_items(town_dir, "alpha", [item(f"al-{n}") for n in range(6)])
    sling(Town(town_dir), [*(f"al-{n}" for n in range(5)), "alpha"], SlingOptions())
    run_cycle(Town(town_dir))
    run_cycle(Town(town_dir))
    assert (Town(town_dir).runtime / chain.FILE).exists()


def _sling_another(town_dir: Path) -> None:
    sling(Town(town_dir), ["al-5", "alpha"], SlingOptions())


def _close_an_item(town_dir: Path) -> None:
    write_items(town_dir, "alpha", [item(f"al-{n}", status="closed" if n == 4 else "open") for n in range(6)])


def _configure(town_dir: Path) -> None:
    configure(town_dir, "scheduler.label_caps.db", "1")


def _past_its_horizon(town_dir: Path) -> None:
    import time

    data = json.loads((Town(town_dir).runtime / chain.FILE).read_bytes())
    data["until"] = time.time() - 1
    (Town(town_dir).runtime / chain.FILE).write_text(json.dumps(data))


def _cut(town_dir: Path) -> None:
    path = Town(town_dir).runtime / chain.FILE
    path.write_bytes(path.read_bytes()[:200])


def _rewritten_in_place(town_dir: Path) -> None:
    """The log's bytes written again where they are: the same size and ending, another modification."""
    import time

    path = ephemeral_path(town_dir, "alpha")
    data = path.read_bytes()
    time.sleep(0.01)
    with open(path, "r+b") as fh:
        fh.write(data)


def _promote_another(town_dir: Path) -> None:
    """A line that changes a queued context (its promotion): not a new one, which a chain could fold in."""
    from sluice.scheduler.promote import promote

    promote(Town(town_dir), "al-3")


@pytest.mark.parametrize("change", [_promote_another, _close_an_item, _configure, _past_its_horizon, _cut,
                                    _rewritten_in_place])
def test_anything_but_the_cycles_own_lines_makes_the_next_cycle_survey(cli, rig, town_dir, memory, checked,
                                                                      monkeypatch, change):
    from sluice.scheduler import dispatch

    _drained_once(town_dir)
    surveys = counted_surveys(monkeypatch, dispatch)
    change(town_dir)
    report = run_cycle(Town(town_dir))
    assert len(surveys) == 1 and report.dispatched == 1 and not checked
    run_cycle(Town(town_dir))  # a survey that had to tidy (a stale context) left no chain; the next one does
    run_cycle(Town(town_dir))
    assert len(surveys) <= 2 and checked


def test_a_sling_after_the_marks_is_folded_into_the_next_cycle(cli, rig, town_dir, memory, checked,
                                                               monkeypatch):
    """The one change above that a chain now follows: a sling's new context, of an item not queued."""
    from sluice.scheduler import dispatch

    _drained_once(town_dir)
    surveys = counted_surveys(monkeypatch, dispatch)
    _sling_another(town_dir)
    report = run_cycle(Town(town_dir))
    assert not surveys and report.dispatched == 1 and len(checked) == 1
    assert [r["item_id"] for r in run_cycle(Town(town_dir)).launched] == ["al-3"]
    assert [r["item_id"] for r in run_cycle(Town(town_dir)).launched] == ["al-4"]
    assert [r["item_id"] for r in run_cycle(Town(town_dir)).launched] == ["al-5"]
    assert not surveys and len(checked) == 4


def test_a_file_that_changes_while_the_survey_reads_it_leaves_no_chain(cli, rig, town_dir, memory, checked,
                                                                      monkeypatch):
    from sluice.scheduler import dispatch

    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "1")
    write_items(town_dir, "alpha", [item(f"al-{n}") for n in range(4)])
    sling(Town(town_dir), [*(f"al-{n}" for n in range(4)), "alpha"], SlingOptions())
    _listed(town_dir)  # a reader leaves the digest, so the cycle reads the log from its mark (and may chain)
    real = dispatch._surveyed

    def surveyed(*args, **kwargs):  # the export rewritten the moment after the survey read it
        answer = real(*args, **kwargs)
        write_items(town_dir, "alpha", [item(f"al-{n}", status="closed" if n == 1 else "open")
                                        for n in range(4)])
        return answer

    monkeypatch.setattr(dispatch, "_surveyed", surveyed)
    assert [r["item_id"] for r in run_cycle(Town(town_dir)).launched] == ["al-0"]
    assert not (Town(town_dir).runtime / chain.FILE).exists()
    monkeypatch.setattr(dispatch, "_surveyed", real)
    report = run_cycle(Town(town_dir))  # surveys: closes al-1's context, launches al-2
    assert [r["item_id"] for r in report.launched] == ["al-2"] and report.closed and not checked


@pytest.mark.parametrize("digest", [True, False])
def test_a_log_that_vanishes_after_the_survey_read_it_leaves_no_chain(cli, rigs, town_dir, memory, clock,
                                                                    monkeypatch, digest):
    """Rig beta's contexts were read (blocked, so none of them is kept); its log then goes: no chain may
    stand on a log it no longer has, whether the survey read it from its digest or whole."""
    from sluice.scheduler import dispatch

    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "1")
    write_items(town_dir, "alpha", [item(f"al-{n}") for n in range(3)])
    blocked = [item(f"be-{n}", deps=[("blocks", "be-0")]) for n in (1, 2)]
    write_items(town_dir, "beta", [item("be-0"), *blocked])
    sling(Town(town_dir), ["al-0", "al-1", "al-2", "alpha"], SlingOptions())
    sling(Town(town_dir), ["be-1", "be-2", "beta"], SlingOptions())
    _listed(town_dir)  # a reader leaves the digests, so the cycle reads each log from its mark
    if not digest:  # beta's log read whole, then
        (Town(town_dir).runtime / "index" / "beta.queue.json").unlink()
    real = dispatch._surveyed

    def surveyed(*args, **kwargs):
        answer = real(*args, **kwargs)
        ephemeral_path(town_dir, "beta").unlink()
        return answer

    monkeypatch.setattr(dispatch, "_surveyed", surveyed)
    assert [r["item_id"] for r in run_cycle(Town(town_dir)).launched] == ["al-0"]
    assert not (Town(town_dir).runtime / chain.FILE).exists()


def test_a_launch_from_beyond_the_kept_works_leaves_no_chain(cli, rigs, town_dir, memory, clock, monkeypatch):
    """Beta's works head the ranking but are throttled; alpha's first is held by a label cap, so the plan
    reaches an alpha work the chain did not keep: its counts could not follow that launch."""
    from sluice.store import admission_state

    monkeypatch.setattr(chain, "HEAD_WORKS", 5)  # beta's three, al-0 and al-1
    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "2")
    configure(town_dir, "scheduler.label_caps.db", "1")
    write_items(town_dir, "beta", [item(f"be-{n}", priority=0) for n in range(3)])
    write_items(town_dir, "alpha", [item(f"al-{n}", priority=2, labels=["db"] if n < 2 else [])
                                    for n in range(6)])
    sling(Town(town_dir), ["be-0", "be-1", "be-2", "beta"], SlingOptions())
    sling(Town(town_dir), [*(f"al-{n}" for n in range(6)), "alpha"], SlingOptions())
    admission_state.set_throttle(Town(town_dir), clock.now + 100, "beta", "test", "test", clock.now)
    _listed(town_dir)
    assert [r["item_id"] for r in run_cycle(Town(town_dir)).launched] == ["al-0", "al-2"]
    assert not (Town(town_dir).runtime / chain.FILE).exists()


def _duplicate(town_dir: Path) -> None:
    """A second open context for al-1, as a hand edit (or a writer without the sling lock) leaves it."""
    path = ephemeral_path(town_dir, "alpha")
    lines = [line for line in path.read_text().splitlines() if '\\"work_bead_id\\": \\"al-1\\"' in line
             or '\\"work_bead_id\\":\\"al-1\\"' in line]
    record = json.loads(lines[-1])
    record["id"] = "al-wisp-zzzz"
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def test_a_survey_that_finds_a_duplicate_context_leaves_no_chain(cli, rig, town_dir, memory):
    """A duplicate context becomes the queued one once the first launches: nothing a chain could follow."""
    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "1")
    write_items(town_dir, "alpha", [item(f"al-{n}") for n in range(6)])
    sling(Town(town_dir), [*(f"al-{n}" for n in range(5)), "alpha"], SlingOptions())
    _listed(town_dir)
    _duplicate(town_dir)
    assert run_cycle(Town(town_dir)).dispatched == 1
    assert not (Town(town_dir).runtime / chain.FILE).exists()


def test_a_survey_that_holds_a_missing_item_leaves_no_chain(cli, town_dir, memory, tmp_path):
    """A missing item's context is held until its grace ends or the item is back: nothing a chain follows."""
    export = tmp_path / "export.jsonl"
    export.write_text("".join(json.dumps(item(f"ex-{n}")) + "\n" for n in range(5)))
    cli.run("rig", "add", "ext", str(make_repo(tmp_path / "repos" / "ext")), "--prefix", "ex", "--items",
            str(export))
    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "1")
    sling(Town(town_dir), [*(f"ex-{n}" for n in range(5)), "ext"], SlingOptions())
    _listed(town_dir)
    export.write_text("".join(json.dumps(item(f"ex-{n}")) + "\n" for n in range(5) if n != 3))
    report = run_cycle(Town(town_dir))
    assert report.dispatched == 1 and [h["item_id"] for h in report.held] == ["ex-3"]
    assert not (Town(town_dir).runtime / chain.FILE).exists()


@pytest.mark.parametrize("capped", [False, True])
def test_a_launch_that_moves_fairness_reorders_the_kept_kinds(cli, rigs, town_dir, memory, checked,
                                                               monkeypatch, capped):
    """After alpha's launch beta is the rig with fewer decisions, and fairness lifts its work above alpha's:
    the next cycle ranks its kept works afresh.  ``capped``: beta's oldest is held by a label cap, so the
    plan would reach a beta work the chain did not keep, and the cycle surveys instead."""
    from sluice.scheduler import advisor, dispatch

    monkeypatch.setattr(chain, "HEAD_WORKS", 2)
    advisor.policy_set(Town(town_dir), fairness=3.0)
    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "1")
    configure(town_dir, "scheduler.label_caps.db", "1")  # al-0 runs with it, so be-0 waits
    write_items(town_dir, "alpha", [item(f"al-{n}", priority=0, labels=["db"] if capped and n == 0 else [])
                                    for n in range(4)])
    write_items(town_dir, "beta", [item(f"be-{n}", priority=1, labels=["db"] if capped and n == 0 else [])
                                   for n in range(4)])
    sling(Town(town_dir), [*(f"al-{n}" for n in range(4)), "alpha"], SlingOptions())
    sling(Town(town_dir), [*(f"be-{n}" for n in range(4)), "beta"], SlingOptions())
    _listed(town_dir)
    surveys = counted_surveys(monkeypatch, dispatch)
    assert [r["item_id"] for r in run_cycle(Town(town_dir)).launched] == ["al-0"]
    second = [r["item_id"] for r in run_cycle(Town(town_dir)).launched]
    assert second == (["be-1"] if capped else ["be-0"])
    assert (len(surveys), len(checked)) == ((2, 0) if capped else (1, 1))


def test_a_polecat_the_chain_does_not_know_makes_the_next_cycle_survey(cli, rig, town_dir, memory, checked,
                                                                      monkeypatch):
    from sluice.scheduler import dispatch

    _drained_once(town_dir)
    surveys = counted_surveys(monkeypatch, dispatch)
    data = json.loads((Town(town_dir).runtime / chain.FILE).read_bytes())
    data["running"] = []  # as if the running polecats were not known to be on unqueued items
    (Town(town_dir).runtime / chain.FILE).write_text(json.dumps(data))
    run_cycle(Town(town_dir))
    assert len(surveys) == 1


def test_a_failed_launch_leaves_no_chain(cli, rig, town_dir, memory, checked):
    _drained_once(town_dir)
    memory.fail_next("al-2", "no room")
    report = run_cycle(Town(town_dir))
    assert report.failed == 1 and not (Town(town_dir).runtime / chain.FILE).exists()


# -- new contexts appended after the chain's marks -------------------------------------------------------


def _chained(town_dir: Path, extra: list[dict] = (), also: tuple[str, ...] = (), before=None) -> None:
    """Eight works queued in alpha (al-00 … al-07, one kind), two cycles of two launches (al-00 … al-03
    run), the second taken from the chain the first left; ``extra`` items written beside them and
    ``also`` slung with them, and ``before`` run, before the survey the chain stands on."""
    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "2")
    write_items(town_dir, "alpha", [item(f"al-{n:02}", priority=0) for n in range(8)] + [
        item("al-20", priority=0), item("al-21", priority=0, status="closed"),
        item("al-22", priority=0, status="in_progress"), item("al-gate"),
        item("al-23", priority=0, deps=(("blocks", "al-gate"),)), item("al-24", priority=1),
        item("al-25", priority=0, status="hooked"), *extra])
    sling(Town(town_dir), [*(f"al-{n:02}" for n in range(8)), *also, "alpha"], SlingOptions())
    if before is not None:
        before()
    _listed(town_dir)  # the digest a cycle's chain stands on
    run_cycle(Town(town_dir))
    run_cycle(Town(town_dir))
    assert (Town(town_dir).runtime / chain.FILE).exists()


def _append_context(town_dir: Path, item_id: str, context_id: str = "al-wisp-hand", status: str = "open",
                    label: bool = True, description: str | None = None, **fields) -> None:
    """A context's line as :func:`sluice.store.contexts.create` writes it, appended to alpha's log by hand
    (what a writer without the sling's guards, or a later version of sluice, might leave)."""
    from datetime import UTC, datetime

    from sluice.core.clock import iso
    from sluice.core.records import SlingContextFields
    from sluice.store import contexts as ctxs
    from sluice.store.jsonlog import line_text

    # stamped as a sling stamps its contexts (the wall clock, which the test's clock does not move)
    stamp = fields.pop("enqueued_at", None) or iso(datetime.now(UTC))
    target = fields.pop("target_rig", "alpha")
    record = ctxs.build_record(context_id, item(item_id), SlingContextFields(
        work_bead_id=item_id, target_rig=target, enqueued_at=stamp, **fields), stamp)
    record["status"] = status
    if not label:
        record["labels"] = []
    if description is not None:
        record["description"] = description
    with open(ephemeral_path(town_dir, "alpha"), "a", encoding="utf-8") as fh:
        fh.write(line_text(record) + "\n")


def _views_from_chain(town_dir: Path, monkeypatch, limit: int = 5) -> tuple[dict, list[bool]]:
    """:func:`assert_status_as_surveyed`, and whether its status and its page of list took the chain."""
    STATUS_FROM_CHAIN.clear()
    answered = assert_status_as_surveyed(town_dir, monkeypatch, limit)
    return answered, list(STATUS_FROM_CHAIN)


def test_after_a_cycle_and_a_sling_status_answers_from_the_chain_with_the_new_work(
        cli, rig, town_dir, memory, checked, monkeypatch):
    """A sling of one item between two cycles used to cost the next status, and the next cycle, a survey
    of the whole queue; its new context is now folded into the chain as it is read."""
    from sluice.scheduler import dispatch, queue, queuekeep

    _chained(town_dir)
    sling(Town(town_dir), ["al-20", "alpha"], SlingOptions())  # ready, of the kept works' kind
    sling(Town(town_dir), ["al-23", "alpha"], SlingOptions())  # blocked behind al-gate
    sling(Town(town_dir), ["al-24", "alpha"], SlingOptions())  # ready, a kind of its own
    surveys = counted_surveys(monkeypatch, queue)
    queuekeep.path(Town(town_dir)).unlink(missing_ok=True)
    status = queue.status(Town(town_dir), limit=5)  # (the blocked row is past the ready works kept)
    assert not surveys  # no survey of its own
    assert status["queued_total"] == 7 and status["queued_ready"] == 6
    assert [row["id"] for row in status["items"]] == ["al-04", "al-05", "al-06", "al-07", "al-20"]
    answered, from_chain = _views_from_chain(town_dir, monkeypatch)
    assert from_chain == [True, True] and answered == status
    surveys = counted_surveys(monkeypatch, dispatch)
    for launched, rows, chained in ((["al-04", "al-05"], 4, True), (["al-06", "al-07"], 2, False),
                                    (["al-20", "al-24"], 0, False)):
        # each cycle takes the chain (the first with the new works folded in, the next ones the chain it
        # left), checked against a survey of the same moment; so do the views between them while a row
        # they show is held by the batch (else the plan's reason, batch, is no row's: a survey), and
        # while their rows are ready ones (the blocked al-23 is only counted)
        taken = len(checked)
        assert [r["item_id"] for r in run_cycle(Town(town_dir)).launched] == launched
        assert not surveys and len(checked) == taken + 1
        answered, from_chain = _views_from_chain(town_dir, monkeypatch, rows or 1)
        assert from_chain == [chained] * 2
        assert answered["queued_total"] == rows + 1 and answered["queued_ready"] == rows


def _rewritten(town_dir: Path) -> None:
    """al-05's open context written again for another item (of a kind of its own, so nothing else
    tells): a change of a record the chain keeps, not a new one."""
    from sluice.store import openqueue
    from sluice.store.rigstore import Stores

    [context] = openqueue.find_open(Stores(Town(town_dir)), "al-05")
    _append_context(town_dir, "al-24", context.id, enqueued_at=context.fields.enqueued_at)


def _shadowed(town_dir: Path) -> None:
    _append_context(town_dir, "al-26", "al-wisp-shadowed")


def _close_queued(town_dir: Path) -> None:
    from sluice.store import contexts as ctxs
    from sluice.store import openqueue
    from sluice.store.rigstore import Stores

    stores = Stores(Town(town_dir))
    [context] = openqueue.find_open(stores, "al-05")
    assert ctxs.close(Town(town_dir), stores.rig("alpha"), context.id, ctxs.CLEARED)


def _clear(town_dir: Path) -> None:
    from sluice.scheduler.control import clear

    clear(Town(town_dir))


NOT_FOLDED = {
    "a changed record": (_rewritten, {}),
    "not a context": (lambda t: _append_context(t, "al-20", label=False), {}),
    "no sling fields": (lambda t: _append_context(t, "al-20", description="not fields"), {}),
    "a broken context": (lambda t: _append_context(t, "al-20", dispatch_failures=3), {}),
    "an unknown rig": (lambda t: _append_context(t, "al-20", target_rig="nowhere"), {}),
    "a launch begun": (lambda t: _append_context(t, "al-20", launch_started_at="2026-01-01T00:00:00Z"), {}),
    "a missing mark": (lambda t: _append_context(t, "al-20", missing_since="2026-01-01T00:00:00Z"), {}),
    "a promotion": (lambda t: _append_context(t, "al-20", promoted_at="2026-01-01T00:00:00Z"), {}),
    "two for one item": (lambda t: (_append_context(t, "al-20", "al-wisp-one"),
                                    _append_context(t, "al-20", "al-wisp-two")), {}),
    "a queued item": (lambda t: _append_context(t, "al-06"), {}),
    "a running item": (lambda t: _append_context(t, "al-01"), {"resurvey": True}),
    "a closed item": (lambda t: _append_context(t, "al-21"), {}),
    "a hooked item": (lambda t: _append_context(t, "al-25"), {}),
    "a forced sling of an item in progress": (lambda t: _append_context(t, "al-22", force=True), {}),
    "a failure backing off": (lambda t: _append_context(t, "al-20", dispatch_failures=1,
                                                        last_failure="x", last_failure_at=_now_stamp()), {}),
    "older than the kept": (lambda t: _append_context(t, "al-20", enqueued_at="2000-01-01T00:00:00Z"), {}),
    "an item in its rig's log": (_shadowed, {"log": "al-26"}),
    "a blocker of a queued item": (lambda t: _append_context(t, "al-20", "al-wisp-blocker"),
                                   {"blocks": "al-27"}),
    "a torn line": (lambda t: ephemeral_path(t, "alpha").open("a").write('{"id":"al-wisp-torn","ti'), {}),
    "a malformed line": (lambda t: ephemeral_path(t, "alpha").open("a").write("{not a record\n"), {}),
}


def _now_stamp() -> str:
    from sluice.core.clock import iso

    return iso()


@pytest.mark.parametrize("case", list(NOT_FOLDED))
def test_a_line_after_the_marks_that_is_not_a_new_context_the_chain_can_place_is_left_to_a_survey(
        cli, rig, town_dir, memory, checked, monkeypatch, case):
    """Each line here is one a survey would read otherwise than as one more ready or blocked work (a
    change, a stale or held context, a duplicate, a mid-launch or backing-off one, one that moves the
    kept order, or one that changes the readiness of others): status, list and the next cycle survey,
    and answer as a survey does."""
    from sluice.scheduler import dispatch
    from sluice.store.jsonlog import line_text

    append, setup = NOT_FOLDED[case]
    extra, also = [item("al-26", priority=0)], ()
    if "blocks" in setup:  # queued, and blocked by a record of that id once one is in the log
        extra.append(item(setup["blocks"], priority=0, deps=(("blocks", "al-wisp-blocker"),)))
        also = (setup["blocks"],)
    before = None
    if "log" in setup:  # a record of the item's id in its rig's log before the chain (a closed one)
        def before():
            with open(ephemeral_path(town_dir, "alpha"), "a", encoding="utf-8") as fh:
                fh.write(line_text({**item(setup["log"]), "status": "closed", "ephemeral": True}) + "\n")
    _chained(town_dir, extra, also, before)
    if "resurvey" in setup:  # a chain from a survey while al-00 … al-03 run: none of them queued then
        (Town(town_dir).runtime / chain.FILE).unlink()
        assert [r["item_id"] for r in run_cycle(Town(town_dir)).launched] == ["al-04", "al-05"]
        assert (Town(town_dir).runtime / chain.FILE).exists()
    append(town_dir)
    _answered, from_chain = _views_from_chain(town_dir, monkeypatch)
    assert from_chain == [False, False]
    surveys = counted_surveys(monkeypatch, dispatch)
    taken = len(checked)
    run_cycle(Town(town_dir))
    # the cycle does not take the chain: it surveys
    assert len(checked) == taken
    assert len(surveys) == 1


def _unsling(item_id: str):
    def unsling(town_dir: Path) -> None:
        from sluice.scheduler.control import clear

        assert clear(Town(town_dir), item_id)["cleared"] == 1

    return unsling


#: Closes after the marks the chain folds: (what appends them, how many of al-04 … al-07 the chain keeps).
FOLDED = {
    "a kept work's close": (_close_queued, 4),
    "a clear of a kept work": (_unsling("al-05"), 4),
    "a clear of a kept work, others of its kind only counted": (_unsling("al-04"), 3),
    "a clear of a work only counted": (_unsling("al-07"), 2),
    "a clear of a blocked work": (_unsling("al-23"), 4),
    "a clear of a work of a kind of its own": (_unsling("al-24"), 4),
    "a clear of everything": (_clear, 4),
    "a context slung and closed since": (lambda t: _append_context(t, "al-20", status="closed"), 4),
    "a clear of a work only counted, and its sling again": (
        lambda t: (_unsling("al-07")(t), sling(Town(t), ["al-07", "alpha"], SlingOptions())), 2),
    "a clear of the kind's last kept work": (_unsling("al-04"), 1),
}


@pytest.mark.parametrize("case", list(FOLDED))
def test_a_close_after_the_marks_is_folded_into_the_views_and_the_next_cycle(
        cli, rig, town_dir, memory, checked, monkeypatch, case):
    """A clear of one item used to cost the next view and the next cycle a survey of the whole queue:
    the chain now knows which count each queued context is in, and takes a closed one out, whether it
    is among the kept works or only counted, ready or blocked; every view and every take of the chain
    (the cycle's too) is held to a survey.  Only a kind left with counted works but no kept one is
    left to a survey."""
    from sluice.scheduler import dispatch
    from sluice.scheduler import gates as gate_view
    from sluice.scheduler.session import Session

    append, kept = FOLDED[case]
    monkeypatch.setattr(chain, "HEAD_WORKS", 4 + kept)  # two cycles launch al-00 … al-03 from the head
    _chained(town_dir, also=("al-23", "al-24"))
    append(town_dir)
    head = chain.take(Session(Town(town_dir)), 2, gate_view.current(Town(town_dir)))
    views = [_views_from_chain(town_dir, monkeypatch, limit)[1] for limit in (1, 2, 5)]
    surveys = counted_surveys(monkeypatch, dispatch)
    run_cycle(Town(town_dir))
    if case == "a clear of the kind's last kept work":  # al-05 … al-07 are counted, none kept
        assert head is None and views == [[False, False]] * 3 and len(surveys) == 1
        return
    assert head is not None and not surveys
    if kept == 4:  # every ready work kept: a first row is the chain's
        assert views[0] == [True, True]


def test_a_work_folded_in_by_one_cycle_is_taken_out_again_by_its_close(cli, rig, town_dir, memory, checked,
                                                                        monkeypatch):
    """The chain a cycle leaves knows the contexts it folded in (a sling after the marks, ready or
    blocked) as queued, so a clear of them later takes them out of its counts."""
    from sluice.scheduler import dispatch, queue
    from sluice.scheduler import gates as gate_view
    from sluice.scheduler.session import Session

    _chained(town_dir)
    sling(Town(town_dir), ["al-20", "alpha"], SlingOptions())  # ready
    sling(Town(town_dir), ["al-23", "alpha"], SlingOptions())  # blocked behind al-gate
    taken = len(checked)
    run_cycle(Town(town_dir))  # takes the chain with both folded in, and leaves one that holds them
    assert len(checked) == taken + 1
    for item_id in ("al-20", "al-23"):
        _unsling(item_id)(town_dir)
    surveys = counted_surveys(monkeypatch, dispatch)
    head = chain.take(Session(Town(town_dir)), 2, gate_view.current(Town(town_dir)))
    _status, counts = queue.status_with_counts(Town(town_dir), limit=5, chained=False)
    assert chain.queue_counts(head.data) == counts.rigs == {"alpha": [2, 0]}  # ready, blocked: a survey's
    report = run_cycle(Town(town_dir))
    assert not surveys and len(checked) >= taken + 3  # the views and the cycle took the chain
    assert [row["item_id"] for row in report.launched] == ["al-06", "al-07"]


def test_behind_a_binding_rig_cap_the_views_and_cycles_after_a_sling_or_a_clear_take_the_chain(
        cli, rig, town_dir, memory, checked, monkeypatch):
    """A rig at its cap leaves every plan short, so the chain used to give up on it and every view
    and cycle over a capped queue surveyed it after any change; no work of the rest could join the
    plan, so the head and the shapes of the rest tell it as a survey would."""
    from sluice.scheduler import dispatch

    configure(town_dir, "rigs.alpha.max_polecats", "4")
    monkeypatch.setattr(chain, "HEAD_WORKS", 6)  # al-06 and al-07 only counted
    _chained(town_dir)  # al-00 … al-03 run: the rig is at its cap
    surveys = counted_surveys(monkeypatch, dispatch)
    capped = run_cycle(Town(town_dir))
    assert capped.dispatched == 0 and capped.reason == rules.RIG_CAP and not surveys
    sling(Town(town_dir), ["al-20", "alpha"], SlingOptions())
    assert _views_from_chain(town_dir, monkeypatch, 2)[1] == [True, True]
    _unsling("al-07")(town_dir)
    assert _views_from_chain(town_dir, monkeypatch, 2)[1] == [True, True]
    assert run_cycle(Town(town_dir)).reason == rules.RIG_CAP
    memory.finish("al-00", 0)
    assert [row["item_id"] for row in run_cycle(Town(town_dir)).launched] == ["al-04"]
    assert not surveys  # every cycle took the chain, each held to a survey


def test_a_new_work_behind_unkept_works_of_its_kind_is_only_counted(cli, rig, town_dir, memory, checked,
                                                                     monkeypatch):
    """al-20 is of the kind whose first works the chain keeps (al-04 … al-06) and whose others it only
    counts (al-07): it ranks after them, so it is counted with them, never kept before them."""
    monkeypatch.setattr(chain, "HEAD_WORKS", 7)  # the survey keeps al-00 … al-06
    _chained(town_dir)
    sling(Town(town_dir), ["al-20", "alpha"], SlingOptions())
    for limit in (3, 4, 5):
        answered, from_chain = _views_from_chain(town_dir, monkeypatch, limit)
        assert from_chain == [limit == 3] * 2  # the walk is al-04 … al-06
    assert answered["queued_ready"] == 5
    taken = len(checked)
    assert [r["item_id"] for r in run_cycle(Town(town_dir)).launched] == ["al-04", "al-05"]
    assert len(checked) == taken + 1


def test_a_kind_kept_whole_keeps_a_new_work_only_within_the_head(cli, rig, town_dir, memory, checked,
                                                                   monkeypatch):
    """The chain keeps four works, al-04 … al-07 (their kind whole): al-20, of that kind, is counted;
    al-24 and al-26 are of a new kind, whose oldest is kept and the other counted."""
    _chained(town_dir, [item("al-26", priority=1)])
    monkeypatch.setattr(chain, "HEAD_WORKS", 4)
    sling(Town(town_dir), ["al-20", "al-24", "al-26", "alpha"], SlingOptions())
    _answered, from_chain = _views_from_chain(town_dir, monkeypatch, 4)
    assert from_chain == [True, True]
    taken = len(checked)
    run_cycle(Town(town_dir))
    assert len(checked) == taken + 1
    data = json.loads((Town(town_dir).runtime / chain.FILE).read_bytes())
    assert [w[4]["id"] for w in data["works"]] == ["al-06", "al-07", "al-24"]
    assert sorted(row[4] for row in data["kinds"]) == [2, 3]


@pytest.mark.parametrize("limit", ["MAX_LINES", "MAX_BYTES", "MAX_SEEN"])
def test_too_many_new_lines_or_ids_are_left_to_a_survey(cli, rig, town_dir, memory, checked, monkeypatch,
                                                         limit):
    """``MAX_LINES``, ``MAX_BYTES``: two slings' lines against a bound that one of them fits;
    ``MAX_SEEN``: a chain made with no ids seen (too many of them to keep), which folds no line."""
    from sluice.scheduler import chaintail

    if limit == "MAX_SEEN":
        monkeypatch.setattr(chaintail, "MAX_SEEN", 0)
    _chained(town_dir)
    size = ephemeral_path(town_dir, "alpha").stat().st_size
    sling(Town(town_dir), ["al-20", "alpha"], SlingOptions())
    one = ephemeral_path(town_dir, "alpha").stat().st_size - size
    monkeypatch.setattr(chaintail, "MAX_LINES", 1)
    monkeypatch.setattr(chaintail, "MAX_BYTES", one if limit == "MAX_BYTES" else chaintail.MAX_BYTES)
    if limit == "MAX_BYTES":
        monkeypatch.setattr(chaintail, "MAX_LINES", 10)
    _answered, from_chain = _views_from_chain(town_dir, monkeypatch, 3)
    assert from_chain == [limit != "MAX_SEEN"] * 2
    sling(Town(town_dir), ["al-24", "alpha"], SlingOptions())
    _answered, from_chain = _views_from_chain(town_dir, monkeypatch, 3)
    assert from_chain == [False, False]


def test_a_new_deferred_item_is_counted_blocked_until_the_chains_horizon(cli, rig, town_dir, memory, clock,
                                                                        checked, monkeypatch):
    """A deferral's end is a change the clock alone makes: the chain's horizon is already the first
    release of any item of the rig, so a new context for a deferred item is counted blocked, and the
    chain stands no later than its release."""
    from datetime import UTC, datetime

    release = datetime.fromtimestamp(clock.now + 600, UTC).isoformat().replace("+00:00", "Z")
    _chained(town_dir, [item("al-28", priority=0, defer_until=release)])
    assert json.loads((Town(town_dir).runtime / chain.FILE).read_bytes())["until"] <= clock.now + 600
    sling(Town(town_dir), ["al-28", "alpha"], SlingOptions())
    answered, from_chain = _views_from_chain(town_dir, monkeypatch, 3)
    assert from_chain == [True, True]
    assert answered["queued_total"] == 5 and answered["queued_ready"] == 4  # al-28 counted blocked
    clock.advance(700)  # al-28 is ready now: past the chain's horizon, a survey says so
    answered, from_chain = _views_from_chain(town_dir, monkeypatch, 3)
    assert from_chain == [False, False] and answered["queued_ready"] == 5


def test_a_snapshot_after_a_cycle_and_a_sling_surveys_nothing(cli, rig, town_dir, memory, checked,
                                                               monkeypatch):
    """Its rows and counts from the chain, its forecast from the reading carried past the cycle's closes
    and the sling's new context: no survey of the queue, and the answer a survey gives."""
    from sluice.scheduler import queue, readingtail
    from sluice.scheduler.forecast import forecast

    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "3")
    write_items(town_dir, "alpha", [item(f"al-{n:02}", priority=n % 4) for n in range(31)])
    sling(Town(town_dir), [f"al-{n:02}" for n in range(30)] + ["alpha"], SlingOptions())
    queue.status(Town(town_dir))  # the digests a cycle's chain stands on
    forecast(Town(town_dir))  # the forecast's reading
    run_cycle(Town(town_dir))
    sling(Town(town_dir), ["al-30", "alpha"], SlingOptions())
    surveys = counted_surveys(monkeypatch, queue)
    carried: list[bool] = []
    real = readingtail._carried

    def counted(*args):
        found = real(*args)
        carried.append(found is not None)
        return found

    monkeypatch.setattr(readingtail, "_carried", counted)
    assert_snapshot_as_surveyed(town_dir, monkeypatch, 5)
    assert carried == [True] and len(surveys) == 1  # the survey the comparison made, and only it


def test_a_compaction_forgets_the_chain(cli, rig, town_dir, memory, checked):
    """Compaction replaces a log with a new file that may take the old one's inode: a chain's marks must
    not seem to fit it."""
    from sluice.scheduler import queue
    from sluice.scheduler.control import compact

    configure(town_dir, "scheduler.max_polecats", "100")
    configure(town_dir, "scheduler.batch_size", "3")
    write_items(town_dir, "alpha", [item(f"al-{n:02}", priority=n % 4) for n in range(10)])
    sling(Town(town_dir), [f"al-{n:02}" for n in range(10)] + ["alpha"], SlingOptions())
    queue.status(Town(town_dir))
    run_cycle(Town(town_dir))
    assert (Town(town_dir).runtime / chain.FILE).exists()
    compact(Town(town_dir))
    assert not (Town(town_dir).runtime / chain.FILE).exists()
