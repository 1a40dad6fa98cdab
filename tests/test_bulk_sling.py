"""Bulk slings: every ready item of a rig, of a label or of the town, and ids read from stdin, so that
`sluice runs --outcome failed --ids | sluice sling -` queues again exactly the work still failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.scheduler import configure, item, python_command, wait_for, write_items


@pytest.fixture
def bulk_dir(cli, rigs, capacity) -> Path:
    """alpha: al-1..al-3 ready (al-2 labelled ui), al-4 blocked by al-1; beta: be-1 ready (ui); deferred."""
    capacity(4, batch_size=4)
    write_items(cli.town, "alpha", [item("al-1"), item("al-2", labels=["ui"]), item("al-3"),
                                    item("al-4", deps=[("blocks", "al-1")])])
    write_items(cli.town, "beta", [item("be-1", labels=["ui"])])
    return cli.town


def queued(cli) -> list[str]:
    return sorted(row["id"] for row in cli.json("scheduler", "list"))


def test_sling_ready_queues_every_ready_item_of_the_rig_and_says_how_many(cli, bulk_dir):
    cli.run("sling", "al-3")
    dry = cli.json("sling", "--ready", "alpha", "--dry-run")
    assert sorted(r["item_id"] for r in dry["scheduled"]) == ["al-1", "al-2"] and queued(cli) == ["al-3"]
    done = cli.run("sling", "--ready", "alpha")
    assert "3 item(s) handled, 0 error(s) (deferred mode)" in done.stdout
    assert queued(cli) == ["al-1", "al-2", "al-3"]  # al-4 is blocked, beta is another rig


def test_sling_label_and_all_pick_ready_items_of_every_rig(cli, bulk_dir):
    assert sorted(r["item_id"] for r in cli.json("sling", "--label", "ui")["scheduled"]) == ["al-2", "be-1"]
    assert sorted(r["item_id"] for r in cli.json("sling", "--all")["scheduled"]) == ["al-1", "al-3"]
    assert queued(cli) == ["al-1", "al-2", "al-3", "be-1"]


def test_a_bulk_sling_skips_what_the_guards_refuse_instead_of_failing(cli, bulk_dir, tmp_path):
    export = tmp_path / "odd.jsonl"
    export.write_text('{"id": "zz-1", "title": "odd", "status": "open", "issue_type": "task"}\n')
    cli.run("item", "import", "alpha", str(export))
    done = cli.run("sling", "--ready", "alpha", "--json")  # exits 0: nobody named zz-1
    out = cli.json("sling", "--ready", "alpha")
    assert [r["item_id"] for r in out["skipped"]] == ["zz-1"] and out["errors"] == []
    assert done.returncode == 0 and "zz-1" not in queued(cli)


def test_items_and_a_selection_together_are_refused(cli, bulk_dir):
    for args in (["al-1", "--all"], ["--ready", "alpha", "--all"]):
        done = cli.run("sling", *args, check=False)
        assert done.returncode == 2 and "not both" in done.stderr


def sling_stdin(town: Path, text: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLUICE_TOWN": str(town)}
    return subprocess.run([sys.executable, "-m", "sluice", "sling", "-", "--json"], input=text, env=env,
                          capture_output=True, text=True, timeout=120)


def failing_agent(cli, town: Path, tmp_path: Path) -> Path:
    """A polecat that fails for the items listed in the returned file; al-1 and al-2 run and fail, al-3
    runs and succeeds."""
    failing = tmp_path / "failing"
    failing.write_text("al-1 al-2")
    configure(town, "executor.command", python_command(
        "import sys; sys.exit(1 if sys.argv[1] in open(sys.argv[2]).read().split() else 0)",
        "{item_id}", str(failing)))
    cli.run("sling", "al-1", "al-2", "al-3")
    wait_for(lambda: ended(cli, 3))
    return failing


def ended(cli, count: int):
    cli.run("scheduler", "run")
    runs = [r for r in cli.json("runs") if r["outcome"] != "running"]
    return runs if len(runs) >= count else None


def test_runs_ids_piped_into_sling_queues_again_only_the_work_still_failed(cli, bulk_dir, tmp_path):
    failing = failing_agent(cli, bulk_dir, tmp_path)
    failing.write_text("al-1")  # al-2 fails no more: slung again, it succeeds
    cli.run("sling", "al-2")
    wait_for(lambda: ended(cli, 4))
    assert cli.run("runs", "--outcome", "failed", "--ids").stdout.split() == ["al-1"]
    assert cli.json("runs", "--outcome", "failed", "--ids") == ["al-1"]
    done = sling_stdin(bulk_dir, cli.run("runs", "--outcome", "failed", "--ids").stdout)
    assert done.returncode == 0, done.stderr
    assert queued(cli) == ["al-1"]
    empty = sling_stdin(bulk_dir, "")
    assert empty.returncode == 2 and "read no item id" in empty.stderr


def test_retry_queues_again_what_failed_and_refuses_what_did_not(cli, bulk_dir, tmp_path):
    failing_agent(cli, bulk_dir, tmp_path)
    ok = cli.run("retry", "al-3", check=False)
    assert ok.returncode == 1 and "item al-3 last ran ok, so there is nothing to retry" in ok.stderr
    never = cli.run("retry", "al-4", check=False)
    assert never.returncode == 1 and "item al-4 has no run" in never.stderr
    both = cli.run("retry", "al-1", "--failed", check=False)
    assert both.returncode == 2
    dry = cli.json("retry", "--failed", "--dry-run")
    assert sorted(r["item_id"] for r in dry["scheduled"]) == ["al-1", "al-2"] and queued(cli) == []
    assert sorted(r["item_id"] for r in cli.json("retry", "--failed", "--since", "1h")["scheduled"]) == [
        "al-1", "al-2"]
    assert queued(cli) == ["al-1", "al-2"]
    again = cli.json("retry", "al-1")
    assert [r["item_id"] for r in again["already"]] == ["al-1"]


def test_explain_names_a_failed_blocker_with_its_last_run_and_how_to_retry_it(cli, bulk_dir, tmp_path):
    failing_agent(cli, bulk_dir, tmp_path)
    cli.run("sling", "al-4")  # blocked by al-1, whose run failed
    [reason] = [r for r in cli.json("scheduler", "explain", "al-4")["reasons"] if r["code"] == "blocked"]
    assert "blocked by al-1 (its last run failed, exit 1, at 20" in reason["detail"]
    assert "nothing queues it again: `sluice retry al-1`" in reason["detail"]
    cli.run("retry", "al-1")
    [reason] = [r for r in cli.json("scheduler", "explain", "al-4")["reasons"] if r["code"] == "blocked"]
    assert "its last run failed" in reason["detail"] and "queued again" in reason["detail"]
    assert "blocked by al-1 (its last run failed" in cli.run("scheduler", "explain", "al-4").stdout
