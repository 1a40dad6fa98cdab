"""Each rig's item map (``<rig>.open-items``) answers which open contexts name an item as a whole read
of the log does, and a sling or clear of one item reads only that item's contexts, not the queue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.foundation import quick_rig, quick_town
from helpers.scheduler import item, write_items
from sluice.core.items import DONE_STATUSES, is_context
from sluice.core.records import SlingContextFields
from sluice.store import contexts as ctxs
from sluice.store import fsutil, openitems, openqueue
from sluice.store.compaction import compact
from sluice.store.rigstore import Stores
from sluice.store.town import Town

STAMP = "2026-01-01T00:00:00.000000Z"
# al-10 starts with al-1; the last three hold what a JSON text escapes.
ITEMS = ["al-1", "al-10", "al-2", 'al-"q\\', "al-\t\n", "al-é"]


@pytest.fixture(scope="module")
def map_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("itemmap")
    town = quick_town(base)
    quick_rig(town, base)
    return town


def log_of(town: Path) -> Path:
    return town / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"


def record(context_id: str, item_id: str | None, status: str = "open", n: int = 0) -> dict:
    fields = {"version": 1, "work_bead_id": item_id, "target_rig": "alpha", "enqueued_at": STAMP}
    description = json.dumps(fields) if item_id is not None else "not json"
    return {"id": context_id, "title": f"sling-context: v{n}", "description": description, "status": status,
            "priority": 2, "issue_type": "task", "ephemeral": True, "labels": ["sluice:sling-context"],
            "dependencies": [], "created_at": STAMP, "updated_at": STAMP}


def whole(town: Path, items: list[str], valid: bool) -> dict[str, list[str]]:
    """What a lookup answers, from a read of every line of the log."""
    records = Stores(Town(town)).rig("alpha").ephemeral_fresh()
    found = [ctxs.parse("alpha", r) for r in records.values()
             if r.get("status", "open") not in DONE_STATUSES and is_context(r)]
    found.sort(key=lambda c: (not c.valid, c.order, c.id))
    out: dict[str, list[str]] = {}
    for context in found:
        if context.work_id in items and (context.valid or not valid):
            out.setdefault(context.work_id, []).append(context.id)
    return out


def queue_of(town: Path, found: list | None) -> list[tuple]:
    """The open queue as ``found`` (None: a whole read of the log) holds it."""
    if found is None:
        records = Stores(Town(town)).rig("alpha").ephemeral_fresh()
        found = [ctxs.parse("alpha", r) for r in records.values()
                 if r.get("status", "open") not in DONE_STATUSES and is_context(r)]
        found.sort(key=lambda c: (not c.valid, c.order, c.id))
    return [(c.id, c.fields) for c in found]


def test_a_lookup_that_writes_the_map_again_carries_the_queue_digest_to_the_logs_end(map_dir, monkeypatch):
    """Slings no longer read the queue: the first reader after a big batch would parse every line
    slung since the digest's mark (a clear of everything holding them all in memory at once)."""
    log = log_of(map_dir)
    log.write_text("")
    store = Stores(Town(map_dir)).rig("alpha")
    store.forget_digests()
    store.put_ephemeral_many([record(f"al-wisp-q{n}", f"al-{n}") for n in range(100)])
    openqueue.open_contexts(Stores(Town(map_dir)))  # keeps the digest and the map at the log's end
    Stores(Town(map_dir)).rig("alpha").put_ephemeral_many([record(f"al-wisp-r{n}", f"al-r{n}")
                                                          for n in range(80)])
    assert looked_up(map_dir, ["al-r3"], True) == {"al-r3": ["al-wisp-r3"]}
    kept = json.loads(Stores(Town(map_dir)).rig("alpha").queue_digest_path.read_text())
    assert kept["mark"]["offset"] == log.stat().st_size and len(kept["open"]) == 180
    assert queue_of(map_dir, openqueue.open_contexts(Stores(Town(map_dir)))) == queue_of(map_dir, None)


def looked_up(town: Path, items: list[str], valid: bool) -> dict[str, list[str]]:
    found = openqueue.open_of_items(Stores(Town(town)), items, valid)
    return {k: [c.id for c in v] for k, v in found.items()}


IDS = st.sampled_from([f"al-wisp-{c}" for c in "abcdefgh"])
STEPS = st.lists(st.one_of(
    st.tuples(st.just("open"), st.tuples(IDS, st.sampled_from([*ITEMS, None]))),  # sluice's append
    st.tuples(st.just("close"), IDS),  # a close through the store, reading the line where it stands
    st.tuples(st.just("foreign"),
              st.tuples(IDS, st.sampled_from(ITEMS), st.sampled_from(["open", "closed"]))),
    st.tuples(st.just("torn"), st.integers(1, 40)),  # a writer killed mid-append
    st.tuples(st.just("lookup"), st.lists(st.sampled_from(ITEMS), min_size=1, max_size=4)),
    st.tuples(st.just("spoil"), st.integers(0, 200)),  # the map's file cut or a byte of it changed
    st.tuples(st.just("compact"), st.none()),
    st.tuples(st.just("clear-all"), st.none()),
), min_size=1, max_size=16)


@pytest.mark.parametrize("rewrite_at", [0, None], ids=["kept-again-each-time", "kept-again-when-worth-it"])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_the_item_map_always_answers_as_a_whole_read(map_dir, monkeypatch, rewrite_at, steps):
    """Whatever appends, closes, foreign and torn lines, lookups, compaction and a spoiled map did, in
    any order, a lookup answers as a whole read of the log, the invalid contexts asked for or not."""
    if rewrite_at is not None:
        monkeypatch.setattr(openqueue, "worth_rewriting", lambda lines, kept: lines > rewrite_at)
    log = log_of(map_dir)
    log.write_text("")
    Stores(Town(map_dir)).rig("alpha").forget_digests()
    path = Stores(Town(map_dir)).rig("alpha").open_items_path
    for n, (kind, arg) in enumerate(steps):
        store = Stores(Town(map_dir)).rig("alpha")
        if kind == "open":
            store.put_ephemeral_many([record(arg[0], arg[1], n=n)])
        elif kind == "close":
            ctxs.close_many(store.town, store, [(arg, ctxs.CLEARED, None)])
        elif kind == "foreign":
            fsutil.mend_torn_tail(log)
            with open(log, "a") as fh:
                fh.write(json.dumps(record(arg[0], arg[1], arg[2], n)) + "\n")
        elif kind == "torn":
            with open(log, "a") as fh:
                fh.write(json.dumps(record("al-wisp-t", "al-1", n=n))[:arg])
        elif kind == "lookup":
            assert looked_up(map_dir, arg, True) == whole(map_dir, arg, True)
        elif kind == "spoil" and path.exists():
            data = bytearray(path.read_bytes())
            body = data.index(b"\n")
            if arg % 2:
                path.write_bytes(bytes(data[:arg]))
            elif len(data) > body + 1:  # a byte of the lines, past the header, changed
                data[body + 1 + arg % (len(data) - body - 1)] ^= 1
                path.write_bytes(bytes(data))
        elif kind == "compact":
            compact(store)
        elif kind == "clear-all":
            from sluice.scheduler.control import clear

            clear(Town(map_dir))
        for valid in (True, False):
            assert looked_up(map_dir, ITEMS, valid) == whole(map_dir, ITEMS, valid)
            assert looked_up(map_dir, ITEMS[:1], valid) == whole(map_dir, ITEMS[:1], valid)
        # and the queue digest a lookup carried forward (when it wrote the map again) reads as the log
        assert queue_of(map_dir, openqueue.open_contexts(Stores(Town(map_dir)))) == queue_of(map_dir, None)


@given(st.lists(st.tuples(st.text(min_size=1, max_size=6), st.text(min_size=1, max_size=6),
                          st.integers(0, 1 << 40)), max_size=8), st.text(min_size=1, max_size=6))
@settings(max_examples=300, deadline=None)
def test_any_item_is_found_as_written_and_no_other(rows, asked):
    """Ids are data: a tab, a newline, a quote or a backslash in one never makes it match another."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "map"
        openitems.write(path, {"offset": 1}, rows)
        mark, body = openitems.read(path)
        assert mark == {"offset": 1}
        assert openitems.rows(body) == rows
        wanted = sorted({asked, *(row[0] for row in rows[:1]), *(row[0][:-1] for row in rows[1:2])})
        assert sorted(openitems.find(body, wanted)) == sorted(r for r in rows if r[0] in wanted)
        assert sorted(openitems.find(body, [f"{k}" for k in range(40)] + wanted)) == sorted(
            r for r in rows if r[0] in {*wanted, *map(str, range(40))})  # the bulk way too


def counted_parses(monkeypatch) -> list[int]:
    """Count every context's fields made from a description or a digest row."""
    parsed: list[int] = []
    for name in ("from_object", "from_description"):
        real = getattr(SlingContextFields, name).__func__

        def counting(cls, data, real=real):
            parsed.append(1)
            return real(cls, data)

        monkeypatch.setattr(SlingContextFields, name, classmethod(counting))
    return parsed


QUEUED = 300


@pytest.fixture
def queued_dir(town_dir, rig, capacity) -> Path:
    """A rig with QUEUED items queued and a few not, the item map kept by a first lookup."""
    from sluice.scheduler.sling import sling_items

    capacity(2)
    write_items(town_dir, "alpha", [item(f"al-{n}", f"task {n}") for n in range(QUEUED + 5)])
    result = sling_items(Town(town_dir), [f"al-{n}" for n in range(QUEUED)], "alpha")
    assert len(result.scheduled) == QUEUED
    openqueue.find_open(Stores(Town(town_dir)), "al-0")  # the first lookup keeps the map
    return town_dir


def test_a_sling_or_a_clear_of_one_item_reads_its_contexts_not_the_queue(queued_dir, monkeypatch):
    from sluice.scheduler.control import clear
    from sluice.scheduler.sling import sling_items

    parsed = counted_parses(monkeypatch)
    result = sling_items(Town(queued_dir), [f"al-{QUEUED}"], "alpha")
    assert [row["item_id"] for row in result.scheduled] == [f"al-{QUEUED}"]
    again = sling_items(Town(queued_dir), ["al-7"], "alpha")  # queued already: found, not slung twice
    assert [row["item_id"] for row in again.already] == ["al-7"] and again.scheduled == []
    assert clear(Town(queued_dir), "al-8")["cleared"] == 1
    assert clear(Town(queued_dir), "al-8")["cleared"] == 0
    assert len(parsed) < 20, f"{len(parsed)} contexts parsed for three items among {QUEUED}"
    monkeypatch.undo()
    assert openqueue.find_open(Stores(Town(queued_dir)), "al-8") == []
    found = openqueue.find_open(Stores(Town(queued_dir)), f"al-{QUEUED}")
    assert [c.work_id for c in found] == [f"al-{QUEUED}"]
