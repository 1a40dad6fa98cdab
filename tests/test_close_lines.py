"""A close made to a context's line of text writes what a close of its parsed record writes.

A clear of 100,000 contexts closes each by patching its known line instead
of parsing and encoding it again, and writes each close's event without the
general encoder; both must give exactly the text the general way gives, and
a line of any other shape must take the general way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.core.records import SlingContextFields
from sluice.store import contexts as ctxs
from sluice.store import events, openqueue, rigstore
from sluice.store.jsonlog import line_text
from sluice.store.rigstore import Stores
from sluice.store.town import Town

STAMP = "2026-01-01T00:00:00.000000Z"
TEXT = st.text(max_size=30)  # any characters: quotes, backslashes, control characters, astral planes
FIELDS = SlingContextFields(work_bead_id="al-1", target_rig="alpha", enqueued_at=STAMP)
IDS = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


def closed_by_parsing(line: str, stamp: str, reason: str) -> str:
    record = json.loads(line)
    record.update(status="closed", closed_at=stamp, updated_at=stamp, close_reason=reason)
    return line_text(record)


@st.composite
def context_records(draw) -> dict:
    fields = SlingContextFields(work_bead_id=draw(IDS), target_rig=draw(TEXT), enqueued_at=draw(TEXT),
                                last_failure=draw(TEXT))
    item = {"id": fields.work_bead_id, "title": draw(TEXT)}
    if draw(st.booleans()):
        item["priority"] = draw(st.integers(0, 4))
    return ctxs.build_record(draw(IDS), item, fields, draw(TEXT))


@given(context_records(), TEXT, TEXT)
def test_a_line_closed_in_place_is_the_line_a_parsed_close_writes(record, stamp, reason):
    line = line_text(record)
    assert ctxs.closed_line(line, ctxs.closed_suffix(stamp, reason)) == closed_by_parsing(line, stamp, reason)


@pytest.mark.parametrize("change", [
    lambda r: r.update(status="in_progress"),  # only an open line is closed in place
    lambda r: r.update(status="closed"),
    lambda r: r.update(priority=7),  # a parse would read it as the default: the line is not kept
    lambda r: r.update(priority=True),
    lambda r: r.update(assignee="x"),  # a key build_record never writes
    lambda r: r.pop("title"),
    lambda r: r["dependencies"].append({"issue_id": r["id"], "depends_on_id": "al-2", "type": "tracks"}),
    lambda r: r.update(labels=["sluice:sling-context", "other"]),
])
def test_a_line_of_any_other_shape_is_left_to_a_parse(change):
    record = ctxs.build_record("al-wisp-a", {"id": "al-1", "title": "t"}, FIELDS, STAMP)
    change(record)
    assert ctxs.closed_line(line_text(record), ctxs.closed_suffix(STAMP, "cleared")) is None


@pytest.mark.parametrize("text", [
    '{"id":"a", "title":"t"}',  # spaces: not written by sluice
    '{"id":"al-wisp-a","title":"\\q","description":"","status":"open"}',  # not JSON
])
def test_text_that_is_not_such_a_line_is_left_to_a_parse(text):
    assert ctxs.closed_line(text, ctxs.closed_suffix(STAMP, "cleared")) is None


def test_a_bad_escape_or_a_raw_control_character_is_never_patched():
    record = ctxs.build_record("al-wisp-a", {"id": "al-1", "title": "tab"}, FIELDS, STAMP)
    line = line_text(record)
    suffix = ctxs.closed_suffix(STAMP, "cleared")
    assert ctxs.closed_line(line, suffix) is not None
    assert ctxs.closed_line(line.replace("tab", "t\tb"), suffix) is None  # not JSON: a parse reports it
    assert ctxs.closed_line(line.replace("tab", "t\\xb"), suffix) is None
    assert ctxs.closed_line(line.replace("tab", "t\\u00e9b"), suffix) is not None  # an escape JSON allows


PAYLOADS = st.dictionaries(TEXT, st.one_of(st.none(), TEXT, st.integers(), st.booleans(),
                                           st.lists(TEXT, max_size=2)), max_size=5)


@given(st.text(min_size=1), PAYLOADS)
def test_an_event_line_is_the_text_the_json_encoder_gives(event_type, payload):
    event = events.make_event(event_type, payload)
    assert events.event_line(event) == json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def test_events_with_keys_the_encoder_turns_into_text_are_left_to_it():
    event = events.make_event("X", {1: "a", None: "b", 2.5: "c", False: "d"})
    assert events.event_line(event) == json.dumps(event, ensure_ascii=False, separators=(",", ":"))


# -- through the store -----------------------------------------------------------------------------


def open_queue(town: Path, count: int) -> None:
    store = Stores(Town(town)).rig("alpha")
    ctxs.create(store, [({"id": "al-1", "title": f"item \"{n}\" é\\"}, FIELDS, STAMP) for n in range(count)])
    openqueue.open_contexts(Stores(Town(town)))  # a whole read: keeps the digest


def test_a_close_of_lines_sluice_wrote_parses_none_of_them_and_writes_what_a_parse_would(town_dir, rig,
                                                                                         monkeypatch):
    town = town_dir
    open_queue(town, 5)
    log = town / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl"
    before = log.read_text().splitlines()
    moved = json.dumps(json.loads(before[4]) | {"title": "moved"})  # not of sluice's shape (spaces)
    with open(log, "a") as fh:  # another writer's line after the digest's mark
        fh.write(moved + "\n")
    reader = Stores(Town(town))
    store = reader.rig("alpha")
    ids = [c.id for c in openqueue.open_contexts(reader)]
    assert len(ids) == 5 and store.log_unread()

    parse = rigstore.parse_line

    def only_the_other_writers_line(path, number, line, *rest):
        assert line == (moved + "\n").encode(), "a line of sluice's shape was parsed to be closed"
        return parse(path, number, line, *rest)

    monkeypatch.setattr(rigstore, "parse_line", only_the_other_writers_line)
    other = json.loads(moved)["id"]
    mine = [cid for cid in ids if cid != other]
    closing = [(cid, ctxs.CLEARED, {"item_id": "al-1"}) for cid in mine]
    closing.append((other, ctxs.DISPATCHED, None))  # its item read from its description
    assert ctxs.close_many(store.town, store, closing) == [*mine, other]
    monkeypatch.undo()
    after = {json.loads(line)["id"]: line for line in log.read_text().splitlines()[len(before) + 1:]}
    stamp = json.loads(after[other])["closed_at"]
    opened = {json.loads(line)["id"]: line for line in before}
    assert all(after[cid] == closed_by_parsing(opened[cid], stamp, ctxs.CLEARED) for cid in mine)
    assert after[other] == closed_by_parsing(moved, stamp, ctxs.DISPATCHED)
    assert openqueue.open_contexts(Stores(Town(town))) == []
    closed = events.read_events(Town(town), [events.CONTEXT_CLOSED])
    assert [(e["payload"]["context_id"], e["payload"]["item_id"], e["payload"]["reason"]) for e in closed] \
        == [(cid, "al-1", ctxs.CLEARED) for cid in mine] + [(other, "al-1", ctxs.DISPATCHED)]
    # A close of what is closed already writes nothing, as before.
    size = log.stat().st_size
    assert ctxs.close_many(store.town, store, closing) == []
    assert log.stat().st_size == size
