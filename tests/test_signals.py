"""Scoring inputs read from a real town: warm rigs, merge queues, graphs, the decision log."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from helpers import git, make_repo
from helpers.advisor import add_worktree, item, merge_request, write_items
from sluice.errors import InvalidOperation, StoreCorrupt, UnknownItem
from sluice.scheduler.queue.signals import Graphs, Signals, is_warm_rig, parent_of_deps
from sluice.store.database.decisions import (
    append_decisions,
    decision_counts,
    recent_decisions,
)
from sluice.store.files.town import Rig, Town
from sluice.store.items.rigstore import Stores


def signals(town: Town) -> Signals:
    return Signals(town, Stores(town))


# -- affinity -------------------------------------------------------------------------


def test_a_rig_is_warm_exactly_while_it_has_a_live_linked_worktree(rigs, town_files, tmp_path):
    repo = tmp_path / "repos" / "alpha"
    rig = town_files.rig("alpha")
    assert is_warm_rig(rig) is False
    worktree = add_worktree(repo, tmp_path / "wt-alpha")
    assert is_warm_rig(rig) is True
    assert signals(town_files).warm_rigs(["alpha", "beta"]) == {"alpha"}
    shutil.rmtree(worktree)  # the worktree is now prunable: gone, so not warm
    assert is_warm_rig(rig) is False


def test_a_removed_worktree_cools_the_rig(rigs, town_files, tmp_path):
    repo = tmp_path / "repos" / "beta"
    add_worktree(repo, tmp_path / "wt-beta")
    assert is_warm_rig(town_files.rig("beta")) is True
    git("worktree", "remove", str(tmp_path / "wt-beta"), cwd=repo)
    assert is_warm_rig(town_files.rig("beta")) is False


def test_a_missing_or_broken_repository_is_cold_with_a_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="sluice")
    assert is_warm_rig(Rig("gone", tmp_path / "nowhere", "go", None)) is False
    broken = tmp_path / "broken"
    (broken / ".git" / "worktrees").mkdir(parents=True)  # looks like git, is not
    assert is_warm_rig(Rig("broken", broken, "br", None)) is False
    assert "affinity 0" in caplog.text


def test_a_bare_repository_with_a_worktree_is_warm(tmp_path):
    source = make_repo(tmp_path / "source")
    bare = tmp_path / "bare.git"
    git("clone", "-q", "--bare", str(source), str(bare), cwd=tmp_path)
    rig = Rig("bare", bare, "ba", None)
    assert is_warm_rig(rig) is False
    git("worktree", "add", "-q", str(tmp_path / "wt"), "-b", "agent", cwd=bare)
    assert is_warm_rig(rig) is True


def test_warmth_is_kept_in_the_database_until_the_worktrees_change(rigs, town_files, tmp_path, monkeypatch):
    from sluice.store.git import gitview

    asked = []
    real = gitview.has_live_worktree
    monkeypatch.setattr(gitview, "has_live_worktree", lambda repo: asked.append(repo) or real(repo))
    repo = tmp_path / "repos" / "alpha"
    worktree = add_worktree(repo, tmp_path / "wt-alpha")
    rig = town_files.rig("alpha")
    assert is_warm_rig(rig, town_files) is True
    assert is_warm_rig(rig, town_files) is True
    assert len(asked) == 1  # the second answer is the kept one
    assert json.loads(town_files.db.kept("affinity:alpha"))[1] is True
    assert not (town_files.runtime / "affinity-cache.json").exists()
    shutil.rmtree(worktree)  # the stamp moves: pygit2 is asked again
    assert is_warm_rig(rig, town_files) is False
    assert len(asked) == 2


def test_warmth_is_read_once_per_call(rigs, town_files, tmp_path):
    s = signals(town_files)
    assert s.warm_rigs(["alpha"]) == set()
    add_worktree(tmp_path / "repos" / "alpha", tmp_path / "wt")
    assert s.warm_rigs(["alpha"]) == set()  # the same call keeps its answer
    assert signals(town_files).warm_rigs(["alpha"]) == {"alpha"}


# -- merge queues ---------------------------------------------------------------------


def test_merge_queue_counts_open_as_queued_and_in_progress_as_running(rigs, town_files):
    write_items(town_files.root, "alpha", [
        merge_request("al-m1", "open"), merge_request("al-m2", "open"), merge_request("al-m3", "in_progress"),
        merge_request("al-m4", "closed"), item("al-t1", status="in_progress"),
    ])
    s = signals(town_files)
    assert s.merge_queue("alpha") == (2, 1)
    assert s.merge_queue("beta") == (0, 0)
    assert s.merge_depths(["alpha", "beta"]) == {"alpha": 3, "beta": 0}


# -- graphs ---------------------------------------------------------------------------


def test_the_graph_is_the_highest_epic_above_an_item(rigs, town_files):
    write_items(town_files.root, "alpha", [
        item("al-top", issue_type="epic"),
        item("al-mid", issue_type="epic", parent="al-top"),
        item("al-feat", issue_type="feature", parent="al-mid"),
        item("al-leaf", parent="al-feat"),
        item("al-loose"),
        item("al-lone-epic", issue_type="epic"),
        item("al-under-task", parent="al-loose"),
        item("al-orphan", parent="al-missing"),
        item("al-ext", parent="external:other:thing"),
    ])
    graphs = Graphs(town_files, Stores(town_files))
    stores = Stores(town_files)

    def graph(item_id):
        return graphs.of_record(stores.rig("alpha").require(item_id))

    assert graph("al-leaf") == "al-top"
    assert graph("al-feat") == "al-top"
    assert graph("al-mid") == "al-top"
    assert graph("al-top") == "al-top"
    assert graph("al-lone-epic") == "al-lone-epic"
    assert graph("al-loose") is None
    assert graph("al-under-task") is None
    assert graph("al-orphan") is None
    assert graph("al-ext") is None


def test_a_cross_prefix_parent_makes_no_one_a_child(rigs, town_files):
    """beads stores a cross-prefix edge as external: it is no parent, so no graph is entered through it."""
    write_items(town_files.root, "alpha", [item("al-epic", issue_type="epic")])
    write_items(town_files.root, "beta", [
        item("be-child", parent="al-epic"),
        item("be-epic", issue_type="epic"),
        item("be-both", dependencies=[
            {"issue_id": "be-both", "depends_on_id": target, "type": "parent-child"}
            for target in ("al-epic", "be-epic")]),
    ])
    stores = Stores(town_files)
    graphs = Graphs(town_files, stores)
    assert graphs.of_record(stores.rig("beta").require("be-child")) is None
    # Its first same-prefix parent counts.
    assert graphs.of_record(stores.rig("beta").require("be-both")) == "be-epic"


def test_a_parent_cycle_ends_the_walk(rigs, town_files):
    write_items(town_files.root, "alpha", [
        item("al-a", issue_type="epic", parent="al-b"),
        item("al-b", issue_type="epic", parent="al-a"),
    ])
    stores = Stores(town_files)
    assert Graphs(town_files, stores).of_record(stores.rig("alpha").require("al-a")) in ("al-a", "al-b")


def test_check_graph_names_what_is_wrong(rigs, town_files):
    write_items(town_files.root, "alpha", [
        item("al-top", issue_type="epic"),
        item("al-sub", issue_type="epic", parent="al-top"),
        item("al-task"),
    ])
    graphs = Graphs(town_files, Stores(town_files))
    graphs.check_graph("al-top")
    with pytest.raises(UnknownItem, match="unknown graph 'al-nope'"):
        graphs.check_graph("al-nope")
    with pytest.raises(InvalidOperation, match="al-task is a task, not an epic"):
        graphs.check_graph("al-task")
    with pytest.raises(InvalidOperation, match="al-sub is inside graph al-top"):
        graphs.check_graph("al-sub")


def test_parent_of_deps_reads_the_index_column():
    assert parent_of_deps("", "x-0") is None
    both = json.dumps([["blocks", "x-1", None], ["parent-child", "x-2", None]])
    assert parent_of_deps(both, "x-0") == "x-2"
    assert parent_of_deps(json.dumps([["blocks", "x-1", None]]), "x-0") is None
    assert parent_of_deps(json.dumps([["parent-child", "y-2", None]]), "x-0") is None  # cross-prefix


# -- the decision log -------------------------------------------------------------------


def decision(rig: str, n: int = 0, **extra) -> dict:
    hints = {"title": "t", "project": rig, "repository": "/r", "agent_id": None, "priority": 2}
    row = {"decision_id": f"d{n}", "node_id": f"x-{n}", "skipped": False, "dispatch_hints": hints}
    row.update(extra)
    return row


def test_counts_are_per_rig_and_include_skipped_decisions(rigs, town_files):
    append_decisions(town_files,
                     [decision("alpha", 1), decision("alpha", 2, skipped=True), decision("beta", 3)])
    assert decision_counts(town_files) == {"alpha": 2, "beta": 1}


def test_counts_are_kept_with_the_decisions_and_never_read_back_from_the_log(rigs, town_files):
    append_decisions(town_files, [decision("alpha", n) for n in range(3)])
    assert decision_counts(town_files) == {"alpha": 3}
    # The log is for people and tools: damage to it changes no count (the counts were committed with
    # the decisions, in one transaction).
    town_files.decisions_path.write_text("{not json\n")
    append_decisions(town_files, [decision("beta", 9)])
    assert decision_counts(town_files) == {"alpha": 3, "beta": 1}
    assert town_files.decisions_path.read_text().splitlines()[-1] == json.dumps(
        decision("beta", 9), separators=(",", ":"))


def test_the_decision_log_gets_each_decision_once(rigs, town_files):
    append_decisions(town_files, [decision("alpha", 1)])
    append_decisions(town_files, [decision("beta", 2), decision("beta", 3)])
    ids = [json.loads(line)["decision_id"] for line in town_files.decisions_path.read_text().splitlines()]
    assert ids == ["d1", "d2", "d3"]


def test_no_log_means_no_counts(rigs, town_files):
    assert decision_counts(town_files) == {}
    assert recent_decisions(town_files, 5) == []


def test_recent_decisions_are_newest_first_and_read_from_the_end(rigs, town_files):
    town_files.decisions_path.parent.mkdir(parents=True, exist_ok=True)
    # A corrupt line far from the end is never parsed by a tail read.
    town_files.decisions_path.write_text("{corrupt\n" + "x" * 200_000 + "\n")
    append_decisions(town_files, [decision("alpha", n) for n in range(5)])
    assert [d["decision_id"] for d in recent_decisions(town_files, 3)] == ["d4", "d3", "d2"]
    assert recent_decisions(town_files, 0) == []
    with pytest.raises(StoreCorrupt, match=r"decisions\.jsonl:1: malformed decision"):
        recent_decisions(town_files, 10)  # reaches the bad lines: the first is named, as a full read would


def test_recent_decisions_ignore_a_torn_append(rigs, town_files):
    append_decisions(town_files, [decision("alpha", 1), decision("alpha", 2)])
    with open(town_files.decisions_path, "a") as fh:
        fh.write('{"decision_id": "d3"')
    assert [d["decision_id"] for d in recent_decisions(town_files, 5)] == ["d2", "d1"]


def test_recent_decisions_across_many_blocks(rigs, town_files):
    append_decisions(town_files, [decision("alpha", n, pad="p" * 3000) for n in range(100)])
    got = recent_decisions(town_files, 60)
    assert [d["decision_id"] for d in got] == [f"d{n}" for n in range(99, 39, -1)]


def test_one_call_is_one_append(rigs, town_files, tmp_path: Path):
    append_decisions(town_files, [decision("alpha", 1), decision("beta", 2)])
    lines = town_files.decisions_path.read_text().splitlines()
    assert [json.loads(x)["decision_id"] for x in lines] == ["d1", "d2"]
    assert oct(town_files.decisions_path.stat().st_mode & 0o777) == "0o600"
