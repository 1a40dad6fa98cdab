"""The one rule for text that cannot be encoded (sluice.core.text): found wherever it hides, never missed
by the quick look at the bytes, and shown escaped wherever a person reads it."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from sluice.core.text import clipped, may_hold_unencodable, printable, printable_text, unencodable

# Any text, lone surrogates included (hypothesis leaves them out unless asked).
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=8)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ANY_TEXT, inner, max_size=3),
    max_leaves=12,
)


def encodes(value) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@given(JSON_VALUES)
def test_unencodable_finds_exactly_what_utf8_refuses(value):
    assert (unencodable(value) is None) == encodes(value)


@given(JSON_VALUES, st.booleans())
def test_the_quick_look_at_the_bytes_never_misses_what_the_walk_would_find(value, ascii_only):
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    if unencodable(json.loads(raw)) is not None:
        assert may_hold_unencodable(raw)


def test_the_place_is_named_as_a_reader_would_look_for_it():
    record = json.loads('{"id": "a", "labels": ["ok", "b\\ud800"], "metadata": {"touches": ["\\udfff"]}}')
    assert unencodable(record) == "labels[1]"
    del record["labels"]
    assert unencodable(record) == "metadata.touches[0]"
    assert unencodable({"metadata": {"\ud800": 1}}) == "a key of metadata"
    assert unencodable("\udcff", "reason") == "reason"
    assert unencodable(json.loads('"\\ud83d\\ude00"')) is None  # a pair is one character, and fine


def test_a_surrogate_is_shown_escaped_and_never_reaches_an_encoder_raw():
    shown = printable("id-\ud800") + printable_text("line\n\udcff")
    shown.encode("utf-8")
    assert "\\ud800" in shown and "\\udcff" in shown


def test_a_long_input_is_clipped_with_its_length_said():
    assert clipped("short") == "short"
    long = clipped("x" * 60_000)
    assert len(long) < 100 and "60,000 characters" in long


# -- the records that must be kept whatever their text: kept, escaped ------------------------------


def test_a_run_record_holding_unencodable_text_is_kept_escaped_and_reads_back_as_it_was(town_files):
    from sluice.store.database import runs

    record = {"run_id": "r1", "polecat_id": "pc-1", "item_id": "al-\ud800", "rig": "alpha", "outcome": "ok",
              "started_at": "2026-12-08T00:00:00Z", "ended_at": "2026-12-08T00:01:00Z", "labels": ["x\udfff"]}
    runs.append(town_files, [record])
    back = runs.read_runs(town_files)["r1"]
    assert back["item_id"] == "al-\ud800" and back["labels"] == ["x\udfff"] and back["outcome"] == "ok"


def test_an_event_or_decision_holding_unencodable_text_reaches_its_log_as_an_escape(town_files):
    from sluice.store.database import decisions, events, outbox

    events.emit_event(town_files, "Odd", {"label": "\ud800", "count": 1})
    events.emit_event(town_files, "Odd", {"label": "b\udfff"})
    decisions.append_decisions(town_files, [{"item_id": "al-\udcff", "score": 1.0}])
    outbox.flush(town_files)
    for log in (town_files.events_path, town_files.decisions_path):
        text = log.read_bytes().decode("utf-8")  # valid UTF-8: the escape, never the raw surrogate
        assert "\\ud800" in text or "\\udcff" in text
    read = events.read_events(town_files, ["Odd"])
    assert [e["payload"]["label"] for e in read] == ["\ud800", "b\udfff"]


def test_text_no_encoding_holds_that_reaches_a_transaction_is_a_named_refusal_that_changes_nothing(
        town_files):
    import pytest

    from sluice.errors import StorageError

    db = town_files.db
    with pytest.raises(StorageError, match=r"cannot write text no encoding can hold.*nothing was changed"), \
            db.transaction() as conn:
        conn.execute("INSERT INTO versions (name, value) VALUES ('first', 1)")
        conn.execute("INSERT INTO versions (name, value) VALUES (?, 1)", ("x\ud800",))
    assert db.versions("first") == {"first": 0}
