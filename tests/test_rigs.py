"""`sluice rig remove`: queued work refuses it, --force closes that work visibly, the store is kept aside,
and the repository (or the beads export a rig reads) is never touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.scheduler import (
    contexts,
    events,
    issues_path,
    item,
    open_contexts,
    records,
    tree_hash,
    write_items,
)


@pytest.fixture
def repos(cli, rigs, capacity) -> dict[str, Path]:
    """Rigs alpha and beta (each name with its repository), with items, in deferred mode."""
    capacity(2)
    write_items(cli.town, "alpha", [item("al-1", "first"), item("al-2", "second")])
    write_items(cli.town, "beta", [item("be-1", "beta work")])
    return rigs


def test_refuses_while_contexts_are_queued_and_changes_nothing(cli, repos):
    cli.run("sling", "al-1")
    before = (cli.town / ".sluice" / "config.json").read_bytes()
    done = cli.run("rig", "remove", "alpha", check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("error: rig 'alpha' has 1 queued context(s): al-1")
    assert "--force" in done.stderr and "nothing was changed" in done.stderr
    assert (cli.town / ".sluice" / "config.json").read_bytes() == before
    assert len(open_contexts(cli.town, "alpha", "al-1")) == 1


def test_work_queued_in_another_rig_for_its_items_also_refuses(cli, repos):
    cli.run("sling", "al-2", "beta", "--force")  # cross-rig: the context lives in beta's store
    done = cli.run("rig", "remove", "alpha", check=False)
    assert done.returncode == 1 and "al-2" in done.stderr and "in beta" in done.stderr


def test_force_closes_queued_contexts_as_rig_removed_and_keeps_the_store(cli, repos):
    cli.run("sling", "al-1", "al-2")
    cli.run("sling", "be-1", "alpha", "--force")  # beta's item queued in alpha's store
    repo_before = tree_hash(repos["alpha"])
    own_items = issues_path(cli.town, "alpha").read_bytes()

    result = cli.json("rig", "remove", "alpha", "--force")

    assert {c["item_id"] for c in result["closed"]} == {"al-1", "al-2", "be-1"}
    kept = Path(result["store"])
    assert kept.parent == cli.town / ".sluice" / "removed" and kept.name.startswith("alpha-")
    assert (kept / "issues.jsonl").read_bytes() == own_items  # the rig's own items, byte for byte
    closed = contexts(cli.town, "alpha")  # the records stay in the town database, closed
    assert {r["close_reason"] for r in closed} == {"rig-removed"}
    assert not (cli.town / ".sluice" / "rigs" / "alpha").exists()
    assert not (cli.town / ".sluice" / "runtime" / "index" / "alpha.sqlite").exists()
    assert tree_hash(repos["alpha"]) == repo_before
    assert [r["name"] for r in cli.json("rig", "list")] == ["beta"]
    assert len(events(cli.town, "RigRemoved")) == 1
    assert len([e for e in events(cli.town, "ContextClosed") if e["payload"]["reason"] == "rig-removed"]) == 3
    # The rest of the town carries on: nothing queued refers to the removed rig.
    assert cli.json("scheduler", "list") == []
    assert cli.run("item", "show", "al-1", check=False).returncode == 1


def test_a_rig_reading_an_export_leaves_the_export_alone(cli, tmp_path):
    from helpers import make_repo

    repo = make_repo(tmp_path / "gamma")
    export = repo / ".beads" / "issues.jsonl"
    export.parent.mkdir()
    export.write_text(json.dumps(item("ga-1", "from the export")) + "\n")
    cli.run("rig", "add", "gamma", str(repo), "--prefix", "ga")
    assert cli.json("item", "ready", "gamma")[0]["id"] == "ga-1"
    before = tree_hash(repo)
    result = cli.json("rig", "remove", "gamma")
    assert result["items"] == str(export) and result["closed"] == []
    assert tree_hash(repo) == before
    # The same name can be registered again at once.
    cli.run("rig", "add", "gamma", str(repo), "--prefix", "ga")
    assert [r["id"] for r in cli.json("item", "ready", "gamma")] == ["ga-1"]


def test_removed_twice_keeps_both_stores(cli, repos, tmp_path):
    first = cli.json("rig", "remove", "beta")["store"]
    cli.run("rig", "add", "beta", str(repos["beta"]), "--prefix", "be")
    write_items(cli.town, "beta", [item("be-9", "again")])
    second = cli.json("rig", "remove", "beta")["store"]
    assert first != second and Path(first).is_dir() and Path(second).is_dir()
    assert "be-9" in records(Path(second) / "issues.jsonl")


def test_unknown_rig_is_a_domain_error(cli, repos):
    done = cli.run("rig", "remove", "nope", check=False)
    assert done.returncode == 1 and done.stderr.startswith("error: unknown rig 'nope'")


# -- a rig added with a wrong prefix, or twice ------------------------------------------------------


def beads_repo_with(tmp_path: Path, ids: list[str]) -> Path:
    """A repository whose beads export holds ``ids``."""
    from helpers import make_repo

    repo = make_repo(tmp_path / "repos" / "be")
    (repo / ".beads").mkdir()
    (repo / ".beads" / "issues.jsonl").write_text("".join(json.dumps(item(i)) + "\n" for i in ids))
    return repo


def test_a_prefix_none_of_the_exports_ids_carries_is_refused_naming_the_right_one(cli, capacity, tmp_path):
    capacity(2)
    repo = beads_repo_with(tmp_path, ["be-1", "be-2", "be-3"])
    before = (cli.town / ".sluice" / "config.json").read_bytes()
    done = cli.run("rig", "add", "beta", str(repo), check=False)
    assert done.returncode == 2, done.stderr
    assert "no item id starts 'beta-' and 3 of its 3 start 'be-': give --prefix 'be'" in done.stderr
    assert (cli.town / ".sluice" / "config.json").read_bytes() == before  # nothing registered
    assert cli.json("rig", "add", "beta", str(repo), "--prefix", "be")["prefix"] == "be"
    assert cli.json("sling", "be-1")["scheduled"][0]["rig"] == "beta"


def test_an_items_command_printing_other_prefixes_registers_nothing(cli, tmp_path):
    repo = beads_repo_with(tmp_path, [])
    listing = tmp_path / "listing.jsonl"
    listing.write_text(json.dumps(item("zz-1")) + "\n")
    done = cli.run("rig", "add", "cmd", str(repo), "--items-command", f"cat {listing}", check=False)
    assert done.returncode == 2 and "start 'zz-': give --prefix 'zz'" in done.stderr
    assert "cmd" not in [row["name"] for row in cli.json("rig", "list")]
    assert cli.json("rig", "add", "cmd", str(repo), "--items-command", f"cat {listing}", "--prefix", "zz")


def test_a_repository_added_twice_is_registered_with_a_warning(cli, tmp_path):
    repo = beads_repo_with(tmp_path, ["be-1"])
    cli.run("rig", "add", "beta", str(repo), "--prefix", "be")
    done = cli.run("rig", "add", "again", str(repo), "--prefix", "be2", "--own-store")
    assert f"warning: repository {repo} is also rig 'beta'" in done.stderr


def test_a_sling_refused_by_prefix_names_the_right_rig_or_prefix(cli, repos, tmp_path):
    done = cli.run("sling", "al-1", "beta", check=False)
    assert "sling it to 'alpha' (`sluice sling al-1 alpha`)" in done.stderr
    export = tmp_path / "odd.jsonl"
    export.write_text(json.dumps(item("zz-1", "odd prefix")) + "\n")
    cli.run("item", "import", "alpha", str(export))
    done = cli.run("sling", "zz-1", "alpha", check=False)
    assert "rig 'alpha' takes ids starting 'al-'" in done.stderr and "`--prefix zz`" in done.stderr
    done = cli.run("sling", "zz-1", check=False)
    assert "`sluice sling zz-1 RIG`" in done.stderr and "`--prefix zz`" in done.stderr


def test_a_prefix_that_fits_still_reads_the_whole_export(cli, tmp_path):
    repo = beads_repo_with(tmp_path, ["be-1"])
    with open(repo / ".beads" / "issues.jsonl", "a") as fh:
        fh.write('{"id": oops}\n')
    done = cli.run("rig", "add", "beta", str(repo), "--prefix", "be", check=False)
    assert done.returncode == 1 and "issues.jsonl:2:" in done.stderr


def test_the_prefix_suggested_keeps_a_hyphen_of_its_own(cli, tmp_path):
    repo = beads_repo_with(tmp_path, ["artifact-keeper-01d", "artifact-keeper-7x2"])
    done = cli.run("rig", "add", "keeper", str(repo), check=False)
    assert done.returncode == 2 and "give --prefix 'artifact-keeper'" in done.stderr
