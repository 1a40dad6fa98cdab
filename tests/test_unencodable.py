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
