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


@given(versions, st.integers(0, 40), st.integers(0, 3))
def test_a_read_continues_in_a_copy_of_the_log_only_when_its_prefix_is_the_one_read(tmp_path_factory,
                                                                                    written, split, change):
    """A mark's CRC lets a reader go on in a copy (another inode) of the log it read, as it would in the
    log itself; a copy whose read part differs by one byte, or a mark without a CRC, reads it whole."""
    import shutil

    base = tmp_path_factory.mktemp("log")
    path, copy = base / "ephemeral.jsonl", base / "copy.jsonl"
    text = [line(i, s, shape, n) for n, (i, s, shape) in enumerate(written)]
    path.write_text("".join(text[:split]))
    first = LogTail(path)
    first.catch_up()
    mark = first.mark()
    with open(path, "a") as fh:
        fh.write("".join(text[split:]))
    shutil.copyfile(path, copy)  # another inode, the same bytes
    resumed = LogTail.resume(copy, mark)
    assert resumed is not None and resumed.inode == copy.stat().st_ino
    whole = LogTail(copy)
    whole.catch_up()
    assert resumed.mark() == whole.mark()  # the same place, the same CRC, as a whole read of the copy
    assert {rid: r for rid, r in whole.records.items() if whole.positions[rid] > mark["lines"]} == \
        {rid: r for rid, r in resumed.records.items()}
    if mark["offset"]:  # a byte of the read part changed in the copy: no continuing there
        data = bytearray(copy.read_bytes())
        data[(change * 7919) % mark["offset"]] ^= 0x01
        copy.write_bytes(bytes(data))
        assert LogTail.resume(copy, mark) is None
    shutil.copyfile(path, copy)
    assert LogTail.resume(copy, {k: v for k, v in mark.items() if k != "crc"}) is None


def test_a_mark_moved_past_an_append_is_the_mark_of_a_read_to_its_end(tmp_path):
    path = tmp_path / "ephemeral.jsonl"
    path.write_text(line("a-1", "open", "sluice", 0))
    tail = LogTail(path)
    tail.catch_up()
    data = (line("a-2", "open", "sluice", 1) + line("a-1", "closed", "sluice", 2)).encode()
    with open(path, "ab") as fh:
        fh.write(data)
    whole = LogTail(path)
    whole.catch_up()
    assert LogTail.mark_after(tail.mark(), data, 2) == whole.mark()
    assert LogTail.mark_of_written(path, path.read_bytes(), 3) == whole.mark()
