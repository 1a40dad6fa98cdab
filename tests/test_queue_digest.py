"""A rig's open contexts read from the digest kept beside its index equal reading its log.

Every CLI command starts with the log unread; the digest spares it parsing
every version of every context, so it must answer exactly as the log does
and must never be used once the log has changed.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.foundation import quick_rig, quick_town
from sluice.core.items import effective_tokens
from sluice.core.records import SlingContextFields
from sluice.store import contexts as ctxs
from sluice.store.fsutil import grew_by
from sluice.store.rigstore import RigStore, Stores
from sluice.store.town import Town

STAMP = "2026-01-01T00:00:00.000000Z"


@pytest.fixture(scope="module")
def town_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("digest")
    town = quick_town(base)
    quick_rig(town, base)
    return town


def store_of(town: Path) -> RigStore:
    return Stores(Town(town)).rig("alpha")


def seen(found: list[ctxs.Context]) -> list[tuple]:
    return [(c.id, c.rig, c.fields) for c in found]


def context(context_id: str, status: str, description, n: int) -> dict:
    return {"id": context_id, "title": f"sling-context: v{n}", "description": description, "status": status,
            "priority": 2, "issue_type": "task", "ephemeral": True, "labels": ["sluice:sling-context"],
            "dependencies": [{"issue_id": context_id, "depends_on_id": "al-1", "type": "tracks"}],
            "created_at": STAMP, "updated_at": STAMP}


DESCRIPTIONS = st.sampled_from([
    json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP}),
    json.dumps({"version": 1, "work_bead_id": "al-2", "target_rig": "alpha",
                "enqueued_at": "2026-01-01T02:00:00+02:00", "dispatch_failures": 2, "force": True,
                "newer_key": [1, {"x": None}]}),
    json.dumps({"version": 1, "work_bead_id": "al-3", "target_rig": "alpha", "enqueued_at": STAMP,
                "dispatch_failures": -1}),  # out of range: not a valid context
    json.dumps({"work_bead_id": "al-4"}),  # required fields missing
    "not json", "", "[1, 2]",
])
VERSIONS = st.lists(st.tuples(st.sampled_from(["al-wisp-a", "al-wisp-b", "al-wisp-c", "al-wisp-d"]),
                              st.sampled_from(["open", "open", "closed", "in_progress", "tombstone"]),
                              DESCRIPTIONS), max_size=12)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(VERSIONS, st.booleans())
def test_the_digest_answers_as_reading_the_log_does(town_dir, versions, other_record):
    log = town_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    lines = [context(i, status, description, n) for n, (i, status, description) in enumerate(versions)]
    if other_record:  # a record that is not a context is never one, open or not
        lines.insert(0, {"id": "al-wisp-x", "title": "x", "status": "open", "labels": []})
    # Each example starts without a digest: two rewrites in place of equal size within one clock
    # tick would look alike (sluice itself only appends, or replaces the file).
    store_of(town_dir).index_path.with_suffix(".queue.json").unlink(missing_ok=True)
    log.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines))
    first = store_of(town_dir)
    parsed = ctxs.open_contexts(Stores(first.town), fresh=True)  # reads the log, keeps the digest
    again = Stores(Town(town_dir))
    assert seen(ctxs.open_contexts(again, fresh=True)) == seen(parsed)
    assert all(store.log_unread() for store in again.all())  # answered without reading the log


def test_a_digest_is_never_used_for_a_log_that_changed(town_dir):
    log = town_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text(json.dumps(context("al-wisp-a", "open", valid, 0)) + "\n")
    assert [c.id for c in ctxs.open_contexts(Stores(Town(town_dir)))] == ["al-wisp-a"]
    # Appended by another writer: the log's size moved, so the digest no longer speaks for it.
    with open(log, "a") as fh:
        fh.write(json.dumps(context("al-wisp-b", "open", valid, 1)) + "\n")
    assert [c.id for c in ctxs.open_contexts(Stores(Town(town_dir)))] == ["al-wisp-a", "al-wisp-b"]
    # Rewritten whole (as compaction does, through a new file): read again.
    replacement = log.with_suffix(".new")
    replacement.write_text(json.dumps(context("al-wisp-b", "closed", valid, 2)) + "\n")
    os.replace(replacement, log)
    assert ctxs.open_contexts(Stores(Town(town_dir))) == []
    # A damaged digest is read past, not trusted.
    digest = store_of(town_dir).index_path.with_suffix(".queue.json")
    signature = store_of(town_dir).log_signature()
    for damage in ("{", "[]", json.dumps({"version": 1, "sig": signature, "open": 5})):
        digest.write_text(damage)
        assert ctxs.open_contexts(Stores(Town(town_dir))) == []


def test_a_sling_and_a_close_carry_the_digest_over_to_the_next_reader(town_dir):
    """Writers know what they appended: the next reader finds the queue without parsing the log."""
    log = town_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    log.write_text("")
    assert ctxs.open_contexts(Stores(Town(town_dir))) == []  # a reader keeps the digest of the empty log
    fields = SlingContextFields(work_bead_id="al-1", target_rig="alpha", enqueued_at=STAMP)
    second = fields.copy(work_bead_id="al-2")
    ctxs.create(store_of(town_dir), [({"id": "al-1", "title": "one"}, fields, STAMP),
                                     ({"id": "al-2", "title": "two"}, second, STAMP)])
    reader = Stores(Town(town_dir))
    found = ctxs.open_contexts(reader)
    assert sorted(c.work_id for c in found) == ["al-1", "al-2"] and reader.rig("alpha").log_unread()
    closed, left = sorted(found, key=lambda c: c.work_id)  # equal times: ordered by their random ids
    ctxs.close(Town(town_dir), store_of(town_dir), closed.id, ctxs.CLEARED)
    reader = Stores(Town(town_dir))
    assert [c.work_id for c in ctxs.open_contexts(reader)] == ["al-2"] and reader.rig("alpha").log_unread()
    parsed = ctxs.parse("alpha", store_of(town_dir).ephemeral_fresh()[left.id])
    assert seen(ctxs.open_contexts(Stores(Town(town_dir)))) == seen([parsed])


def test_a_digest_is_carried_over_only_from_the_log_before_the_append(town_dir):
    log = town_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text(json.dumps(context("al-wisp-a", "open", valid, 0)) + "\n")
    ctxs.open_contexts(Stores(Town(town_dir)))  # the digest of this log
    with open(log, "a") as fh:  # a line from a writer that keeps no digest
        fh.write(json.dumps(context("al-wisp-b", "open", valid, 1)) + "\n")
    store_of(town_dir).put_ephemeral(context("al-wisp-c", "open", valid, 2))
    reader = Stores(Town(town_dir))
    assert [c.id for c in ctxs.open_contexts(reader)] == ["al-wisp-a", "al-wisp-b", "al-wisp-c"]
    assert not reader.rig("alpha").log_unread()  # no digest spoke for the log: it was read


def test_a_line_another_writer_appends_meanwhile_is_never_hidden(town_dir, monkeypatch):
    """Between an append and the look at the log after it, someone else's line may land: no carry-over."""

    log = town_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text(json.dumps(context("al-wisp-a", "open", valid, 0)) + "\n")
    ctxs.open_contexts(Stores(Town(town_dir)))  # the digest of this log
    real_write = os.write

    def write_then_another(fd: int, data: bytes) -> int:
        written = real_write(fd, data)
        with open(log, "a") as fh:
            fh.write(json.dumps(context("al-wisp-b", "open", valid, 1)) + "\n")
        return written

    monkeypatch.setattr(os, "write", write_then_another)
    store_of(town_dir).put_ephemeral(context("al-wisp-c", "open", valid, 2))
    monkeypatch.undo()
    found = ctxs.open_contexts(Stores(Town(town_dir)))
    assert [c.id for c in found] == ["al-wisp-a", "al-wisp-b", "al-wisp-c"]


def test_the_log_summary_is_not_carried_over_past_another_writers_line(town_dir, monkeypatch):
    """The same guard holds for the summary: a missed edge would make readers trust the index alone."""

    log = town_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text(json.dumps(context("al-wisp-a", "open", valid, 0)) + "\n")
    assert store_of(town_dir).index_is_exact()  # the summary of this log is kept
    edge = {"issue_id": "al-wisp-x", "depends_on_id": "al-1", "type": "parent-child"}
    real_write = os.write

    def write_then_another(fd: int, data: bytes) -> int:
        written = real_write(fd, data)
        with open(log, "a") as fh:  # a record whose edge can change al-1's readiness
            fh.write(json.dumps({"id": "al-wisp-x", "title": "x", "status": "open",
                                 "dependencies": [edge]}) + "\n")
        return written

    monkeypatch.setattr(os, "write", write_then_another)
    store_of(town_dir).put_ephemeral(context("al-wisp-c", "open", valid, 2))
    monkeypatch.undo()
    assert not store_of(town_dir).index_is_exact()


def test_grew_by_compares_inode_and_size():
    assert grew_by("7:100:5", "7:130:9", 30)
    assert not grew_by("7:100:5", "7:131:9", 30)  # someone else's byte too
    assert not grew_by("7:100:5", "8:130:9", 30)  # another file
    assert not grew_by(None, "7:130:9", 30) and not grew_by("7:100:5", None, 30)


def test_items_their_readiness_and_tokens_in_one_lookup_equal_the_separate_lookups(tmp_path):
    town = quick_town(tmp_path)
    quick_rig(town, tmp_path)
    items = [{"id": "al-1", "title": "ready", "status": "open", "priority": 1,
              "metadata": {"estimated_tokens": 700}},
             {"id": "al-2", "title": "blocked", "status": "open",
              "dependencies": [{"issue_id": "al-2", "depends_on_id": "al-1", "type": "blocks"}]},
             {"id": "al-3", "title": "done", "status": "closed"},
             {"id": "al-4", "title": "later", "status": "open", "defer_until": "2999-01-01T00:00:00Z"}]
    (town / ".sluice" / "rigs" / "alpha" / "issues.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in items))
    now = time.time()
    ids = ["al-1", "al-2", "al-3", "al-4", "al-9"]
    store = store_of(town)
    records, ready, tokens = store.get_many_ready(ids, now)
    assert records == store_of(town).get_many(ids) and set(records) == {"al-1", "al-2", "al-3", "al-4"}
    assert ready == store_of(town).ready_among(now, records) == {"al-1"}
    assert tokens == {rid: effective_tokens(record) for rid, record in records.items()}
    assert tokens["al-1"] == 700 and tokens["al-2"] == 1000
    # An ephemeral record among the ids (it can change readiness): the general path, same answer.
    edge = {"issue_id": "al-wisp-z", "depends_on_id": "al-1", "type": "blocks"}
    store.put_ephemeral({"id": "al-wisp-z", "title": "w", "status": "open", "dependencies": [edge]})
    ids.append("al-wisp-z")
    records, ready, tokens = store_of(town).get_many_ready(ids, now)
    assert records == store_of(town).get_many(ids) and "al-wisp-z" in records
    assert ready == store_of(town).ready_among(now, records) == {"al-1"}
    assert tokens == {}  # worked out from the records by whoever needs them
