"""A log's latest versions read without parsing superseded lines equal reading every line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.errors import StoreCorrupt
from sluice.store.jsonlog import LogTail, parse_line


def reference(path) -> tuple[dict, dict]:
    """Every line parsed in order: the latest version of each id, in first-seen order, and its line."""
    records, positions = {}, {}
    for number, chunk in enumerate(path.read_bytes().splitlines(keepends=True), start=1):
        record = parse_line(path, number, chunk)
        if record is not None:
            records[record["id"]] = record
            positions[record["id"]] = number
    return records, positions


versions = st.lists(st.tuples(
    st.sampled_from(["a-1", "a-2", "a-3", 'a-"4', "a-5"]),
    st.sampled_from(["open", "closed", "in_progress"]),
    st.sampled_from(["sluice", "other", "skip"]),  # how the line is written
), max_size=40)


def line(record_id: str, status: str, shape: str, n: int) -> str:
    record = {"id": record_id, "title": f"v{n}", "status": status}
    if shape == "other":  # not sluice's key order: parsed, never skipped unread
        return json.dumps({"status": status, "id": record_id, "title": f"v{n}"}) + "\n"
    if shape == "skip":  # a line beads' importer skips
        record["_type"] = "memory"
    return json.dumps(record, separators=(",", ":")) + "\n"


@given(versions, st.integers(0, 40))
def test_the_latest_versions_are_those_of_a_full_read(tmp_path_factory, written, split):
    path = tmp_path_factory.mktemp("log") / "ephemeral.jsonl"
    text = [line(i, s, shape, n) for n, (i, s, shape) in enumerate(written)]
    path.write_text("".join(text[:split]))
    tail = LogTail(path)
    tail.catch_up()
    with open(path, "a") as fh:  # and read on from where the first read stopped
        fh.write("".join(text[split:]))
    records = tail.catch_up()
    expected, positions = reference(path)
    assert records == expected and list(records) == list(expected)
    assert tail.positions == positions and tail.lines == len(text)


@given(versions, st.integers(1, 300), st.integers(0, 30), st.booleans())
def test_a_log_read_a_block_at_a_time_reads_as_a_whole_read(tmp_path_factory, written, block, torn, kept):
    """A log parsed in blocks of whole lines (the lean read of a log with no digest) reads as a whole read:
    ``keep`` applied to each latest version, a torn or newline-less last line taken as a whole read does."""
    path = tmp_path_factory.mktemp("log") / "ephemeral.jsonl"
    text = "".join(line(i, s, shape, n) for n, (i, s, shape) in enumerate(written))
    last = json.dumps({"id": "a-9", "title": "t", "status": "open"}, separators=(",", ":"))
    path.write_text(text + last[:torn])  # a torn fragment, or (whole) a record without its newline
    whole = LogTail(path)
    whole.catch_up()
    keep = (lambda record: record["status"]) if kept else None
    blocks = LogTail(path, keep=keep)
    blocks.catch_up(block=block)
    assert blocks.records == {rid: keep(r) if keep else r for rid, r in whole.records.items()}
    assert list(blocks.records) == list(whole.records)
    assert (blocks.positions, blocks.at, blocks.mark()) == (whole.positions, whole.at, whole.mark())


def test_a_bad_line_read_in_blocks_is_named_by_its_line_in_the_log(tmp_path):
    path = tmp_path / "ephemeral.jsonl"
    path.write_text("".join(line(f"a-{n}", "open", "sluice", n) for n in range(20)) + "{oops\n")
    with pytest.raises(StoreCorrupt, match=r"ephemeral.jsonl:21: malformed record"):
        LogTail(path).catch_up(block=50)
