"""An export rewritten with a few lines' text changed is patched into the item index, not rebuilt.

A real read-only export on disk and the real index beside the town; a rebuild
writes a new file and renames it into place, a patch writes the same file, so
the index file's inode tells which one happened.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from helpers.foundation import make_repo
from helpers.scheduler import item
from sluice.store.files.town import Town
from sluice.store.items.rigs import add_rig
from sluice.store.items.rigstore import Stores


@pytest.fixture
def export_dir(town_dir, tmp_path):
    """Rig ``ex`` (prefix ``ex``) reading a read-only export of 200 items, ex-3 blocked by ex-2."""
    export = tmp_path / "export" / "issues.jsonl"
    export.parent.mkdir()
    records = [item(f"ex-{n}", priority=n % 4) for n in range(200)]
    records[3]["dependencies"] = [{"issue_id": "ex-3", "depends_on_id": "ex-2", "type": "blocks"}]
    write(export, records)
    add_rig(Town(town_dir), "ex", make_repo(tmp_path / "repos" / "ex"), "ex", items=export)
    return town_dir


def write(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def records_of(town_dir):
    path = Path(Town(town_dir).config.rigs["ex"].items)
    return [json.loads(line) for line in open(path)], path


def opened(town_dir):
    store = Stores(Town(town_dir)).rig("ex")
    store.index.conn()
    return store, store.index.db_path.stat().st_ino


def test_a_changed_title_is_patched_in_place(export_dir):
    _store, inode = opened(export_dir)
    records, path = records_of(export_dir)
    records[5]["title"] = "a new title, ünïcode too"
    records[3]["description"] = "the blocked one, described"
    write(path, records)
    store, after = opened(export_dir)
    assert after == inode  # patched, not rebuilt
    assert store.get("ex-5")["title"] == "a new title, ünïcode too"
    assert [row[2] for row in store.index.blocked_lines()] == ["ex-3"]
    blocked = json.loads(store.index.blocked_lines()[0][3])
    assert blocked["description"] == "the blocked one, described" and blocked["blocked_by"] == ["ex-2"]
    ready = {row[2]: row[3] for row in store.ready_raw(0)}
    assert json.loads(ready["ex-5"])["title"] == "a new title, ünïcode too"
    records[5]["title"] = "again"  # a second patch goes on from the first
    write(path, records)
    store, again = opened(export_dir)
    assert again == inode and store.get("ex-5")["title"] == "again"


@pytest.mark.parametrize("change", [
    lambda rs: rs[5].update(priority=0),  # a fact the index derives
    lambda rs: rs[7].update(status="closed"),
    lambda rs: rs[8].update(dependencies=[{"issue_id": "ex-8", "depends_on_id": "ex-9", "type": "blocks"}]),
    lambda rs: rs[9].update(labels=["ui"]),
    lambda rs: rs[9].update(metadata={"estimated_tokens": 5}),
    lambda rs: rs.append(item("ex-900")),  # a line added
    lambda rs: rs.pop(4),  # a line removed
    lambda rs: rs.insert(0, rs.pop(10)),  # lines moved
])
def test_anything_but_text_rebuilds_the_index(export_dir, change):
    store, inode = opened(export_dir)
    records, path = records_of(export_dir)
    change(records)
    write(path, records)
    store, after = opened(export_dir)
    assert after != inode  # rebuilt
    expected = {r["id"]: r for r in records}
    assert {i: store.get(i)["status"] for i in expected} == {i: r["status"] for i, r in expected.items()}
    assert {i: store.get(i)["priority"] for i in expected} == {i: r["priority"] for i, r in expected.items()}


def test_a_changed_line_that_warns_is_read_again_and_says_so(export_dir, caplog):
    _store, inode = opened(export_dir)
    records, path = records_of(export_dir)
    records[6]["priority"] = "urgent"  # read as the default, with a warning naming file and line
    write(path, records)
    with caplog.at_level(logging.WARNING, logger="sluice"):
        _store, after = opened(export_dir)
    assert after != inode
    assert f"{path}:7" in caplog.text
