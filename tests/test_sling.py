"""`sluice sling`: context records, guards, idempotency (also across processes), epics, convoys."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.scheduler import (
    configure,
    contexts,
    events,
    fields,
    issues_path,
    item,
    open_contexts,
    sleeper,
    tree_hash,
    wait_for,
    worker_records,
    write_items,
)


@pytest.fixture
def items_dir(town_dir, rigs, capacity) -> Path:
    """Two rigs, alpha (al) and beta (be), in deferred mode with items of every status."""
    capacity(2)
    write_items(town_dir, "alpha", [
        item("al-1", "first task", priority=1),
        item("al-2", "second task"),
        item("al-done", "finished", status="closed"),
        item("al-gone", "tombstoned", status="tombstone"),
        item("al-busy", "being worked", status="in_progress", assignee="bob"),
        item("al-hook", "hooked", status="hooked"),
        item("al-pin", "pinned", status="pinned"),
    ])
    write_items(town_dir, "beta", [item("be-1", "beta task")])
    return town_dir


def test_deferred_sling_writes_one_context_in_the_target_rig(cli, items_dir):
    before = issues_path(items_dir, "alpha").read_bytes()
    out = cli.json("sling", "al-1", "alpha", "--formula", "mol-work", "--args", "do it well",
                   "--var", "a=1", "--var", "b=2", "--agent", "codex")
    assert out["errors"] == [] and out["already"] == [] and out["dispatched"] == []
    [row] = out["scheduled"]
    assert row["item_id"] == "al-1" and row["rig"] == "alpha"
    assert re.fullmatch(r"al-wisp-[0-9a-z]{4,}", row["context_id"])
    [context] = contexts(items_dir, "alpha")
    assert context["id"] == row["context_id"]
    assert context["issue_type"] == "task" and context["ephemeral"] is True and context["status"] == "open"
    assert context["labels"] == ["sluice:sling-context"]
    assert context["title"] == "sling-context: first task"
    assert [(d["type"], d["depends_on_id"]) for d in context["dependencies"]] == [("tracks", "al-1")]
    f = fields(context)
    assert f["version"] == 1 and f["work_bead_id"] == "al-1" and f["target_rig"] == "alpha"
    assert (f["formula"], f["args"], f["vars"], f["agent"]) == ("mol-work", "do it well", "a=1\nb=2", "codex")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", f["enqueued_at"])
    assert f.get("dispatch_failures", 0) == 0 and "force" not in f
    assert contexts(items_dir, "beta") == []
    assert issues_path(items_dir, "alpha").read_bytes() == before  # the work item is never written
    [event] = events(items_dir, "Enqueued")
    assert event["payload"] == {"context_id": row["context_id"], "item_id": "al-1", "rig": "alpha"}
    assert set(event) == {"event_id", "type", "at", "payload"}


def test_sling_again_is_a_no_op(cli, items_dir):
    first = cli.json("sling", "al-1", "alpha")["scheduled"][0]
    again = cli.json("sling", "al-1", "alpha")
    assert again["scheduled"] == [] and again["already"] == [first]
    assert len(open_contexts(items_dir, "alpha")) == 1
    text = cli.run("sling", "al-1").stdout
    assert "Already scheduled al-1" in text and first["context_id"] in text


def test_without_a_rig_each_item_goes_where_its_prefix_routes(cli, items_dir):
    out = cli.json("sling", "al-1", "be-1")
    assert {(r["item_id"], r["rig"]) for r in out["scheduled"]} == {("al-1", "alpha"), ("be-1", "beta")}
    assert len(open_contexts(items_dir, "alpha")) == 1 and len(open_contexts(items_dir, "beta")) == 1


def test_many_items_keep_the_given_order_as_fifo(cli, items_dir):
    write_items(items_dir, "alpha", [item("al-x"), item("al-y")])  # equal in everything the score sees
    out = cli.json("sling", "al-y", "al-x", "alpha")
    assert [r["item_id"] for r in out["scheduled"]] == ["al-y", "al-x"]
    stamps = {fields(c)["work_bead_id"]: fields(c)["enqueued_at"] for c in contexts(items_dir, "alpha")}
    assert stamps["al-y"] < stamps["al-x"]
    listed = cli.json("scheduler", "list")
    assert [r["id"] for r in listed] == ["al-y", "al-x"]


def test_dry_run_writes_nothing(cli, items_dir):
    cli.run("item", "list")  # the derived index exists before the snapshot
    before = tree_hash(items_dir)
    out = cli.json("sling", "al-1", "al-2", "alpha", "--dry-run")
    assert out["dry_run"] is True
    assert [(r["item_id"], r["context_id"]) for r in out["scheduled"]] == [("al-1", None), ("al-2", None)]
    assert "Would schedule al-1 → alpha" in cli.run("sling", "al-1", "alpha", "--dry-run").stdout
    assert tree_hash(items_dir) == before


def test_concurrent_slings_of_one_item_create_exactly_one_context(cli, items_dir):
    cli.run("item", "list")  # build the index first so the racers start together
    procs = [
        subprocess.Popen([sys.executable, "-m", "sluice", "--town", str(items_dir), "sling", "al-1", "alpha",
                          "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    assert sum(len(r["scheduled"]) for r in results) == 1
    assert sum(len(r["already"]) for r in results) == 7
    assert len(open_contexts(items_dir, "alpha", "al-1")) == 1
    assert len(events(items_dir, "Enqueued")) == 1


def test_slings_leave_no_lock_file_per_item(cli, items_dir):
    many = [item(f"al-m{n}", f"many {n}") for n in range(300)]
    write_items(items_dir, "alpha", many)
    cli.run("sling", *(r["id"] for r in many[:150]), "alpha")
    for record in many[150:]:  # one item per command too
        if int(record["id"][4:]) % 30 == 0:
            cli.run("sling", record["id"], "alpha")
    cli.run("sling", *(r["id"] for r in many[150:]), "alpha")
    locks = list((items_dir / ".sluice" / "runtime" / "locks").glob("sling-*.lock"))
    assert len(locks) <= 64  # deferred slings take no lock file: the database's transaction serialises them
    assert len(open_contexts(items_dir, "alpha")) == 300


def test_slings_of_different_items_into_one_rig_never_share_a_context_id(cli, items_dir, monkeypatch):
    """Two slings picking a context id at the same moment must still get two ids (no context is lost)."""
    import threading

    from sluice.scheduler.launch.sling import sling
    from sluice.store.database import contexts as context_module
    from sluice.store.files.town import Town

    cli.run("item", "list")  # build the index first so the racers start together
    both_picking = threading.Barrier(2, timeout=2)

    def predictable_id(prefix, _seed, taken):
        try:
            both_picking.wait()  # both slings choose an id now, each from what it has read
        except threading.BrokenBarrierError:
            pass  # the other sling is waiting for this one to finish writing
        number = 0
        while f"{prefix}-{number:04d}" in taken:
            number += 1
        return f"{prefix}-{number:04d}"

    monkeypatch.setattr(context_module, "new_id", predictable_id)
    results = {}
    racers = [threading.Thread(target=lambda i=i: results.update({i: sling(Town(items_dir), [i, "alpha"])}))
              for i in ("al-1", "al-2")]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=60)
    picked = {results[i].scheduled[0]["context_id"] for i in ("al-1", "al-2")}
    assert picked == {"al-wisp-0000", "al-wisp-0001"}
    assert sorted(fields(c)["work_bead_id"] for c in open_contexts(items_dir, "alpha")) == ["al-1", "al-2"]


def test_a_last_argument_that_is_neither_rig_nor_item_is_a_misspelt_rig(cli, items_dir, tmp_path):
    cli.run("item", "list")  # the derived index exists before the snapshot
    before = tree_hash(items_dir)
    done = cli.run("sling", "al-1", "al-2", "alpah", "--json", check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert "'alpah' is neither a registered rig (known: alpha, beta) nor an item" in done.stderr
    assert done.stderr.strip().splitlines()[1:] == ["try 'sluice sling --help'"]
    assert tree_hash(items_dir) == before  # nothing queued
    configure(items_dir, "scheduler.max_polecats", "-1")  # direct mode: nothing launched either
    marker = tmp_path / "launched"
    touch = [sys.executable, "-c", "import sys; open(sys.argv[1], 'w')", str(marker)]
    configure(items_dir, "executor.command", json.dumps(touch))
    assert cli.run("sling", "al-1", "alpah", check=False).returncode == 2
    assert not marker.exists() and worker_records(items_dir) == []
    # a last argument that looks like an item of a rig is an item (which may be missing)
    missing = cli.run("sling", "al-1", "al-nope", "--dry-run", "--json", check=False)
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["errors"][0]["error"].startswith("item al-nope not found")


def test_closed_and_tombstoned_items_are_refused_even_with_force(cli, items_dir):
    for item_id, status in (("al-done", "closed"), ("al-gone", "tombstone")):
        done = cli.run("sling", item_id, "alpha", "--force", check=False)
        assert done.returncode == 1
        assert f"item {item_id} is {status} (work already completed)" in done.stderr
    assert contexts(items_dir, "alpha") == []


@pytest.mark.parametrize(("item_id", "status"), [("al-busy", "in_progress"), ("al-hook", "hooked"),
                                                  ("al-pin", "pinned")])
def test_protected_statuses_need_force_which_is_remembered(cli, items_dir, item_id, status):
    done = cli.run("sling", item_id, "alpha", check=False)
    assert done.returncode == 1 and f"item {item_id} is already {status}" in done.stderr
    assert "--force" in done.stderr
    out = cli.json("sling", item_id, "alpha", "--force")
    assert out["scheduled"][0]["item_id"] == item_id
    [context] = open_contexts(items_dir, "alpha", item_id)
    assert fields(context)["force"] is True


def test_cross_rig_guard(cli, items_dir):
    done = cli.run("sling", "al-1", "beta", check=False)
    assert done.returncode == 1
    assert 'cross-rig mismatch: item al-1 (prefix \'al\') belongs to rig \'alpha\'' in done.stderr
    assert "--force" in done.stderr
    out = cli.json("sling", "al-1", "beta", "--force")
    assert out["scheduled"][0]["rig"] == "beta"
    assert len(open_contexts(items_dir, "beta", "al-1")) == 1 and open_contexts(items_dir, "alpha") == []
    # idempotency looks in every rig, not only the target
    assert cli.json("sling", "al-1", "alpha")["already"][0]["rig"] == "beta"


def test_an_unknown_prefix_is_refused_honestly(cli, items_dir, tmp_path):
    export = tmp_path / "odd.jsonl"
    export.write_text(json.dumps(item("zz-1", "odd prefix")) + "\n")
    cli.run("item", "import", "alpha", str(export))
    done = cli.run("sling", "zz-1", "alpha", check=False)
    assert done.returncode == 1 and "routes to no registered rig" in done.stderr and "--force" in done.stderr
    no_rig = cli.run("sling", "zz-1", check=False)
    assert no_rig.returncode == 1 and "routes to no rig" in no_rig.stderr
    assert cli.json("sling", "zz-1", "alpha", "--force")["scheduled"][0]["rig"] == "alpha"


def test_missing_items_and_json_exit_codes(cli, items_dir):
    done = cli.run("sling", "al-nope", "alpha", "--json", check=False)
    assert done.returncode == 1
    out = json.loads(done.stdout)
    assert out["errors"] == [{"item_id": "al-nope", "error": "item al-nope not found in any rig"}]
    mixed = cli.run("sling", "al-nope", "al-1", "alpha", check=False)
    assert mixed.returncode == 1  # done in part is not done: the output says which part
    assert "Scheduled al-1 → alpha" in mixed.stdout and "1 item(s) handled, 1 error(s)" in mixed.stdout
    assert "error: item al-nope not found" in mixed.stderr
    assert [fields(c)["work_bead_id"] for c in open_contexts(items_dir, "alpha")] == ["al-1"]
    alone = cli.run("sling", "alpha", check=False)
    assert alone.returncode == 2 and "is a rig" in alone.stderr
    bad_var = cli.run("sling", "al-2", "alpha", "--var", "novalue", check=False)
    assert bad_var.returncode == 2 and "KEY=VALUE" in bad_var.stderr


def test_title_is_truncated_at_200_characters_not_bytes(cli, items_dir):
    title = "é" * 300
    write_items(items_dir, "alpha", [item("al-long", title)])
    cli.run("sling", "al-long", "alpha")
    [context] = open_contexts(items_dir, "alpha", "al-long")
    assert context["title"] == ("sling-context: " + title)[:200]
    assert len(context["title"]) == 200


def test_epic_slings_its_open_children_of_its_own_prefix(cli, items_dir):
    write_items(items_dir, "alpha", [
        item("al-epic", "the epic", issue_type="epic"),
        item("al-c1", "child one", deps=[("parent-child", "al-epic")]),
        item("al-c2", "closed child", status="closed", deps=[("parent-child", "al-epic")]),
        item("al-c3", "unrelated", deps=[("parent-child", "al-epicx")]),
        item("al-wisp-c4", "a wisp step", ephemeral=True, deps=[("parent-child", "al-epic")]),
        item("al-c5", "a gate", issue_type="gate", deps=[("parent-child", "al-epic")]),
    ])
    # A cross-prefix edge is external in beads: be-c1 is no child of al-epic (items.md, readiness).
    write_items(items_dir, "beta", [item("be-c1", "beta child", deps=[("parent-child", "al-epic")])])
    preview = cli.run("sling", "al-epic", "--dry-run").stdout
    assert "Would schedule al-c1 → alpha" in preview and "be-c1" not in preview
    out = cli.json("sling", "al-epic")
    assert {(r["item_id"], r["rig"]) for r in out["scheduled"]} == {("al-c1", "alpha")}
    assert {"item_id": "al-c2", "reason": "closed"} in out["skipped"]
    assert {"item_id": "al-wisp-c4", "reason": "ephemeral record, not work"} in out["skipped"]
    assert {"item_id": "al-c5", "reason": "a gate, never dispatched"} in out["skipped"]
    assert open_contexts(items_dir, "beta", "be-c1") == []
    assert open_contexts(items_dir, "alpha", "al-epic") == []
    refused = cli.run("sling", "al-epic", "alpha", check=False)
    assert refused.returncode == 1 and "cannot be slung to an explicit rig" in refused.stderr


def test_several_epics_in_one_sling_each_bring_their_own_children_in_order(cli, items_dir):
    write_items(items_dir, "alpha", [
        item("al-e1", "first epic", issue_type="epic"),
        item("al-e2", "second epic", issue_type="epic"),
        item("al-a", "child of e2", deps=[("parent-child", "al-e2")]),
        item("al-b", "child of e1", deps=[("parent-child", "al-e1")]),
        item("al-c", "child of both", deps=[("parent-child", "al-e1"), ("parent-child", "al-e2")]),
        item("al-d", "child of e1 twice", deps=[("parent-child", "al-e1"), ("parent-child", "al-e1")]),
    ])
    out = cli.json("sling", "al-e2", "al-e1", "al-2")
    # The epics in the order named, each one's children in file order; a shared child once.
    assert [r["item_id"] for r in out["scheduled"]] == ["al-a", "al-c", "al-b", "al-d", "al-2"]
    assert out["errors"] == [] and out["skipped"] == []


def test_convoy_slings_its_tracked_items_across_rigs(cli, items_dir):
    write_items(items_dir, "alpha", [item("al-cv", "convoy", issue_type="convoy",
                                     deps=[("tracks", "al-2"), ("tracks", "external:beta:be-1"),
                                           ("tracks", "al-done")])])
    out = cli.json("sling", "al-cv")
    assert {(r["item_id"], r["rig"]) for r in out["scheduled"]} == {("al-2", "alpha"), ("be-1", "beta")}
    assert [s["item_id"] for s in out["skipped"]] == ["al-done"]
    assert len(open_contexts(items_dir, "beta", "be-1")) == 1


def test_members_whose_prefix_routes_nowhere_are_skipped_with_a_message(cli, items_dir, tmp_path):
    export = tmp_path / "odd.jsonl"
    export.write_text(json.dumps(item("zz-9", "stray", deps=[("parent-child", "zz-ep")])) + "\n"
                      + json.dumps(item("zz-ep", "epic", issue_type="epic")) + "\n")
    cli.run("item", "import", "alpha", str(export))
    out = cli.json("sling", "zz-ep")
    assert out["skipped"][0]["item_id"] == "zz-9" and "cannot resolve a rig" in out["skipped"][0]["reason"]
    assert "Skipped zz-9" in cli.run("sling", "zz-ep").stdout


def test_convoy_members_whose_prefix_routes_nowhere_are_skipped_like_an_epics(cli, items_dir, tmp_path):
    export = tmp_path / "odd.jsonl"
    export.write_text(json.dumps(item("zz-9", "stray")) + "\n")
    cli.run("item", "import", "alpha", str(export))
    write_items(items_dir, "alpha", [item("al-cv", "convoy", issue_type="convoy",
                                     deps=[("tracks", "al-2"), ("tracks", "zz-9"),
                                           ("tracks", "external:elsewhere:qq-1")])])
    done = cli.run("sling", "al-cv", "--json", check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["errors"] == []
    assert [r["item_id"] for r in out["scheduled"]] == ["al-2"]
    reasons = {s["item_id"]: s["reason"] for s in out["skipped"]}
    assert set(reasons) == {"zz-9", "qq-1"}
    assert all("cannot resolve a rig" in reason for reason in reasons.values())
    # a member whose prefix does route to a rig, but which is not there, is still an error
    write_items(items_dir, "alpha", [item("al-cv2", "convoy", issue_type="convoy",
                                     deps=[("tracks", "al-nowhere")])])
    missing = cli.run("sling", "al-cv2", "--json", check=False)
    assert missing.returncode == 1 and "al-nowhere" in json.loads(missing.stdout)["errors"][0]["error"]


def test_direct_mode_launches_at_once_and_keeps_no_context(cli, items_dir, tmp_path):
    marker = tmp_path / "ran"
    code = f"import sys, pathlib; pathlib.Path({str(marker)!r}).write_text(sys.argv[1])"
    configure(cli.town, "scheduler.max_polecats", "-1")
    configure(cli.town, "executor.command", json.dumps([sys.executable, "-c", code, "{item_id}"]))
    out = cli.json("sling", "al-1", "alpha")
    assert out["mode"] == "direct" and out["scheduled"] == []
    [row] = out["dispatched"]
    assert row["item_id"] == "al-1" and row["polecat_id"].startswith("pc-")
    assert wait_for(lambda: marker.exists() and marker.read_text()) == "al-1"
    assert contexts(items_dir, "alpha") == []
    assert [r["item_id"] for r in worker_records(items_dir)] == ["al-1"]
    assert events(items_dir, "Dispatched")[0]["payload"]["polecat_id"] == row["polecat_id"]


def test_direct_mode_leaves_an_item_still_queued_from_deferred_mode_alone(cli, items_dir, tmp_path):
    """Launching it now would let its context launch it a second time once deferred mode is back."""
    cli.run("sling", "al-1", "alpha")
    [context] = open_contexts(items_dir, "alpha", "al-1")
    configure(cli.town, "scheduler.max_polecats", "-1")
    configure(cli.town, "executor.command", sleeper(0))
    out = cli.json("sling", "al-1", "al-2", "alpha")
    assert out["already"] == [{"item_id": "al-1", "context_id": context["id"], "rig": "alpha"}]
    assert [r["item_id"] for r in out["dispatched"]] == ["al-2"]
    assert [r["item_id"] for r in worker_records(items_dir)] == ["al-2"]
    assert "sluice scheduler clear --item al-1" in cli.run("sling", "al-1", "--dry-run").stdout
    cli.run("scheduler", "clear", "--item", "al-1")
    assert cli.json("sling", "al-1")["dispatched"][0]["item_id"] == "al-1"


def test_direct_mode_without_a_command_is_a_config_error(cli, items_dir):
    configure(cli.town, "scheduler.max_polecats", "0")
    done = cli.run("sling", "al-1", "alpha", check=False)
    assert done.returncode == 1 and "executor.command is not set" in done.stderr


def test_an_item_with_a_running_polecat_is_already_handled(cli, items_dir, memory):
    cli.run("sling", "al-1", "alpha")
    cli.run("scheduler", "run")
    [polecat] = memory.active()
    out = cli.json("sling", "al-1", "alpha")
    assert out["scheduled"] == [] and out["already"][0]["polecat_id"] == polecat.id


def test_many_items_in_chunks(cli, items_dir):
    """More items than one chunk of locks: every one gets exactly one context, in order."""
    ids = [f"al-m{n:03d}" for n in range(300)]
    write_items(items_dir, "alpha", [item(i) for i in ids])
    out = cli.json("sling", *ids, "alpha")
    assert [r["item_id"] for r in out["scheduled"]] == ids
    made = {fields(c)["work_bead_id"]: c for c in open_contexts(items_dir, "alpha")}
    assert set(made) == set(ids) and len({c["id"] for c in made.values()}) == 300
    stamps = [fields(made[i])["enqueued_at"] for i in ids]
    assert stamps == sorted(stamps) and len(set(stamps)) == 300
    assert len(events(items_dir, "Enqueued")) == 300
    assert len(contexts(items_dir, "alpha")) == 300


def test_one_sling_command_reads_the_config_once(cli, items_dir, monkeypatch):
    """``ITEM... RIG`` is parsed in the sling's own session, as every command reads config.json once."""
    from sluice.store.files.town import Town as TownFiles

    reads = []
    real_reload = TownFiles.reload_config
    monkeypatch.setattr(TownFiles, "reload_config", lambda self: reads.append(1) or real_reload(self))
    out = cli.json("sling", "al-1", "al-2", "alpha")
    assert [row["item_id"] for row in out["scheduled"]] == ["al-1", "al-2"]
    assert len(reads) == 1
