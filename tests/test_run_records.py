"""Run records in the town database: one row per launch, one end per run, queries, retention, the
forecast's samples, a 0.1.0 run log migrated, and outcomes in words."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.core import forecast as model
from sluice.errors import StoreCorrupt
from sluice.executors.base import Polecat
from sluice.scheduler.launch.runs import history, outcome_of
from sluice.scheduler.unattended import notify
from sluice.scheduler.views import feed
from sluice.scheduler.views.forecast import learn
from sluice.store.database import runs as runlog
from sluice.store.files.town import Town


def record(run_id: str, outcome: str = "running", ended_at: str | None = None, **extra) -> dict:
    base = {field: None for field in runlog.FIELDS}
    base.update(run_id=run_id, polecat_id=f"pc-{run_id}", item_id=f"al-{run_id}", rig="alpha",
                outcome=outcome, ended_at=ended_at, labels=[], touches=[], attempt=1,
                started_at="2026-12-01T10:00:00.000000Z")
    base.update(extra)
    return base


def at(minute: int) -> str:
    return f"2026-12-01T10:{minute:02d}:00.000000Z"


def test_a_run_ends_once_and_keeps_its_launch_place(town_files):
    runlog.append(town_files, [record("a"), record("b")])
    ended = runlog.end(town_files, {"a": {"outcome": "failed", "exit_code": 3}})
    assert [r["run_id"] for r in ended] == ["a"]
    assert runlog.end(town_files, {"a": {"outcome": "ok", "exit_code": 0}}) == []  # ended already
    assert runlog.end(town_files, {"nope": {"outcome": "ok"}}) == []
    runlog.update(town_files, "a", {"tokens_used": 900})
    runs = runlog.read_runs(town_files)
    assert list(runs) == ["a", "b"]  # launch order, a later change keeps it
    assert (runs["a"]["outcome"], runs["a"]["exit_code"], runs["a"]["tokens_used"]) == ("failed", 3, 900)
    assert list(runlog.running(town_files)) == ["b"] and runlog.totals(town_files) == {"failed": 1}
    assert runlog.update(town_files, "nope", {"tokens_used": 1}) is None


def _end_in_process(root: str, outcome: str, queue) -> None:
    queue.put([r["run_id"] for r in runlog.end(Town(root), {"a": {"outcome": outcome}})])


def test_two_processes_ending_one_run_at_once_end_it_once(town_files):
    runlog.append(town_files, [record("a")])
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    workers = [ctx.Process(target=_end_in_process, args=(str(town_files.root), o, queue))
               for o in ("ok", "failed")]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert sorted(results) == [[], ["a"]]  # exactly one of them owns the end
    assert runlog.read_runs(Town(town_files.root))["a"]["outcome"] in ("ok", "failed")


def test_every_write_advances_the_runs_version_and_joins_the_callers_transaction(town_files):
    db = town_files.db
    runlog.append(town_files, [record("a")])
    first = db.versions("runs")["runs"]
    runlog.end(town_files, {"a": {"outcome": "ok", "ended_at": at(5), "runtime_seconds": 300.0}})
    runlog.update(town_files, "a", {"tokens_used": 5})
    assert db.versions("runs")["runs"] == first + 2
    runlog.end(town_files, {"a": {"outcome": "failed"}})  # nothing ended: nothing changed
    assert db.versions("runs")["runs"] == first + 2
    with pytest.raises(RuntimeError), db.transaction():
        runlog.append(town_files, [record("b")])
        runlog.end(town_files, {"b": {"outcome": "ok"}})
        raise RuntimeError("the caller's change fails after the runs were written")
    assert list(runlog.read_runs(town_files)) == ["a"] and db.versions("runs")["runs"] == first + 2


def test_a_record_reads_back_whole_whatever_it_carries(town_files):
    odd = record("a", workspace="/w/al-a", branch="sluice/al-a", tokens_used="lots", runtime_seconds="?",
                 labels=["area:db", "\u00e9t\u00e9"], note={"deep": [1, None, "x"]}, rig=7)
    runlog.append(town_files, [odd])
    back = runlog.read_runs(town_files)["a"]
    assert back == odd
    assert list(back)[:len(runlog.FIELDS)] == list(runlog.FIELDS)  # the fields in their order, then the rest


def test_recent_runs_are_newest_first_filtered_and_since_counts_a_long_run_that_just_ended(town_files):
    now = time.time()

    def stamp(ago: float) -> str:
        from sluice.scheduler.launch.runs import stamp as iso

        return iso(now - ago)

    runlog.append(town_files, [
        record("long", "ok", stamp(60), started_at=stamp(5 * 3600)),  # started 5h ago, ended a minute ago
        record("old", "failed", stamp(2 * 3600), started_at=stamp(3 * 3600)),
        record("live", started_at=stamp(4 * 3600)),  # still running
        record("new", "ok", stamp(10), started_at=stamp(100), rig="beta"),
    ])
    assert [r["run_id"] for r in history(town_files, now=now)] == ["new", "old", "live", "long"]
    assert [r["run_id"] for r in history(town_files, since=3600, now=now)] == ["new", "live", "long"]
    assert [r["run_id"] for r in history(town_files, rig="beta", now=now)] == ["new"]
    assert [r["run_id"] for r in history(town_files, outcome="failed", now=now)] == ["old"]
    assert [r["run_id"] for r in history(town_files, item="al-old", now=now)] == ["old"]
    assert [r["run_id"] for r in history(town_files, limit=2, now=now)] == ["new", "old"]


def test_an_items_latest_run_is_the_one_started_last(town_files):
    runlog.append(town_files, [record("a2", "failed", at(9), started_at=at(5), item_id="al-1"),
                               record("a1", "ok", at(4), started_at=at(1), item_id="al-1")])
    latest = runlog.latest(town_files, item="al-1")
    assert {k: latest[k] for k in ("run_id", "outcome", "started_at", "ended_at")} == {
        "run_id": "a2", "outcome": "failed", "started_at": at(5), "ended_at": at(9)}
    assert runlog.latest(town_files, item="al-2") is None


def test_compaction_archives_old_ended_runs_in_one_transaction_and_keeps_running_ones(town_files):
    now = time.time()
    old = "2020-01-01T00:00:00.000000Z"
    runlog.append(town_files, [record("old", "ok", old, runtime_seconds=30.0), record("live"),
                               record("new", "failed", "2999-01-01T00:00:00.000000Z")])
    runlog.end(town_files, {"live": {}})  # nothing changes the outcome: still running
    before = town_files.db.versions("runs")["runs"]
    result = runlog.compact(town_files, retention=3600, now=now)
    assert (result.lines_before, result.lines_after, result.archived) == (3, 2, 1)
    assert sorted(runlog.read_runs(town_files)) == ["live", "new"]
    assert [r["run_id"] for r in runlog.archived(town_files)] == ["old"]
    assert next(runlog.archived(town_files))["runtime_seconds"] == 30.0
    assert runlog.samples(town_files, 10) == {}  # an archived run is no sample any more
    assert town_files.db.versions("runs")["runs"] == before + 1
    assert runlog.compact(town_files, retention=3600, now=now).archived == 0
    assert town_files.db.versions("runs")["runs"] == before + 1  # nothing archived: nothing written




def test_the_daemon_archives_runs_once_the_table_holds_more_than_compact_at(town_dir):
    from helpers.scheduler import configure
    from sluice.scheduler.queue.control import compact_if_long

    configure(town_dir, "scheduler.compact_at", "2")
    files = Town(town_dir)
    old = "2020-01-01T00:00:00.000000Z"
    runlog.append(files, [record("a", "ok", old), record("b")])
    assert compact_if_long(files) == []  # two runs: not past compact_at
    runlog.append(files, [record("c", "failed", old)])
    assert compact_if_long(files) == [{"rig": "(run records)", "lines_before": 3, "lines_after": 1,
                                       "archived": 2}]
    runlog.append(files, [record("d"), record("e")])
    assert compact_if_long(files) == []  # past compact_at, but nothing old enough: no line
    assert sorted(runlog.read_runs(files)) == ["b", "d", "e"]

# -- the forecast's samples ------------------------------------------------------------------------


def ended(run_id: str, minute: int, runtime: float, outcome: str = "ok", **extra) -> dict:
    return record(run_id, outcome, at(minute), runtime_seconds=runtime, tokens_estimated=100,
                  issue_type="task", labels=["area:db"], started_at=at(minute), **extra)


def windows(kinds) -> dict:
    return {key: [(s.runtime, s.censored, s.tokens) for s in runs] for key, runs in kinds.items() if runs}


def test_a_kinds_window_is_its_last_runs_in_launch_order(town_files):
    runlog.append(town_files, [record("slow", issue_type="task", labels=["area:db"], started_at=at(0)),
                               *(ended(f"r{n}", n + 1, float(n)) for n in range(4))])
    runlog.append(town_files, [ended("gone", 9, 1.0, outcome="throttled")])  # says nothing about runtime
    runlog.end(town_files, {"slow": {"outcome": "ok", "ended_at": at(30), "runtime_seconds": 1800.0}})
    kinds = runlog.samples(town_files, 3)
    town = kinds[("town",)]
    assert [s.runtime for s in town] == [1.0, 2.0, 3.0]  # the slow run ended last but launched first
    assert set(kinds) == {("town",), ("rig", "alpha"), ("rig+type", "alpha", "task"),
                          ("rig+type+label", "alpha", "task", "area:db")}
    runlog.update(town_files, "r3", {"tokens_used": 7})  # a usage report: the run keeps its place
    assert [s.tokens for s in runlog.samples(town_files, 3)[("town",)]] == [100, 100, 7]
    assert learn(town_files).estimate("alpha", "task", ["area:db"]).samples == 5


def test_a_timed_out_run_is_a_censored_sample_at_least_the_timeout(town_files):
    runlog.append(town_files, [ended(f"r{n}", n, 10.0) for n in range(5)])
    runlog.append(town_files, [ended("cut", 9, 5.0, outcome="timed-out")])
    [cut] = [s for s in runlog.samples(town_files, 10)[("town",)] if s.censored]
    assert cut.runtime == 5.0
    assert learn(town_files, timeout=600).kinds[("town",)][-1].runtime == 600.0


_steps = st.lists(st.tuples(st.sampled_from(["launch", "launch", "end", "end", "usage", "compact"]),
                            st.integers(0, 50),
                            st.sampled_from(["ok", "ok", "failed", "timed-out", "throttled", "stopped"]),
                            st.sampled_from(["alpha", "beta"]), st.sampled_from([None, "task", "bug"]),
                            st.sampled_from([[], ["a"], ["a", "b"]])), min_size=20, max_size=80)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps, window=st.integers(1, 3))
def test_the_samples_are_what_a_whole_read_of_the_runs_learns(town_files, steps, window):
    """Launches, ends in any order, usage reports and compactions: each kind's window is the one
    :func:`sluice.core.forecast.learn` makes of every kept run in launch order."""
    db = town_files.db
    with db.transaction() as conn:  # a fresh history for each example
        conn.execute("DELETE FROM runs")
        conn.execute("DELETE FROM archived_runs")
        db.advance("runs")
    launched: list[str] = []
    for clock, (action, n, outcome, rig, kind, labels) in enumerate(steps):
        if action == "launch":
            launched.append(f"r{clock}")
            runlog.append(town_files, [record(f"r{clock}", rig=rig, issue_type=kind, labels=labels,
                                              started_at=at(clock % 60), tokens_estimated=n)])
        elif action == "compact":
            runlog.compact(town_files, retention=10**9 if n % 2 else 0)
        elif launched and action == "end":
            runlog.end(town_files, {launched[n % len(launched)]: {
                "outcome": outcome, "ended_at": "2020-01-01T00:00:00.000000Z", "runtime_seconds": float(n)}})
        elif launched:
            runlog.update(town_files, launched[n % len(launched)], {"tokens_used": clock})
    kept = runlog.read_runs(town_files).values()
    whole = model.learn((model.sample_of(r) for r in kept), window=window)
    assert windows(runlog.samples(town_files, window)) == windows(whole.kinds)


# -- a town made by sluice 0.1.0 -------------------------------------------------------------------


def _lines(*records: dict) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def test_a_0_1_0_run_log_and_its_archive_migrate_as_0_1_0_read_them(town_files):
    runs_dir = town_files.dir / "runs"
    runs_dir.mkdir()
    log = runs_dir / "runs.jsonl"
    ok = {"outcome": "ok", "ended_at": at(9), "runtime_seconds": 540.0, "exit_code": 0}
    log.write_bytes(_lines(
        record("a", issue_type="task"), record("b"), record("c"),
        {**record("a", issue_type="task"), **ok},
        {**record("a", issue_type="task"), **ok, "tokens_used": 1200},  # a usage report: the later line wins
        {**record("b"), "outcome": "failed", "ended_at": at(3), "exit_code": 3},
        {**record("b"), "outcome": "ok", "ended_at": at(8), "exit_code": 0, "workspace_kept": None},
    ) + b'{"run_id": "d", "outc')  # torn: an append a crash cut short
    archive = runs_dir / "runs.archive.jsonl.gz"
    archive.write_bytes(gzip.compress(_lines(record("old", "ok", "2020-01-01T00:00:00.000000Z")), mtime=0)
                        + gzip.compress(_lines(record("a")), mtime=0)  # also in the log: the log's
                        + gzip.compress(_lines(record("cut", "ok", at(1))))[:-9])  # a member cut short
    digest = town_files.runtime / "runs-digest.json"
    digest.write_text("{}")  # what 0.1.0 derived from the log: moved aside with it
    with town_files.db.transaction() as conn:
        moved = runlog.migrate_from_files(town_files, conn)
    assert moved == [log, archive, digest]
    assert log.exists() and archive.exists() and digest.exists()  # the caller moves them; nothing is deleted
    runs = runlog.read_runs(town_files)
    assert list(runs) == ["a", "b", "c"]
    assert (runs["a"]["outcome"], runs["a"]["tokens_used"], runs["a"]["runtime_seconds"]) == \
        ("ok", 1200, 540.0)
    assert (runs["b"]["outcome"], runs["b"]["exit_code"], runs["b"]["ended_at"]) == ("failed", 3, at(3))
    assert "workspace_kept" in runs["b"]  # the end stays the first one; the later line's other fields count
    assert list(runlog.running(town_files)) == ["c"]
    assert [r["run_id"] for r in runlog.archived(town_files)] == ["old"]
    assert [s.runtime for s in runlog.samples(town_files, 10)[("town",)]] == [540.0]
    assert town_files.db.versions("runs")["runs"] >= 1


def test_a_0_1_0_run_log_with_a_bad_middle_line_migrates_nothing_and_names_the_line(town_files):
    runs_dir = town_files.dir / "runs"
    runs_dir.mkdir()
    (runs_dir / "runs.jsonl").write_bytes(_lines(record("a")) + b"not json\n" + _lines(record("b")))
    with pytest.raises(StoreCorrupt, match=r"runs\.jsonl:2"), town_files.db.transaction() as conn:
        runlog.migrate_from_files(town_files, conn)
    assert runlog.read_runs(town_files) == {}


def test_a_town_without_a_run_log_migrates_nothing(town_files):
    with town_files.db.transaction() as conn:
        assert runlog.migrate_from_files(town_files, conn) == []
    assert runlog.read_runs(town_files) == {}


# -- outcomes in words -----------------------------------------------------------------------------


def _polecat(state: str, exit_code=None, executor: str = "local", **detail) -> Polecat:
    return Polecat(id="pc-1", executor=executor, item_id="al-1", rig="alpha", context_id="",
                   started_at="", state=state, detail={"exit_code": exit_code, **detail})


@pytest.mark.parametrize(("polecat", "expected"), [
    (_polecat("running"), None),
    (_polecat("pending"), None),
    (_polecat("exited", 0), ("ok", 0)),
    (_polecat("failed", 3), ("failed", 3)),
    (_polecat("failed", 75), ("throttled", 75)),
    (_polecat("failed", -9), ("failed", -9)),
    (_polecat("stopped", -15), ("stopped", -15)),
    (_polecat("lost"), ("vanished", None)),
    (_polecat("exited", None), ("vanished", None)),
    (_polecat("exited", None, "ray", status="SUCCEEDED"), ("ok", 0)),
])
def test_each_way_a_polecat_ends_has_one_outcome(polecat, expected):
    assert outcome_of(polecat, throttle_code=75) == expected


def test_run_ends_are_announced_by_outcome_and_feed_says_them_in_words():
    def exited(outcome, code, runtime=449.2):
        return {"type": "PolecatExited", "at": "2026-12-01T14:09:40.000000Z",
                "payload": {"item_id": "api-3f9c", "polecat_id": "pc-k2", "outcome": outcome,
                            "exit_code": code, "runtime_seconds": runtime}}

    assert notify.notify_name(exited("failed", 3)) == "run-failed"
    assert notify.notify_name(exited("timed-out", -15)) == "run-timed-out"
    assert notify.notify_name(exited("vanished", None)) == "run-vanished"
    assert notify.notify_name(exited("ok", 0)) is None
    assert feed.line(feed.row(exited("failed", 3))) == "14:09:40 api-3f9c failed after 7m29s (exit 3) [pc-k2]"
    launched = {"type": "Dispatched", "at": "2026-12-01T14:02:11.000000Z",
                "payload": {"item_id": "api-3f9c", "rig": "api", "polecat_id": "pc-k2", "score": 4.1}}
    assert feed.line(feed.row(launched)) == "14:02:11 api-3f9c launched on api as pc-k2 (score 4.1)"
    hostile = {"type": "Enqueued", "at": "x", "payload": {"item_id": "evil\x1b[2J", "rig": "api"}}
    assert "\x1b" not in feed.row(hostile)["text"]
    assert feed.describe({"type": "SomethingNew", "payload": {"a": 1}}).startswith("SomethingNew")
