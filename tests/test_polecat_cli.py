"""`sluice polecat list|stop|logs` through the real CLI, on the local and the tmux executor."""

from __future__ import annotations

import json
import sys

import pytest

from helpers.polecats import RealPolecats, configure, gone, polecat_command, report
from helpers.scheduler import item, wait_for, write_items
from sluice.executors import get_executor
from sluice.store.files.town import Town

ROW_KEYS = {
    "id", "item_id", "rig", "context_id", "executor", "started_at", "state", "pid", "exit_code", "log_path",
    "attach", "outcome", "run_id", "ended_at", "runtime_seconds",
}


@pytest.fixture
def direct_polecats(real_polecats, town_dir) -> RealPolecats:
    """Direct mode: `sling` launches the sleeping polecat at once; rig alpha holds al-1, al-2 and al-3."""
    write_items(town_dir, "alpha", [item("al-1", "first"), item("al-2", "second"), item("al-3", "third")])
    return real_polecats


def test_list_shows_every_polecat_with_its_row(cli, direct_polecats):
    kind, reports, _ = direct_polecats
    assert cli.json("polecat", "list") == []
    assert cli.run("polecat", "list").stdout.strip() == "No polecats."
    cli.run("sling", "al-1", "al-2", "alpha")
    first, second = report(reports, "al-1"), report(reports, "al-2")
    rows = cli.json("polecat", "list")
    assert [set(r) for r in rows] == [ROW_KEYS, ROW_KEYS]
    assert sorted((r["item_id"], r["rig"], r["executor"], r["state"]) for r in rows) == [
        ("al-1", "alpha", kind, "running"),
        ("al-2", "alpha", kind, "running"),
    ]
    # the pid leads the polecat's session (for tmux: the pane's exit-status supervisor)
    assert {r["item_id"]: r["pid"] for r in rows} == {"al-1": first["sid"], "al-2": second["sid"]}
    text = cli.run("polecat", "list").stdout
    assert "al-1" in text and "al-2" in text and "running" in text
    if kind == "tmux":
        socket = get_executor(Town(cli.town)).socket
        for row in rows:
            assert row["attach"] == f"tmux -L {socket} attach -t {row['id']}"
            assert f"attach: tmux -L {socket} attach -t {row['id']}" in text
    else:
        assert all(r["attach"] is None for r in rows) and "attach:" not in text


def test_stop_by_item_or_id_ends_the_polecat_and_its_children(cli, direct_polecats):
    _, reports, _ = direct_polecats
    cli.run("sling", "al-1", "al-2", "alpha")
    first, second = report(reports, "al-1"), report(reports, "al-2")
    ids = {r["item_id"]: r["id"] for r in cli.json("polecat", "list")}

    [row] = cli.json("polecat", "stop", "al-1")  # by item id
    assert (row["id"], row["stopped"], row["state"]) == (ids["al-1"], True, "stopped")
    assert gone(first["pid"]) and gone(first["child"])
    assert not gone(second["pid"])

    out = cli.run("polecat", "stop", ids["al-2"]).stdout  # by polecat id
    assert out.strip() == f"Stopped {ids['al-2']} (al-2)"
    assert gone(second["pid"]) and gone(second["child"])
    states = {r["item_id"]: r["state"] for r in cli.json("polecat", "list")}
    assert states == {"al-1": "stopped", "al-2": "stopped"}
    again = cli.run("polecat", "stop", "al-2").stdout
    assert "was not running" in again


def test_unknown_polecat_is_exit_1_with_a_clear_message(cli, direct_polecats):
    for command in (("polecat", "stop", "al-404"), ("polecat", "logs", "pc-nope")):
        done = cli.run(*command, check=False)
        assert done.returncode == 1
        ref = command[-1]
        assert done.stderr.strip() == (
            f"error: no polecat with id or item id {ref!r} (see `sluice polecat list`)"
        )
        assert "Traceback" not in done.stderr


def test_logs_by_item_and_follow_until_the_polecat_ends(cli, direct_polecats, rig):
    _, reports, script = direct_polecats
    configure(cli.town, {"executor.command": json.dumps(polecat_command(script, reports, 1))})
    cli.run("sling", "al-3", "alpha")
    followed = cli.run("polecat", "logs", "al-3", "--follow", timeout=60).stdout.splitlines()
    assert followed[:2] == ["polecat up for al-3", "second line"]
    assert followed[-1] == "polecat done"
    [row] = cli.json("polecat", "list")
    assert row["state"] == "exited"
    assert cli.run("polecat", "logs", row["id"]).stdout.splitlines() == followed


def test_a_finished_polecat_keeps_its_exit_status_and_its_logs_by_item_after_reaping(cli, direct_polecats,
                                                                                     rig):
    kind = direct_polecats.kind
    code = "import os, sys; print('ending', os.environ['SLUICE_ITEM_ID']); sys.exit(int(sys.argv[1]))"
    configure(cli.town, {"executor.command": json.dumps([sys.executable, "-c", code, "{title}"])})
    write_items(cli.town, "alpha", [item("al-ok", "0"), item("al-bad", "1")])
    slung = cli.run("sling", "al-ok", "al-bad", "alpha")  # launched by a process that exits at once
    executor = get_executor(Town(cli.town))
    wait_for(lambda: not executor.active())
    rows = {r["item_id"]: r for r in cli.json("polecat", "list")}
    workers = Town(cli.town).workers_dir
    assert set(rows) == {"al-ok", "al-bad"}, (  # what each part holds, should one run go missing
        f"sling said: {slung.stdout}\nworkers: {sorted(p.name for p in workers.iterdir())}\n"
        f"listing: {executor.listing()}\nruns: {cli.run('runs', '--json').stdout}")
    assert (rows["al-ok"]["state"], rows["al-ok"]["exit_code"]) == ("exited", 0)
    assert (rows["al-bad"]["state"], rows["al-bad"]["exit_code"]) == ("failed", 1)
    text = cli.run("polecat", "list").stdout
    assert any("al-bad" in line and "failed" in line for line in text.splitlines())
    reaped = {p.item_id: p for p in executor.reap()}
    assert reaped["al-bad"].detail["exit_code"] == 1 and reaped["al-bad"].state == "failed"
    finished = "tmux-finished.jsonl" if kind == "tmux" else "finished.jsonl"
    records = [json.loads(line) for line in
               (Town(cli.town).workers_dir / finished).read_text().splitlines()]
    assert {r["item_id"]: r["exit_code"] for r in records} == {"al-ok": 0, "al-bad": 1}
    # reaped: the runs that ended in the last hour stay listed, with their outcome and exit status
    ended = {r["item_id"]: r for r in cli.json("polecat", "list")}
    assert {i: (r["state"], r["outcome"], r["exit_code"]) for i, r in ended.items()} == {
        "al-ok": ("exited", "ok", 0), "al-bad": ("failed", "failed", 1)}
    assert all(set(r) >= ROW_KEYS and r["run_id"] for r in ended.values())
    assert cli.json("polecat", "list", "--running") == []
    # reaped: the log is still found by item id, not only by polecat id
    assert cli.run("polecat", "logs", "al-bad").stdout.splitlines() == ["ending al-bad"]
