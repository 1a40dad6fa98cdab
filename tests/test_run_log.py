"""The run log on disk: appends, one end per run, incremental reads, compaction, and outcomes in words."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import time

import pytest

from sluice.errors import StoreCorrupt
from sluice.executors.base import Polecat
from sluice.scheduler import feed, notify
from sluice.scheduler.runs import outcome_of
from sluice.store import runs as runlog
from sluice.store.town import Town


def record(run_id: str, outcome: str = "running", ended_at: str | None = None, **extra) -> dict:
    base = {field: None for field in runlog.FIELDS}
    base.update(run_id=run_id, polecat_id=f"pc-{run_id}", item_id=f"al-{run_id}", rig="alpha",
                outcome=outcome, ended_at=ended_at, labels=[], touches=[], attempt=1,
                started_at="2026-12-01T10:00:00.000000Z")
    base.update(extra)
    return base


def test_the_last_version_of_each_run_wins_and_an_end_is_appended_once(town_files):
    runlog.append(town_files, [record("a"), record("b")])
    ended = runlog.end(town_files, {"a": {"outcome": "failed", "exit_code": 3}})
    assert [r["run_id"] for r in ended] == ["a"]
    assert runlog.end(town_files, {"a": {"outcome": "ok", "exit_code": 0}}) == []  # ended already
    assert runlog.end(town_files, {"nope": {"outcome": "ok"}}) == []
    runs = runlog.read_runs(town_files)
    assert list(runs) == ["a", "b"]  # launch order
    assert (runs["a"]["outcome"], runs["a"]["exit_code"]) == ("failed", 3)
    assert len(runlog.log_path(town_files).read_text().splitlines()) == 3


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
    assert len(runlog.log_path(town_files).read_text().splitlines()) == 2


def test_a_tail_reads_only_what_was_appended_and_rereads_a_replaced_log(town_files):
    tail = runlog.RunTail(runlog.log_path(town_files))
    assert tail.read() == []
    runlog.append(town_files, [record("a")])
    assert [r["run_id"] for r in tail.read()] == ["a"]
    first_offset = tail.offset
    runlog.append(town_files, [record("b")])
    assert [r["run_id"] for r in tail.read()] == ["b"] and tail.offset > first_offset
    assert tail.read() == []
    runlog.compact(town_files, retention=3600)  # a new file (inode): read again whole
    assert sorted(r["run_id"] for r in tail.read()) == ["a", "b"]


def test_a_torn_last_line_is_not_there_yet_and_a_bad_middle_line_names_its_line(town_files):
    runlog.append(town_files, [record("a")])
    path = runlog.log_path(town_files)
    with open(path, "ab") as fh:
        fh.write(b'{"run_id": "b", "outc')
    assert list(runlog.RunTail(path).read()) == [runlog.read_runs(town_files)["a"]]
    runlog.append(town_files, [record("c")])  # mends the torn tail first
    assert sorted(r["run_id"] for r in runlog.RunTail(path).read()) == ["a", "c"]
    path.write_text(json.dumps(record("a")) + "\nnot json\n" + json.dumps(record("c")) + "\n")
    with pytest.raises(StoreCorrupt, match=r"runs\.jsonl:2"):
        runlog.RunTail(path).read()


def test_compaction_archives_old_ended_runs_and_keeps_running_ones(town_files):
    now = time.time()
    old = "2020-01-01T00:00:00.000000Z"
    runlog.append(town_files, [record("old", "ok", old), record("live"), record("new", "failed",
                                                                       "2999-01-01T00:00:00.000000Z")])
    runlog.end(town_files, {"live": {}})  # nothing changes the outcome: still running
    result = runlog.compact(town_files, retention=3600, now=now)
    assert (result.lines_before, result.lines_after, result.archived) == (4, 2, 1)
    kept = runlog.RunTail(runlog.log_path(town_files)).read()
    assert sorted(r["run_id"] for r in kept) == ["live", "new"]
    archive = runlog.log_path(town_files).parent / runlog.ARCHIVE_NAME
    archived = [json.loads(line) for line in gzip.decompress(archive.read_bytes()).splitlines()]
    assert [r["run_id"] for r in archived] == ["old"]


def test_compaction_leaves_the_run_digest_a_whole_read_of_the_new_log_would_make(town_files):
    now = time.time()
    runlog.append(town_files, [record("old", "ok", "2020-01-01T00:00:00.000000Z"), record("live"),
                               record("done", "failed", "2999-01-01T00:00:00.000000Z")])
    runlog.append(town_files, [record("done", "ok", "2999-01-01T00:00:00.000000Z")])
    runlog.digest(town_files)  # a digest of the old file
    runlog.compact(town_files, retention=3600, now=now)
    kept, stat = runlog._load_digest(town_files), runlog.log_path(town_files).stat()
    assert kept is not None and (kept.inode, kept.offset, kept.lines) == (stat.st_ino, stat.st_size, 2)
    runlog._memo.clear()
    runlog.digest_path(town_files).unlink()
    whole = runlog.digest(town_files)  # read whole
    assert (kept.running, kept.latest, kept.totals) == (whole.running, whole.latest, whole.totals)
    assert sorted(kept.running) == ["live"] and kept.totals == {"ok": 1}


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


def test_the_digest_follows_the_log_across_processes_and_rebuilds_when_deleted(town_files):
    runlog.append(town_files, [record("a"), record("b")])
    first = runlog.digest(town_files)
    assert sorted(first.running) == ["a", "b"] and first.totals == {}
    runlog.end(town_files,
               {"a": {"outcome": "failed", "exit_code": 3, "ended_at": "2026-12-01T10:05:00.000000Z"}})
    runlog._memo.clear()  # as another process: only the cache file and the log
    after = runlog.digest(town_files)
    assert sorted(after.running) == ["b"] and after.totals == {"failed": 1}
    assert after.latest["al-a"]["outcome"] == "failed"
    runlog.update(town_files, "a", {"tokens_used": 5})  # a later version of an ended run counts no second end
    runlog._memo.clear()
    assert runlog.digest(town_files).totals == {"failed": 1}
    runlog.digest_path(town_files).unlink()
    runlog._memo.clear()
    rebuilt = runlog.digest(town_files)
    assert (sorted(rebuilt.running), rebuilt.totals) == (["b"], {"failed": 1})


def test_newest_first_reads_back_from_the_end_and_skips_a_torn_tail(town_files):
    runlog.append(town_files, [record(f"r{n}") for n in range(3000)])  # more than one block
    with open(runlog.log_path(town_files), "ab") as fh:
        fh.write(b'{"run_id": "torn"')
    ids = [r["run_id"] for r in runlog.newest_first(town_files)]
    assert ids == [f"r{n}" for n in reversed(range(3000))]
