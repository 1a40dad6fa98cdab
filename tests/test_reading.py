"""The forecast's reading over a table of kinds: it gives back every row it was made of, and says where
each stretch of one kind ends."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.scheduler.views.reading import Reading

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


@settings(max_examples=300, deadline=None)
@given(rows, st.lists(kinds, min_size=1, max_size=4))
def test_a_reading_gives_back_every_row_it_was_made_of(drawn, pool):
    rows_ = made(drawn, [list(kind) for kind in pool])
    back = Reading.of(rows_)
    assert back.rows() == rows_ and len(back) == len(rows_)
    for row, again in zip(rows_, back.rows(), strict=True):  # types too: 1 stays 1, 1.0 stays 1.0
        assert [type(v) for v in row] == [type(v) for v in again]
    assert len(back.kinds) == len({repr(row[1:]) for row in rows_})  # each kind held once


@settings(max_examples=300, deadline=None)
@given(rows, st.lists(kinds, min_size=1, max_size=3))
def test_a_stretch_of_one_kind_ends_where_the_next_kind_starts(drawn, pool):
    rows_ = made(drawn, [list(kind) for kind in pool])
    reading = Reading.of(rows_)
    for index in range(len(rows_)):
        end = reading.alike_until(index)
        assert index < end <= len(rows_)
        assert all(repr(rows_[k][1:]) == repr(rows_[index][1:]) for k in range(index, end))
        assert end == len(rows_) or repr(rows_[end][1:]) != repr(rows_[index][1:])
