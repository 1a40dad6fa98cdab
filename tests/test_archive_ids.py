"""A context id names one context for good: once compaction archives a closed context, no later context
takes its id (the archive, the events and the run records would then name two contexts by one id)."""

from __future__ import annotations

import gzip
import json
from itertools import count
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.foundation import quick_rig, quick_town
from sluice.core.records import SlingContextFields
from sluice.store import archiveids
from sluice.store import contexts as ctxs
from sluice.store.compaction import compact
from sluice.store.rigstore import RigStore, Stores
from sluice.store.town import Town

OLD = "2020-01-01T00:00:00.000000Z"
STAMP = "2026-01-01T00:00:00.000000Z"


def closed(context_id: str, item_id: str) -> dict:
    fields = {"version": 1, "work_bead_id": item_id, "target_rig": "alpha", "enqueued_at": OLD}
    return {"id": context_id, "title": "sling-context: old", "description": json.dumps(fields),
            "status": "closed", "priority": 2, "issue_type": "task", "ephemeral": True,
            "labels": ["sluice:sling-context"], "dependencies": [], "created_at": OLD, "updated_at": OLD,
            "closed_at": OLD, "close_reason": "cleared"}


@pytest.fixture
def archive_dir(tmp_path) -> Path:
    """A town with rig alpha (its own store), no context yet."""
    town = quick_town(tmp_path)
    quick_rig(town, tmp_path)
    return town


def store_of(town: Path) -> RigStore:
    return Stores(Town(town)).rig("alpha")


def archived(town: Path) -> list[str]:
    with gzip.open(store_of(town).ephemeral_path.parent / archiveids.ARCHIVE_NAME, "rt") as fh:
        return [json.loads(line)["id"] for line in fh]


def drawing(monkeypatch, first: list[str]) -> list[str]:
    """Make every id drawn offer ``first`` (in turn) before fresh ones, as a random draw may."""
    offered: list[str] = []
    fresh = count()

    def new_id(prefix: str, seed: str, taken) -> str:
        for candidate in [*first, *(f"{prefix}-n{next(fresh)}" for _ in range(1000))]:
            offered.append(candidate)
            if candidate not in taken:
                return candidate
        raise AssertionError("no free id")

    monkeypatch.setattr(ctxs, "new_id", new_id)
    return offered


def slung(town: Path, n: int) -> list[str]:
    specs = [({"id": f"al-{k}", "title": f"item {k}", "priority": 2},
              SlingContextFields(work_bead_id=f"al-{k}", target_rig="alpha", enqueued_at=STAMP), STAMP)
             for k in range(n)]
    return [record["id"] for record in ctxs.create(store_of(town), specs)]


@pytest.mark.parametrize("batch", [1, 100], ids=["one-sling", "a-batch-of-100"])
def test_an_id_compaction_archived_is_never_drawn_again(archive_dir, monkeypatch, batch):
    """One sling searches the ids file; a batch makes a set of it: both refuse an archived id."""
    store_of(archive_dir).put_ephemeral_many([closed("al-wisp-gone", "al-old"),
                                              closed("al-wisp-went", "al-old2")])
    compact(store_of(archive_dir), retention=60)
    assert archived(archive_dir) == ["al-wisp-gone", "al-wisp-went"]
    assert "al-wisp-gone" not in store_of(archive_dir).log_ids()
    offered = drawing(monkeypatch, ["al-wisp-gone", "al-wisp-went"])
    made = slung(archive_dir, batch)
    assert offered[:2] == ["al-wisp-gone", "al-wisp-went"]  # the draw did offer them
    assert not {"al-wisp-gone", "al-wisp-went"} & set(made)
    assert len(set(made)) == batch


def test_a_town_archived_before_the_ids_file_gets_it_from_its_archive(archive_dir, monkeypatch):
    store_of(archive_dir).put_ephemeral_many([closed("al-wisp-gone", "al-old")])
    compact(store_of(archive_dir), retention=60)
    ids = store_of(archive_dir).ephemeral_path.parent / archiveids.IDS_NAME
    ids.unlink()  # as a compaction of an older sluice left it
    drawing(monkeypatch, ["al-wisp-gone"])
    assert slung(archive_dir, 1) != ["al-wisp-gone"]
    assert ids.read_bytes() == b'\n"al-wisp-gone"\n'
    # The next compaction adds to that file, and the ids of both are reserved.
    store_of(archive_dir).put_ephemeral_many([closed("al-wisp-late", "al-old3")])
    compact(store_of(archive_dir), retention=60)
    assert ids.read_bytes() == b'\n"al-wisp-gone"\n"al-wisp-late"\n'


def test_a_damaged_archive_reserves_the_ids_it_still_holds_and_stops_nothing(archive_dir, monkeypatch):
    store_of(archive_dir).put_ephemeral_many([closed("al-wisp-gone", "al-old")])
    compact(store_of(archive_dir), retention=60)
    directory = store_of(archive_dir).ephemeral_path.parent
    (directory / archiveids.IDS_NAME).unlink()
    with open(directory / archiveids.ARCHIVE_NAME, "ab") as fh:  # a member cut short by a power cut
        fh.write(gzip.compress(b'{"id": "al-wisp-cut"}\n')[:15])
    drawing(monkeypatch, ["al-wisp-gone"])
    assert slung(archive_dir, 1) != ["al-wisp-gone"]
    assert (directory / archiveids.IDS_NAME).read_bytes() == b'\n"al-wisp-gone"\n'


def test_a_compaction_stopped_before_it_reserved_the_ids_leaves_them_in_the_log(archive_dir, monkeypatch):
    """The ids are reserved before the log is replaced: stopped between the archive and the ids
    file, the old log (which holds them) stays, so a sling still cannot take one."""
    store_of(archive_dir).put_ephemeral_many([closed("al-wisp-first", "al-old0")])
    compact(store_of(archive_dir), retention=60)  # an ids file now: nothing makes it again from the archive
    store_of(archive_dir).put_ephemeral_many([closed("al-wisp-gone", "al-old")])

    def killed(directory, ids):
        raise KeyboardInterrupt  # stands for a kill -9 at that point

    monkeypatch.setattr(archiveids, "append", killed)
    with pytest.raises(KeyboardInterrupt):
        compact(store_of(archive_dir), retention=60)
    monkeypatch.undo()
    assert archived(archive_dir) == ["al-wisp-first", "al-wisp-gone"]  # in the archive, and still in the log
    assert "al-wisp-gone" in store_of(archive_dir).log_ids()
    drawing(monkeypatch, ["al-wisp-gone"])
    assert slung(archive_dir, 1) != ["al-wisp-gone"]
    compact(store_of(archive_dir), retention=60)  # the next compaction archives it again and reserves it
    assert "al-wisp-gone" not in store_of(archive_dir).log_ids()
    ids = store_of(archive_dir).ephemeral_path.parent / archiveids.IDS_NAME
    assert ids.read_bytes() == b'\n"al-wisp-first"\n"al-wisp-gone"\n'


@settings(max_examples=200, deadline=None)
@given(listed=st.lists(st.text(max_size=12), max_size=20), asked=st.lists(st.text(max_size=12), max_size=20))
def test_the_ids_file_answers_as_a_set_of_the_ids_for_any_text(tmp_path_factory, listed, asked):
    """Ids a foreign writer gave its contexts may hold quotes, newlines or any character: each is found
    as itself, by the search and by the set a batch makes, and no other id is."""
    directory = tmp_path_factory.mktemp("ids")
    archiveids.append(directory, listed)
    for bulk in (False, True):
        found = archiveids.ArchivedIds(directory, directory / "rig.lock", bulk)
        assert [i for i in asked + listed if i in found] == [i for i in asked + listed if i in set(listed)]
