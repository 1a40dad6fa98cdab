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
from sluice.core.items import effective_tokens, is_context
from sluice.core.records import SlingContextFields
from sluice.store import contexts as ctxs
from sluice.store import openqueue
from sluice.store.compaction import compact
from sluice.store.jsonlog import worth_rewriting
from sluice.store.rigstore import RigStore, Stores
from sluice.store.town import Town

STAMP = "2026-01-01T00:00:00.000000Z"


@pytest.fixture(scope="module")
def digest_dir(tmp_path_factory) -> Path:
    """One town with rig alpha for the whole module: each test rewrites its log."""
    base = tmp_path_factory.mktemp("digest")
    town = quick_town(base)
    quick_rig(town, base)
    return town


@pytest.fixture(autouse=True)
def no_digests(digest_dir):
    """Each test rewrites the log in place, which sluice never does (it appends, or replaces the file):
    a digest kept for the last test's log could then match the new one's bytes before its mark."""
    store_of(digest_dir).forget_digests()


def store_of(town: Path) -> RigStore:
    return Stores(Town(town)).rig("alpha")


def seen(found: list[ctxs.Context]) -> list[tuple]:
    return [(c.id, c.rig, c.fields) for c in found]


def context(context_id: str, status: str, description, n: int) -> dict:
    """A context as ``build_record`` lays it out, so a close can patch its line when sluice wrote it."""
    return {"id": context_id, "title": f"sling-context: v{n}", "description": description, "status": status,
            "priority": 2, "issue_type": "task", "ephemeral": True, "labels": ["sluice:sling-context"],
            "dependencies": [{"issue_id": context_id, "depends_on_id": "al-1", "type": "tracks",
                              "created_at": STAMP}],
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
def test_the_digest_answers_as_reading_the_log_does(digest_dir, versions, other_record):
    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    lines = [context(i, status, description, n) for n, (i, status, description) in enumerate(versions)]
    if other_record:  # a record that is not a context is never one, open or not
        lines.insert(0, {"id": "al-wisp-x", "title": "x", "status": "open", "labels": []})
    # Each example starts without a digest: two rewrites in place of equal size within one clock
    # tick would look alike (sluice itself only appends, or replaces the file).
    store_of(digest_dir).index_path.with_suffix(".queue.json").unlink(missing_ok=True)
    log.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines))
    first = store_of(digest_dir)
    parsed = openqueue.open_contexts(Stores(first.town), fresh=True)  # reads the log, keeps the digest
    again = Stores(Town(digest_dir))
    assert seen(openqueue.open_contexts(again, fresh=True)) == seen(parsed)
    assert all(store.log_unread() for store in again.all())  # answered without reading the log


def test_a_digest_is_never_used_for_a_log_that_was_replaced(digest_dir):
    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text(json.dumps(context("al-wisp-a", "open", valid, 0)) + "\n")
    assert [c.id for c in openqueue.open_contexts(Stores(Town(digest_dir)))] == ["al-wisp-a"]
    # Appended by another writer: the digest speaks for the log up to its mark, the rest is read.
    with open(log, "a") as fh:
        fh.write(json.dumps(context("al-wisp-b", "open", valid, 1)) + "\n")
    assert [c.id for c in openqueue.open_contexts(Stores(Town(digest_dir)))] == ["al-wisp-a", "al-wisp-b"]
    # Rewritten whole (as compaction does, through a new file): read again.
    replacement = log.with_suffix(".new")
    replacement.write_text(json.dumps(context("al-wisp-b", "closed", valid, 2)) + "\n")
    os.replace(replacement, log)
    assert openqueue.open_contexts(Stores(Town(digest_dir))) == []
    # A damaged digest is read past, not trusted.
    digest = store_of(digest_dir).queue_digest_path
    reader = store_of(digest_dir)
    reader.ephemeral_fresh()
    mark = reader.log_mark()
    for damage in ("{", "[]", json.dumps({"version": 2, "mark": mark, "open": 5}),
                   json.dumps({"version": 2, "mark": {**mark, "guard": "zz"}, "open": [["al-wisp-b", {}]]}),
                   json.dumps({"version": 2, "mark": {**mark, "offset": mark["offset"] + 1},
                               "open": [["al-wisp-b", {}]]}),
                   json.dumps({"version": 1, "mark": mark, "open": [["al-wisp-b", {}]]})):
        digest.write_text(damage)
        assert openqueue.open_contexts(Stores(Town(digest_dir))) == []


def test_after_a_sling_and_a_close_the_next_reader_parses_only_what_they_appended(digest_dir):
    """Writers leave the digest alone; the next reader applies the lines after its mark and keeps it."""
    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    log.write_text("")
    assert openqueue.open_contexts(Stores(Town(digest_dir))) == []  # a reader keeps the empty log's digest
    fields = SlingContextFields(work_bead_id="al-1", target_rig="alpha", enqueued_at=STAMP)
    second = fields.copy(work_bead_id="al-2")
    ctxs.create(store_of(digest_dir), [({"id": "al-1", "title": "one"}, fields, STAMP),
                                     ({"id": "al-2", "title": "two"}, second, STAMP)])
    reader = Stores(Town(digest_dir))
    found = openqueue.open_contexts(reader)
    assert sorted(c.work_id for c in found) == ["al-1", "al-2"] and reader.rig("alpha").log_unread()
    kept = json.loads(store_of(digest_dir).queue_digest_path.read_text())
    assert kept["mark"]["lines"] == 0 and kept["open"] == []  # two lines behind: not worth rewriting yet
    closed, left = sorted(found, key=lambda c: c.work_id)  # equal times: ordered by their random ids
    ctxs.close(Town(digest_dir), store_of(digest_dir), closed.id, ctxs.CLEARED)
    reader = Stores(Town(digest_dir))
    assert [c.work_id for c in openqueue.open_contexts(reader)] == ["al-2"]
    assert reader.rig("alpha").log_unread()
    parsed = ctxs.parse("alpha", store_of(digest_dir).ephemeral_fresh()[left.id])
    assert seen(openqueue.open_contexts(Stores(Town(digest_dir)))) == seen([parsed])


def test_an_append_does_not_rewrite_the_digest(digest_dir):
    """A write costs what it writes: the digest of a long queue is not read or written by an append."""
    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text(json.dumps(context("al-wisp-a", "open", valid, 0)) + "\n")
    openqueue.open_contexts(Stores(Town(digest_dir)))
    digest = store_of(digest_dir).queue_digest_path
    before = digest.read_bytes()
    store_of(digest_dir).put_ephemeral_many([context("al-wisp-c", "open", valid, 2)])
    ctxs.close(Town(digest_dir), store_of(digest_dir), "al-wisp-a", ctxs.CLEARED)
    assert digest.read_bytes() == before
    assert [c.id for c in openqueue.open_contexts(Stores(Town(digest_dir)))] == ["al-wisp-c"]


def test_a_log_cut_shorter_than_the_mark_is_read_whole(digest_dir):
    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    first = json.dumps(context("al-wisp-a", "open", valid, 0)) + "\n"
    log.write_text(first + json.dumps(context("al-wisp-b", "open", valid, 1)) + "\n")
    assert len(openqueue.open_contexts(Stores(Town(digest_dir)))) == 2
    with open(log, "r+b") as fh:  # the same file, shorter (lost writes), then a different line after it
        fh.truncate(len(first))
        fh.seek(0, os.SEEK_END)
        fh.write((json.dumps(context("al-wisp-b", "closed", valid, 2)) + "\n").encode())
    reader = Stores(Town(digest_dir))
    assert [c.id for c in openqueue.open_contexts(reader)] == ["al-wisp-a"]
    assert not reader.rig("alpha").log_unread()  # the guard before the mark did not match: read whole


def test_a_line_another_writer_appends_meanwhile_is_never_hidden(digest_dir, monkeypatch):
    """Between an append and the look at the log after it, someone else's line may land: no carry-over."""

    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text(json.dumps(context("al-wisp-a", "open", valid, 0)) + "\n")
    openqueue.open_contexts(Stores(Town(digest_dir)))  # the digest of this log
    real_write = os.write

    def write_then_another(fd: int, data: bytes) -> int:
        written = real_write(fd, data)
        with open(log, "a") as fh:
            fh.write(json.dumps(context("al-wisp-b", "open", valid, 1)) + "\n")
        return written

    monkeypatch.setattr(os, "write", write_then_another)
    store_of(digest_dir).put_ephemeral_many([context("al-wisp-c", "open", valid, 2)])
    monkeypatch.undo()
    found = openqueue.open_contexts(Stores(Town(digest_dir)))
    assert [c.id for c in found] == ["al-wisp-a", "al-wisp-b", "al-wisp-c"]


def test_the_log_summary_is_not_carried_over_past_another_writers_line(digest_dir, monkeypatch):
    """The same guard holds for the summary: a missed edge would make readers trust the index alone."""

    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text(json.dumps(context("al-wisp-a", "open", valid, 0)) + "\n")
    assert store_of(digest_dir).index_is_exact()  # the summary of this log is kept
    edge = {"issue_id": "al-wisp-x", "depends_on_id": "al-1", "type": "parent-child"}
    real_write = os.write

    def write_then_another(fd: int, data: bytes) -> int:
        written = real_write(fd, data)
        with open(log, "a") as fh:  # a record whose edge can change al-1's readiness
            fh.write(json.dumps({"id": "al-wisp-x", "title": "x", "status": "open",
                                 "dependencies": [edge]}) + "\n")
        return written

    monkeypatch.setattr(os, "write", write_then_another)
    store_of(digest_dir).put_ephemeral_many([context("al-wisp-c", "open", valid, 2)])
    monkeypatch.undo()
    assert not store_of(digest_dir).index_is_exact()


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
    store.put_ephemeral_many([{"id": "al-wisp-z", "title": "w", "status": "open", "dependencies": [edge]}])
    ids.append("al-wisp-z")
    records, ready, tokens = store_of(town).get_many_ready(ids, now)
    assert records == store_of(town).get_many(ids) and "al-wisp-z" in records
    assert ready == store_of(town).ready_among(now, records) == {"al-1"}
    assert tokens == {}  # worked out from the records by whoever needs them


# -- the digests kept at a mark always equal a whole read ------------------------------------------

STEPS = st.lists(st.one_of(
    st.tuples(st.just("append"), VERSIONS.filter(bool)),  # sluice's writer, under the rig lock
    st.tuples(st.just("foreign"), VERSIONS.filter(bool)),  # another writer: mends, appends, keeps nothing
    st.tuples(st.just("edge"), st.sampled_from(["parent-child", "waits-for", "blocks"])),
    st.tuples(st.just("torn"), st.integers(1, 40)),  # a writer killed mid-append
    st.tuples(st.just("read"), st.booleans()),  # a reader keeps the digests (queue, or summary too)
    st.tuples(st.just("compact"), st.none()),
    # a launch's writes: a process that took the queue from the digest marks and closes what it found
    st.tuples(st.just("launch"), st.integers(0, 3)),
    # a clear: the queue read lean (streamed when no digest fits, the digests kept), then closed
    st.tuples(st.just("clear"), st.integers(0, 3)),
    # `scheduler clear`: every context closed, the digests kept at the end of its own closes
    st.tuples(st.just("clear-all"), st.none()),
), min_size=1, max_size=14)


def whole(town: Path) -> tuple[list[tuple], tuple]:
    """The open queue and the log summary as a reader that parses every line finds them."""
    store = store_of(town)
    records = store.ephemeral_fresh()
    found = [ctxs.parse("alpha", r) for r in records.values()
             if r.get("status", "open") not in ctxs.DONE_STATUSES and is_context(r)]
    found.sort(key=lambda c: (not c.valid, c.order, c.id))
    return seen(found), store._summarise(records.values())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(STEPS)
def test_the_digests_kept_at_a_mark_always_equal_a_whole_read_of_the_log(digest_dir, steps):
    """Whatever writers, crashed writers, readers and compaction did, in any order, a reader starting
    from the kept digests (and parsing only the lines after their mark) answers as a whole read."""
    from sluice.store import fsutil

    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    log.write_text("")
    store_of(digest_dir).forget_digests()
    for n, (kind, arg) in enumerate(steps):
        if kind in ("append", "foreign"):
            lines = [context(i, status, description, n) for i, status, description in arg]
            if kind == "append":
                store_of(digest_dir).put_ephemeral_many(lines)
            else:
                fsutil.mend_torn_tail(log)
                with open(log, "a") as fh:
                    fh.write("".join(json.dumps(r) + "\n" for r in lines))
        elif kind == "edge":
            dep = {"issue_id": f"al-wisp-e{n}", "depends_on_id": "al-1", "type": arg}
            store_of(digest_dir).put_ephemeral_many([{"id": f"al-wisp-e{n}", "title": "e", "status": "open",
                                              "dependencies": [dep]}])
        elif kind == "torn":
            with open(log, "a") as fh:
                fh.write(json.dumps(context("al-wisp-t", "open", "", n))[:arg])
        elif kind == "read":
            reader = Stores(Town(digest_dir))
            openqueue.open_contexts(reader)
            if arg:
                reader.rig("alpha").index_is_exact()
        elif kind == "launch":
            reader = Stores(Town(digest_dir))
            found = [c for c in openqueue.open_contexts(reader) if c.valid]
            store, picked = reader.rig("alpha"), [c.id for c in found[arg:arg + 2]]
            from_digest = store.log_unread()
            for context_id in picked:
                ctxs.mark_launch(store, context_id)
            ctxs.clear_launch(store, picked)  # one append of several lines, each then read where it stands
            ctxs.close_many(store.town, store, [(cid, ctxs.DISPATCHED, None) for cid in picked])
            assert store.log_unread() == from_digest  # never read whole when the digest answered
        elif kind == "clear":
            expected = whole(digest_dir)[0]
            reader = Stores(Town(digest_dir))
            found = openqueue.open_contexts(reader, fresh=True, lean=True)
            assert seen(found) == expected
            store = reader.rig("alpha")
            closing = [(c.id, ctxs.CLEARED, {"item_id": c.work_id}) for c in found[:arg]]
            ctxs.close_many(store.town, store, closing)
            assert store.log_unread()  # read lean or from the digest, never whole
        elif kind == "clear-all":
            whole_before = log.read_bytes()
            clear_everything(digest_dir)
            kept = json.loads(store_of(digest_dir).queue_digest_path.read_text())
            summary = json.loads(store_of(digest_dir)._summary_path.read_text())
            data = log.read_bytes()
            if data.endswith(b"\n"):  # no torn fragment left at the end (a close would have mended it)
                assert kept["open"] == [] and kept["mark"]["offset"] == len(data)
                if whole_before.endswith(b"\n"):  # the summary before the closes stood at the log's end
                    assert summary["mark"]["offset"] == len(data)
        else:
            compact(store_of(digest_dir))
        queue, summary = whole(digest_dir)
        by_item = Stores(Town(digest_dir))  # first, while the map is as the step left it
        for item in ITEMS_ASKED:
            found = by_item_of(queue, item)
            asked = openqueue.open_of_items(by_item, item, valid=False)
            assert {key: seen(group) for key, group in asked.items()} == found
            valid = {key: [c for c in group if c[2].work_bead_id and c[2].target_rig]
                     for key, group in found.items()}
            assert {key: seen(group) for key, group in openqueue.open_of_items(by_item, item).items()} == \
                {key: group for key, group in valid.items() if group}
        reader = Stores(Town(digest_dir))
        assert seen(openqueue.open_contexts(reader)) == queue
        ids, edges, quiet = reader.rig("alpha")._ephemeral_summary()
        # Carried forward, the summary may err only on the safe side (an edge that was once there).
        assert ids == summary[0] and edges >= summary[1] and quiet <= summary[2]
        if kind == "compact":  # compaction leaves both digests of the file it wrote: not read whole
            assert reader.rig("alpha").log_unread()


#: Items asked of the item map after each step: one, another, several at once, one never queued.
ITEMS_ASKED = [["al-1"], ["al-2"], ["al-1", "al-2", "al-3", "al-4", "al-9"]]


def by_item_of(queue: list[tuple], items: list[str]) -> dict[str, list[tuple]]:
    """What a lookup of ``items`` answers, grouped from a whole read's queue (valid ones first)."""
    out: dict[str, list[tuple]] = {}
    for row in queue:
        if row[2] is not None and row[2].work_bead_id in items:
            out.setdefault(row[2].work_bead_id, []).append(row)
    return out


def clear_everything(town: Path) -> dict:
    from sluice.scheduler.control import clear

    return clear(Town(town))


def test_a_clear_keeps_no_digest_past_a_line_another_writer_appended_during_it(digest_dir, monkeypatch):
    """A sling landing between a clear's read and its closes is open after the clear: neither digest may
    be carried over it, and the next reader finds the new context."""
    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text("".join(json.dumps(context(f"al-wisp-{n}", "open", valid, n)) + "\n" for n in range(3)))
    real_close_many = ctxs.close_many

    def a_sling_first(town, store, closes):
        with open(log, "a") as fh:
            fh.write(json.dumps(context("al-wisp-new", "open", valid, 9)) + "\n")
        return real_close_many(town, store, closes)

    monkeypatch.setattr(ctxs, "close_many", a_sling_first)
    assert clear_everything(digest_dir)["cleared"] == 3
    monkeypatch.undo()
    reader = Stores(Town(digest_dir))
    assert [c.id for c in openqueue.open_contexts(reader)] == ["al-wisp-new"]
    assert "al-wisp-new" in reader.rig("alpha").log_ids()


def test_a_clear_with_no_summary_to_carry_over_never_reads_the_log_whole(digest_dir, monkeypatch):
    """With the queue digest kept and the summary gone (deleted, another version, never written), a
    clear still closes from the digest: it carries no summary rather than read 100,000 records for one."""
    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text("".join(json.dumps(context(f"al-wisp-{n}", "open", valid, n)) + "\n" for n in range(20)))
    openqueue.open_contexts(Stores(Town(digest_dir)))  # the queue digest of this log
    store_of(digest_dir)._summary_path.unlink(missing_ok=True)

    def no_whole_read(self):
        raise AssertionError("the log was read whole")

    monkeypatch.setattr(RigStore, "ephemeral_fresh", no_whole_read)
    assert clear_everything(digest_dir)["cleared"] == 20
    monkeypatch.undo()
    assert openqueue.open_contexts(Stores(Town(digest_dir))) == []


def test_after_a_clear_the_next_reader_parses_no_line_of_the_log(digest_dir, monkeypatch):
    """A clear of 100,000 contexts used to leave the next command their 100,000 closes to parse."""
    from sluice.store import jsonlog

    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text("".join(json.dumps(context(f"al-wisp-{n}", "open", valid, n)) + "\n" for n in range(50)))
    assert clear_everything(digest_dir)["cleared"] == 50
    parsed: list[int] = []
    real_parse = jsonlog.parse_line
    monkeypatch.setattr(jsonlog, "parse_line", lambda *a, **k: parsed.append(1) or real_parse(*a, **k))
    reader = Stores(Town(digest_dir))
    assert openqueue.open_contexts(reader) == [] and reader.rig("alpha").index_is_exact()
    assert parsed == []


def test_a_launchs_writes_read_only_the_lines_they_change_and_answer_as_a_whole_read(digest_dir):
    """A process that took the queue from the digest marks, clears and closes contexts without ever
    parsing the log whole: each record's latest line is read where the digest (or its own append) put it."""
    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    lines = [context(f"al-wisp-{c}", "open", json.dumps({"version": 1, "work_bead_id": f"al-{n}",
                                                          "target_rig": "alpha", "enqueued_at": STAMP}), n)
             for n, c in enumerate("abcd")]
    log.write_text("".join(json.dumps(r) + "\n" for r in lines))
    openqueue.open_contexts(Stores(Town(digest_dir)))  # keeps the digest
    with open(log, "a") as fh:  # a line after the digest's mark
        fh.write(json.dumps(context("al-wisp-a", "open", lines[1]["description"], 9)) + "\n")
    reader = Stores(Town(digest_dir))
    store = reader.rig("alpha")
    assert len(openqueue.open_contexts(reader)) == 4 and store.log_unread()
    for context_id in ("al-wisp-a", "al-wisp-b", "al-wisp-c"):
        assert ctxs.mark_launch(store, context_id) is not None
    assert set(ctxs.clear_launch(store, ["al-wisp-a", "al-wisp-b", "al-wisp-c"])) == {
        "al-wisp-a", "al-wisp-b", "al-wisp-c"}  # one append of three lines
    closing = [(cid, ctxs.DISPATCHED, None) for cid in ("al-wisp-b", "al-wisp-c")]
    assert ctxs.close_many(store.town, store, closing) == ["al-wisp-b", "al-wisp-c"]
    assert store.log_unread()  # never read whole
    records = store_of(digest_dir).ephemeral_fresh()
    assert ctxs.parse("alpha", records["al-wisp-a"]).fields.work_bead_id == "al-1"  # the line after the mark
    assert [c.id for c in openqueue.open_contexts(Stores(Town(digest_dir)))] == ["al-wisp-a", "al-wisp-d"]
    assert [c.id for c in openqueue.open_contexts(reader)] == ["al-wisp-a", "al-wisp-d"]


def test_a_digest_far_enough_behind_the_log_is_kept_again_at_its_end(digest_dir):
    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    log.write_text("")
    openqueue.open_contexts(Stores(Town(digest_dir)))
    digest = store_of(digest_dir).queue_digest_path
    fields = SlingContextFields(work_bead_id="al-1", target_rig="alpha", enqueued_at=STAMP)
    ctxs.create(store_of(digest_dir), [({"id": "al-1", "title": "one"}, fields, STAMP)] * 64)
    openqueue.open_contexts(Stores(Town(digest_dir)))
    assert json.loads(digest.read_text())["mark"]["lines"] == 0  # 64 lines behind: parsed, not rewritten
    ctxs.create(store_of(digest_dir), [({"id": "al-1", "title": "one"}, fields, STAMP)])
    assert len(openqueue.open_contexts(Stores(Town(digest_dir)))) == 65
    kept = json.loads(digest.read_text())
    assert (kept["mark"]["offset"], kept["mark"]["lines"], len(kept["open"])) == (log.stat().st_size, 65, 65)
    assert worth_rewriting(12_501, 100_000) and not worth_rewriting(12_500, 100_000)


def test_a_copied_town_keeps_its_digests(digest_dir, tmp_path, monkeypatch):
    """A copy of a town (a backup restored, a town moved) holds its logs under other inodes: the digests
    kept at marks of the originals still stand, by the CRC of the bytes they read, so its first clear
    reads no log whole.  A copy whose log differs before the mark is read whole, as it must be."""
    import shutil

    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text("".join(json.dumps(context(f"al-wisp-{n}", "open", valid, n)) + "\n" for n in range(20)))
    openqueue.open_contexts(Stores(Town(digest_dir)))  # the queue digest of this log
    copy = shutil.copytree(digest_dir, tmp_path / "copy", symlinks=True)
    copied_log = copy / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    assert copied_log.stat().st_ino != log.stat().st_ino

    def no_whole_read(self):
        raise AssertionError("the log was read whole")

    monkeypatch.setattr(RigStore, "ephemeral_fresh", no_whole_read)
    assert len(openqueue.open_contexts(Stores(Town(copy)))) == 20
    assert clear_everything(copy)["cleared"] == 20
    monkeypatch.undo()
    assert openqueue.open_contexts(Stores(Town(copy))) == []
    assert len(openqueue.open_contexts(Stores(Town(digest_dir)))) == 20  # the original is its own

    changed = shutil.copytree(digest_dir, tmp_path / "changed", symlinks=True)
    changed_log = changed / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    changed_log.write_text(changed_log.read_text().replace("al-wisp-3", "al-wisp-X", 1))
    assert sorted(c.id for c in openqueue.open_contexts(Stores(Town(changed))))[-1] == "al-wisp-X"


def test_a_clear_does_not_keep_the_digest_of_what_it_is_about_to_close(digest_dir, monkeypatch):
    """A digest far behind the log is brought up to date by a reader and kept again; a clear, which closes
    every context it reads, keeps only the digest after its closes (writing the one before cost a
    second of a clear of 100,000)."""
    from sluice.store import queuedigest

    log = digest_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    valid = json.dumps({"version": 1, "work_bead_id": "al-1", "target_rig": "alpha", "enqueued_at": STAMP})
    log.write_text("".join(json.dumps(context(f"al-wisp-{n}", "open", valid, n)) + "\n" for n in range(10)))
    openqueue.open_contexts(Stores(Town(digest_dir)))  # the digest, at 10 lines
    with open(log, "a") as fh:  # lines enough after its mark to be worth a new digest
        fh.write("".join(json.dumps(context(f"al-wisp-x{n}", "open", valid, n)) + "\n" for n in range(100)))
    written: list[int] = []
    real = queuedigest.write
    monkeypatch.setattr(queuedigest, "write", lambda path, mark, rows: written.append(len(rows)) or
                        real(path, mark, rows))
    assert clear_everything(digest_dir)["cleared"] == 110
    assert written == [0]  # the digest after the closes only
