"""The forecast's windows kept at a mark of the run log answer as a whole read of the log does."""

from __future__ import annotations

import json
from functools import partial

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.core import forecast as model
from sluice.store import runs as runlog
from sluice.store import runsamples
from sluice.store.town import Town

KINDS = [("alpha", "task", ["db"]), ("alpha", "bug", []), ("beta", "task", ["db", "ui"]), ("beta", None, [])]

STEPS = st.lists(st.one_of(
    st.tuples(st.just("launch"), st.integers(0, len(KINDS) - 1)),
    st.tuples(st.just("end"), st.tuples(st.integers(0, 30), st.sampled_from(["ok", "failed", "timed-out",
                                                                               "stopped"]),
                                        st.integers(1, 900))),
    st.tuples(st.just("usage"), st.tuples(st.integers(0, 30), st.integers(0, 5000))),
    st.tuples(st.just("read"), st.booleans()),  # True: a new process (only the kept file)
    # many runs at once: past the lines after which a reader writes the kept file again
    st.tuples(st.just("burst"), st.integers(1, 80)),
    st.tuples(st.just("compact"), st.none()),
), min_size=1, max_size=40)


def whole(town: Town, window: int) -> model.Model:
    """The model of a whole read: each run's latest version, in launch order."""
    latest: dict[str, dict] = {}
    path = runlog.log_path(town)
    for line in path.read_text().splitlines() if path.exists() else []:
        record = json.loads(line)
        latest[record["run_id"]] = record
    return model.learn((model.sample_of(r) for r in latest.values()), window=window)


def windows(found: model.Model) -> dict:
    return {key: [(s.runtime, s.censored, s.tokens) for s in runs]
            for key, runs in found.kinds.items() if runs}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(STEPS, st.integers(1, 4))
def test_the_windows_kept_at_a_mark_always_equal_a_whole_read(town_dir, steps, window):
    town = Town(town_dir)
    runlog.log_path(town).unlink(missing_ok=True)
    runsamples.path(town).unlink(missing_ok=True)
    runsamples._memo.clear()
    runs: list[dict] = []  # every run's latest version, launch order
    for kind, arg in steps:
        if kind == "launch":
            rig, issue_type, labels = KINDS[arg]
            record = {"run_id": f"r{len(runs)}", "item_id": f"it-{len(runs)}", "rig": rig,
                      "issue_type": issue_type, "labels": labels, "outcome": "running",
                      "started_at": "2026-12-01T10:00:00Z", "tokens_estimated": 100}
            runs.append(record)
            runlog.append(town, [record])
        elif kind == "burst":
            rig, issue_type, labels = KINDS[arg % len(KINDS)]
            batch = [{"run_id": f"r{len(runs) + k}", "item_id": f"it-{len(runs) + k}", "rig": rig,
                      "issue_type": issue_type, "labels": labels, "outcome": "ok",
                      "runtime_seconds": float(k), "started_at": "2026-12-01T10:00:00Z",
                      "tokens_estimated": 100} for k in range(arg)]
            runs += batch
            runlog.append(town, batch)
        elif kind == "end":
            n, outcome, runtime = arg
            if n < len(runs) and runs[n]["outcome"] == "running":
                runs[n] = {**runs[n], "outcome": outcome, "runtime_seconds": float(runtime)}
                runlog.append(town, [runs[n]])
        elif kind == "usage":
            n, tokens = arg
            if n < len(runs):
                runs[n] = {**runs[n], "tokens_used": tokens}
                runlog.append(town, [runs[n]])
        elif kind == "read":
            if arg:
                runsamples._memo.clear()
            kept = runsamples.samples(town, window)
            assert windows(kept.model()) == windows(whole(town, window))
            assert set(kept.runs) == {run_id for rows in kept.kinds.values() for _, run_id in rows}
            assert set(kept.pending) == {r["run_id"] for r in runs if r["outcome"] == "running"}
        elif kind == "compact":
            runlog.compact(town, retention=10**9, keep=partial(runsamples.keep_written, town, window=window))
            log = runlog.log_path(town)
            if log.exists():  # the samples of the new file, from the runs compaction held: no line read
                written, stat = runsamples._load(town), log.stat()
                assert written is not None and (written.inode, written.offset) == (stat.st_ino, stat.st_size)
                assert windows(written.model()) == windows(whole(town, window))
                assert set(written.pending) == {r["run_id"] for r in runs if r["outcome"] == "running"}
    runsamples._memo.clear()  # a new process, from the kept file and the lines after its mark
    assert windows(runsamples.samples(town, window).model()) == windows(whole(town, window))


def test_a_reader_parses_only_what_was_appended_since_the_mark(town_dir):
    town = Town(town_dir)
    base = {"rig": "alpha", "issue_type": "task", "labels": [], "started_at": "2026-12-01T10:00:00Z"}
    runlog.append(town, [{**base, "run_id": f"r{n}", "outcome": "ok", "runtime_seconds": 60.0}
                         for n in range(100)])
    runsamples._memo.clear()
    kept = runsamples.samples(town)
    assert kept.offset == runlog.log_path(town).stat().st_size
    runsamples._memo.clear()
    # A line no whole read could parse, before the mark: only a reader that starts over would see it.
    log = runlog.log_path(town)
    data = log.read_bytes()
    log.write_bytes(b"{not json" + data[9:])  # same size, same inode: the mark still holds
    runlog.append(town, [{**base, "run_id": "r999", "outcome": "ok", "runtime_seconds": 600.0}])
    estimate = runsamples.samples(town).model().estimate("alpha", "task")
    assert estimate.samples == 101


def test_a_short_tail_is_parsed_again_rather_than_the_whole_file_written_again(town_dir):
    """The kept file stays at its mark while the lines after it are few: writing out every ended run
    after each cycle's launches would cost more than the next reader's parse of those lines."""
    town = Town(town_dir)
    base = {"rig": "alpha", "issue_type": "task", "labels": [], "started_at": "2026-12-01T10:00:00Z"}
    runlog.append(town, [{**base, "run_id": f"r{n}", "outcome": "ok", "runtime_seconds": 60.0}
                         for n in range(100)])
    runsamples._memo.clear()
    runsamples.samples(town)
    written = runsamples.path(town).read_bytes()
    runlog.append(town, [{**base, "run_id": f"s{n}", "outcome": "ok", "runtime_seconds": 600.0}
                         for n in range(10)])
    for _ in range(2):  # a new process each time: from the file and the lines after its mark
        runsamples._memo.clear()
        assert runsamples.samples(town).model().estimate("alpha", "task").samples == 110
    assert runsamples.path(town).read_bytes() == written
    runlog.append(town, [{**base, "run_id": f"t{n}", "outcome": "ok", "runtime_seconds": 6.0}
                         for n in range(60)])  # 70 lines after the mark: past the 64 kept at least
    runsamples._memo.clear()
    runsamples.samples(town)
    assert runsamples._load(town).lines == 170


def test_a_timeout_is_applied_when_the_model_is_made():
    kept = runsamples.Samples(window=5)
    kept.apply({"run_id": "a", "rig": "alpha", "issue_type": "task", "labels": [], "outcome": "timed-out",
                "runtime_seconds": 50.0}, 1)
    assert kept.model(timeout=600.0).kinds[("rig", "alpha")][0].runtime == 600.0
    assert kept.model().kinds[("rig", "alpha")][0].runtime == 50.0


def test_a_run_that_ends_late_takes_its_place_by_its_launch():
    kept = runsamples.Samples(window=2)
    base = {"rig": "alpha", "issue_type": "task", "labels": []}
    for seq, run_id in enumerate(("a", "b", "c"), start=1):
        kept.apply({**base, "run_id": run_id, "outcome": "running"}, seq)
    kept.apply({**base, "run_id": "c", "outcome": "ok", "runtime_seconds": 3.0}, 4)
    kept.apply({**base, "run_id": "b", "outcome": "ok", "runtime_seconds": 2.0}, 5)
    kept.apply({**base, "run_id": "a", "outcome": "ok", "runtime_seconds": 1.0}, 6)  # passed by the window
    assert [s.runtime for s in kept.model().kinds[("rig", "alpha")]] == [2.0, 3.0]
    assert set(kept.runs) == {"b", "c"}
