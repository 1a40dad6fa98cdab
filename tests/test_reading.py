"""The forecast's reading kept in columns over a table of kinds: it gives back every row it was made of."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.scheduler.reading import Reading
from sluice.store import columns

texts = st.text(alphabet=st.sampled_from("ab-\n1"), max_size=4)
#: A row's kind: what JSON holds, with the lookalikes a kind must keep apart (1 and 1.0, "ab" and ["a", "b"]).
kinds = st.tuples(st.sampled_from(["api", "web"]), st.sampled_from(["task", "bug", None]),
                  st.sampled_from([[], ["a", "b"], "ab"]), st.sampled_from([None, 1, 1.0, 30]),
                  st.sampled_from([1000, 0, None]), st.sampled_from([None, 1700000000.5]),
                  st.sampled_from([None, "blocked"]), st.sampled_from([[], ["x"]]),
                  st.sampled_from([[], ["src/"]]), st.sampled_from([1000, 0, 1000.0]))
rows = st.lists(st.tuples(texts, st.integers(0, 3)), max_size=30)


def made(drawn, pool):
    return [[item_id, *pool[pick % len(pool)]] for item_id, pick in drawn]


def ranks_of(rows_):
    return [[f"ctx{n}\n" if n % 7 == 3 else f"ctx{n}", [1.5, 1.5, None, 2][n % 4], f"2026-01-0{n % 3}"]
            for n in range(len(rows_))]


def kept(reading: Reading) -> Reading:
    back = Reading.decode(json.loads(json.dumps(reading.encode())))
    assert back is not None
    return back


@settings(max_examples=300, deadline=None)
@given(rows, st.lists(kinds, min_size=1, max_size=4), st.booleans())
def test_a_kept_reading_gives_back_every_row_and_rank_it_was_made_of(drawn, pool, ranked):
    rows_ = made(drawn, [list(kind) for kind in pool])
    ranks = ranks_of(rows_) if ranked else None
    back = kept(Reading.of(rows_, ranks))
    assert back.rows() == rows_
    for row, again in zip(rows_, back.rows(), strict=True):  # types too: 1 stays 1, 1.0 stays 1.0
        assert [type(v) for v in row] == [type(v) for v in again]
    assert (None if back.ranks is None else tuple(map(list, back.ranks))) == (
        None if ranks is None else tuple([r[k] for r in ranks] for k in range(3)))


@settings(max_examples=300, deadline=None)
@given(rows, st.lists(kinds, min_size=1, max_size=3))
def test_a_stretch_of_one_kind_ends_where_the_next_kind_starts(drawn, pool):
    rows_ = made(drawn, [list(kind) for kind in pool])
    reading = kept(Reading.of(rows_))
    for index in range(len(rows_)):
        end = reading.alike_until(index)
        assert index < end <= len(rows_)
        assert all(repr(rows_[k][1:]) == repr(rows_[index][1:]) for k in range(index, end))
        assert end == len(rows_) or repr(rows_[end][1:]) != repr(rows_[index][1:])


@settings(max_examples=300, deadline=None)
@given(rows, st.lists(kinds, min_size=1, max_size=3), st.sets(st.integers(0, 29)),
       st.lists(st.tuples(st.integers(0, 40), texts, kinds), max_size=4))
def test_taking_out_and_putting_in_rows_is_what_it_is_to_a_list(drawn, pool, gone, added):
    rows_ = made(drawn, [list(kind) for kind in pool])
    ranks = ranks_of(rows_)
    reading = kept(Reading.of(rows_, ranks))
    gone = {k for k in gone if k < len(rows_)}
    reading.remove(gone)
    rows_ = [row for k, row in enumerate(rows_) if k not in gone]
    ranks = [rank for k, rank in enumerate(ranks) if k not in gone]
    for where, item_id, kind in added:
        where = min(where, len(rows_))
        row, rank = [item_id, *kind], [f"new-{item_id}", 0.5, "2026-02-01"]
        reading.insert(where, row, rank)
        rows_.insert(where, row)
        ranks.insert(where, rank)
    assert kept(reading).rows() == rows_ == reading.rows()
    assert tuple(map(list, kept(reading).ranks)) == tuple([r[k] for r in ranks] for k in range(3))
    assert [reading.alike_until(k) for k in range(len(rows_))] == [
        kept(Reading.of(rows_)).alike_until(k) for k in range(len(rows_))]


@given(st.lists(st.text(max_size=5), max_size=20))
def test_a_column_of_strings_comes_back_as_it_went_whatever_the_strings_hold(strings):
    assert columns.split(json.loads(json.dumps(columns.joined(strings)))) == strings


@given(st.lists(st.sampled_from([0, 1, 2, None]), max_size=40))
def test_stretches_come_back_as_the_values_they_were_made_of(values):
    kept_ = json.loads(json.dumps(columns.stretches(values)))
    assert columns.expand(kept_, lambda v: True) == values
    assert all(a[0] != b[0] for a, b in itertools.pairwise(kept_))  # each stretch as long as it can be


def test_a_stretch_not_as_written_is_no_column():
    for bad in ([[0, 0]], [[0, -1]], [[0, True]], [[0]], [0], "x", [[0, 1.5]]):
        assert columns.expand(bad, lambda v: True) is None
    assert columns.split([1, "a"]) is None and columns.split(None) is None


@settings(max_examples=300, deadline=None)
@given(st.sets(st.text(alphabet="ab-1", min_size=1, max_size=3), min_size=1, max_size=12),
       st.lists(st.text(alphabet="ab-1\n", max_size=3), max_size=30),
       st.sets(st.text(alphabet="ab", max_size=2)))
def test_joined_ids_answer_every_question_a_set_of_them_answers(ids, asked, added):
    kept = columns.id_set(json.loads(json.dumps(columns.joined(sorted(ids)))))
    assert isinstance(kept, columns.JoinedIds)
    assert len(kept) == len(ids) and kept == ids and set(kept) == ids
    assert [value in kept for value in asked] == [value in ids for value in asked]
    assert kept.isdisjoint(asked) == ids.isdisjoint(asked)  # a few, or many: the same answer
    assert (set(asked) & kept) == (set(asked) & ids)
    more = kept | added
    assert more == ids | added and len(more) == len(ids | added)
    assert [value in more for value in asked] == [value in ids | added for value in asked]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab\n", max_size=4), max_size=20),
       st.lists(st.tuples(st.booleans(), st.integers(0, 25), st.text(alphabet="ab\n", max_size=6)),
                max_size=6),
       st.lists(st.text(alphabet="ab\n", max_size=5), max_size=8))
def test_a_column_of_slots_is_to_its_readers_the_list_it_was_made_of(values, edits, asked):
    column = columns.strings_back(json.loads(json.dumps(columns.strings(values))))
    plain = list(values)
    for put, where, value in edits:
        if put:
            where = min(where, len(plain))
            column = columns.inserted(column, where, value)
            plain.insert(where, value)
        elif plain:
            gone = {where % len(plain), (where * 7) % len(plain)}
            column = columns.removed(column, gone)
            plain = [v for k, v in enumerate(plain) if k not in gone]
    assert len(column) == len(plain) and list(column) == plain
    assert [column[k] for k in range(len(plain))] == plain
    for value in asked + plain:
        assert (value in column) == (value in plain)
        if value in plain:
            assert column.index(value) == plain.index(value)
    again = columns.strings_back(json.loads(json.dumps(columns.strings(column))))
    assert list(again) == plain


def test_slots_find_a_value_only_where_a_slot_starts():
    column = columns.Slots.of(["ab", "ba", "aa"])  # "abbaaa": "ba" first matches across the first two
    assert column is not None and column.index("ba") == 1 and column.index("aa") == 2
    assert "bb" not in column and "a" not in column
    short = columns.Slots.of(["a", "abc", ""])
    assert [short[k] for k in range(3)] == ["a", "abc", ""] and short.index("") == 2
    assert columns.Slots.of(["a\nb"]) is None and columns.strings(["a\nb"]) == ["a\nb"]
    for bad in ({"width": 2, "size": 2, "text": "abc"}, {"width": -1, "size": 0, "text": ""},
                {"width": True, "size": 1, "text": "a"}, {"text": "ab"}):
        assert columns.strings_back(bad) is None
