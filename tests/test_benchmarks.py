"""The benchmarks fail with a message, never a traceback, when what they compare against is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_next_without_the_metagit_peer_says_what_it_needs(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_next.py"), "--sizes", "100", "--runs", "1",
         "--work", str(tmp_path / "work")],
        env={**os.environ, "METAGIT_PEER_DIR": str(tmp_path / "no-peer")}, capture_output=True, text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert "needs the metagit peer scripts" in line and str(tmp_path / "no-peer") in line
    assert "METAGIT_PEER_DIR" in line
    assert not (tmp_path / "work").exists()  # stopped before building anything


def test_bench_mcp_measures_a_small_town_over_stdio(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_mcp.py"), "--items", "300", "--runs", "1",
         "--calls", "2", "--work", str(tmp_path / "work"), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert {"first", "warm", "reopen", "start"} <= found.keys()
    assert all(found[key] > 0 for key in ("first", "warm", "reopen", "start"))
    config = tmp_path / "work" / "town" / ".sluice" / "config.json"
    assert json.loads(config.read_text())["rigs"]["bench"]["prefix"] == "bn"  # restored after the rewrites


def test_bench_mcp_without_a_town_says_so(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_mcp.py"), "--town", str(tmp_path / "none")],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "gave no decision" in done.stderr and "not a sluice town" in done.stderr


def test_bench_million_builds_a_town_of_real_rigs_and_reports_every_command(tmp_path: Path):
    """The million-item benchmark at a tiny size: every row is measured and the town is kept for reuse."""
    argv = [sys.executable, str(ROOT / "benchmarks" / "bench_million.py"), "--rigs", "2", "--per-rig", "300",
            "--contexts", "20", "--runs", "1", "--work", str(tmp_path / "work")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "A 600-item town (2 rigs × 300" in done.stdout
    for row in ("builds every rig's derived index", "`sling` of 20 ready items (10 per rig)",
                "`scheduler run --dry-run --json`, 20 queued", "Peak memory of any command"):
        assert row in done.stdout
    assert (tmp_path / "work" / "repos" / "rig1" / ".git").is_dir()  # each rig over its own git repository
    assert (tmp_path / "work" / "built").read_text() == "2x300"  # kept for the next run to reuse


def test_bench_sources_compares_a_command_source_with_its_file(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_sources.py"), "--items", "200", "--runs", "1",
         "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["items"] == 200
    assert all(found[key] > 0 for key in ("ready_file_s", "ready_command_s", "ready_due_s", "rig_refresh_s"))


def test_bench_launch_runs_real_cycles_and_times_the_views(tmp_path: Path):
    """The launch benchmark at a tiny size: each cycle launches its batch, each view answers, clears clear."""
    argv = [sys.executable, str(ROOT / "benchmarks" / "bench_launch.py"), "--sizes", "12", "--cycles", "1",
            "--batch", "4", "--drain", "0", "--work", str(tmp_path / "work"), "--json",
            "--set", "scheduler.token_budget=1000000"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)["launches"]["this"]["12"]
    assert row["launched"] == 4 and row["cycle"] > 0 and row["cpu"] > 0
    config = json.loads((tmp_path / "work" / "town-12" / "town" / ".sluice" / "config.json").read_text())
    assert config["scheduler"]["token_budget"] == 1000000  # --set reached the town the cycles ran on
    assert set(row["views"]) == {"status", "list --limit 50", "snapshot --limit 50"}
    assert all(seconds > 0 for seconds in row["views"].values())  # this tree knows --limit
    assert set(row["views_first"]) == set(row["views"])  # the first read after the cycles, apart
    # One more item slung, the views after it, and a cycle (4 more launched); one item cleared, the views
    # and a cycle (4 more), each timed.
    views = {"status", "list --limit 50", "snapshot --limit 50", "cycle"}
    assert set(row["after_sling"]) == {"sling", *views}
    assert set(row["after_clear"]) == {"clear --item", *views}
    assert all(t["wall"] > 0 and t["cpu"] > 0 for key in ("after_sling", "after_clear")
               for t in row[key].values())
    # Then the queue left (12 + 1 slung, 12 launched, 1 cleared: none) is cleared with and without a
    # digest that fits (a fresh copy of the town as built: 12 queued).
    assert {case: c["cleared"] for case, c in row["clear"].items()} == {"kept": 0, "unkept": 12}
    assert all(c["cpu"] > 0 and c["peak_mib"] > 0 for c in row["clear"].values())
    assert all(c["next_cpu"] > 0 and c["next_peak_mib"] > 0 for c in row["clear"].values())  # status after


def test_bench_watcher_starts_real_watched_polecats_for_each_tree(tmp_path: Path):
    src = str(ROOT / "src")
    argv = [sys.executable, str(ROOT / "benchmarks" / "bench_watcher.py"), "--launches", "3", "--rounds", "1",
            "--tree", f"a={src}", "--tree", f"b={src}", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) == {"a", "b"} and all(r["wall_ms"] > 0 and r["cpu_ms"] > 0 for r in result.values())


def test_bench_watcher_names_a_tree_that_cannot_launch(tmp_path: Path):
    argv = [sys.executable, str(ROOT / "benchmarks" / "bench_watcher.py"), "--launches", "1", "--rounds", "1",
            "--tree", f"gone={tmp_path / 'no-src'}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "no-src" in done.stderr and "Traceback" not in done.stderr


def test_bench_forecast_learns_from_real_runs_and_scores_the_held_out_ones(tmp_path: Path):
    """The forecast benchmark at a tiny size: real polecats run, each figure is measured for both sides.

    Runs long enough (``--scale``) that the queue outlasts the forecast command on a loaded machine,
    and again four times slower when the benchmark says the machine was too busy for that."""
    argv = [sys.executable, str(ROOT / "benchmarks" / "bench_forecast.py"), "--runs", "12", "--queue", "4",
            "--cap", "2", "--train-cap", "6", "--interval", "0.2", "--json"]
    for scale in ("0.5", "2"):  # a machine too busy to answer before the queue drains says so: slower runs
        done = subprocess.run([*argv, "--scale", scale], capture_output=True, text=True, timeout=900)
        if "drained before its forecast was taken" not in done.stderr:
            break
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert (found["train"], found["held_out"]) == (6, 6)
    for side in ("model", "baseline"):
        assert found[side]["p50_error"] >= 0 and 0 <= found[side]["within_p90"] <= 1
    [drain] = found["drains"]
    assert drain["items"] == 4 and drain["real"] > 0 and drain["predicted"] > 0


def test_bench_forecast_cost_times_the_forecast_beside_status(tmp_path: Path):
    """The forecast cost benchmark at a tiny size: each command is timed, first and warm."""
    argv = [sys.executable, str(ROOT / "benchmarks" / "bench_forecast_cost.py"), "--queued", "20",
            "--history", "50", "--runs", "1", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)["this"]
    changed = row.pop("forecast after a change")
    assert set(row) == {"status", "forecast --limit 50", "forecast"}
    assert all(times["first"] > 0 and times["warm"] > 0 for times in row.values())
    assert changed["wall"] > 0 and changed["cpu"] > 0


def test_bench_hot_times_every_hot_command_against_the_bare_interpreter(tmp_path: Path):
    """A tiny town, one round: every command is run for the tree and has a positive CPU time."""
    argv = [sys.executable, str(ROOT / "benchmarks" / "bench_hot.py"), "--items", "300", "--queued", "5",
            "--runs", "1", "--work", str(tmp_path / "work"), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["baseline_cpu_s"] > 0
    [tree] = found["trees"].values()
    assert len(tree) == 8 and all(seconds > 0 for seconds in tree.values())
    assert "`scheduler explain ID --json` (a queued item)" in tree


def test_bench_replay_times_every_case_and_the_trees_agree_on_each_drain():
    src = str(ROOT / "src")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_replay.py"), "--sizes", "300", "--runs", "1",
         "--tree", f"one={src}", "--tree", f"two={src}", "--json"],
        capture_output=True, text=True, timeout=300, cwd=ROOT / "benchmarks",
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert set(found) == {"no cap", "rig cap 5", "own runtimes", "label cap 3", "touches", "budget"}
    for case in found.values():
        one, two = case["one"]["300"], case["two"]["300"]
        assert one["cpu"] >= 0 and one["drain"] == two["drain"] > 0
