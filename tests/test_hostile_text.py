"""Text no encoding can hold (a JSON ``\\ud800`` escape) in any field of an item source, the config or the
policy: the record or file is refused by name, its rig held, every other rig served, and no command dies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.scheduler import configure, issues_path, item, sleeper, wait_for, write_items

LONE = "\ud800"
#: Each place an export record can carry text, as the field the refusal names.
FIELDS = {
    "id": (lambda r: r.update(id="al-2" + LONE), "id"),
    "title": (lambda r: r.update(title="odd " + LONE), "title"),
    "assignee": (lambda r: r.update(assignee=LONE), "assignee"),
    "label": (lambda r: r.update(labels=["ok", "x" + LONE]), "labels[1]"),
    "dependency": (lambda r: r.update(dependencies=[{"issue_id": "al-2", "depends_on_id": "al-9" + LONE,
                                                      "type": "blocks"}]), "dependencies[0].depends_on_id"),
    "touches": (lambda r: r.update(metadata={"touches": ["src/" + LONE]}), "metadata.touches[0]"),
}
#: Every command the hostile trial saw die; each must now answer (0) or refuse by name (1).
COMMANDS = (["scheduler", "status", "--json"], ["snapshot", "--json"], ["scheduler", "forecast", "--json"],
            ["scheduler", "explain", "al-1", "--json"], ["scheduler", "list", "--json"],
            ["patrol", "alpha", "--json"], ["schedule", "next", "--json"],
            ["item", "ready", "alpha", "--json"])


@pytest.fixture
def two_rigs(cli, rigs, capacity) -> Path:
    capacity(4, batch_size=4)
    configure(cli.town, "executor.command", sleeper(0.05))
    write_items(cli.town, "alpha", [item("al-1")])
    write_items(cli.town, "beta", [item("be-1")])
    cli.run("sling", "al-1", "alpha")
    cli.run("sling", "be-1", "beta")
    return cli.town


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_unencodable_text_in_any_field_holds_only_its_rig_and_names_the_line(cli, two_rigs, field):
    record = item("al-2")
    change, named = FIELDS[field]
    change(record)
    write_items(two_rigs, "alpha", [record])  # json.dumps writes the lone surrogate as its \ud800 escape
    where = f"{issues_path(two_rigs, 'alpha')}:2"
    report = cli.json("scheduler", "run")
    assert [row["item_id"] for row in report["launched"]] == ["be-1"]
    [held] = report["held"]
    assert held["reason"] == "rig-unreadable" and where in held["detail"] and named in held["detail"]
    for args in COMMANDS:
        done = cli.run(*args, check=False)
        assert done.returncode in (0, 1), (args, done.stderr)
        assert "internal error" not in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    cleared = cli.json("scheduler", "clear", "--item", "al-1")
    assert cleared["cleared"] == 1


def test_runs_of_a_rig_held_while_they_run_still_end_with_their_records(cli, two_rigs):
    cli.json("scheduler", "run")
    write_items(two_rigs, "alpha", [item("al-3", labels=["x" + LONE])])
    cli.run("scheduler", "run", check=False)
    wait_for(lambda: {r["item_id"] for r in cli.json("runs")} >= {"al-1", "be-1"})


def test_a_config_or_policy_holding_unencodable_text_is_named(cli, two_rigs):
    config_path = two_rigs / ".sluice" / "config.json"
    saved = config_path.read_text()
    config = json.loads(saved)
    config["rigs"]["alpha"]["prefix"] = "al" + LONE
    config_path.write_text(json.dumps(config))
    done = cli.run("scheduler", "status", check=False)
    assert done.returncode == 1 and f"{config_path}: rigs.alpha.prefix holds text that cannot" in done.stderr
    config_path.write_text(saved)
    policy = two_rigs / ".sluice" / "schedule" / "policy.json"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(json.dumps({"weights": {"priority": 1}, "note" + LONE: 1}))
    done = cli.run("schedule", "next", check=False)
    assert done.returncode == 1 and f"{policy}: a key holds text that cannot" in done.stderr
