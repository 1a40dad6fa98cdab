"""A log's latest versions read without parsing superseded lines equal reading every line."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

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
