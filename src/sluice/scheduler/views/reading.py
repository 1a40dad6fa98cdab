"""The forecast's reading of the queue: the items' ids over a table of kinds.

A reading (rows made by :func:`sluice.scheduler.views.forecast.reading_row`) is
every queued item in dispatch order with what the replay needs of it.  Of a
row's eleven fields only the first, the item's id, is its own: the other ten
(rig, type, labels, minutes, tokens, backoff, why, and the labels, touches
and tokens admission reads) are what make it like other items, and a queue
of 100,000 holds a few dozen such *kinds*, mostly in long stretches, since
items of a kind rank alike.  So a reading holds each kind once and, per
item, its id and its kind; the replay of the items past a view's rows counts
a stretch of one kind instead of walking it (``alike_until``,
:func:`sluice.core.replay.simulate_first`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from itertools import compress, count
from operator import ne


class Reading:
    """Row ``i`` is ``ids[i]`` followed by ``kinds[kind_of[i]]``."""

    __slots__ = ("_ends", "ids", "kind_of", "kinds")

    def __init__(self, ids: list[str], kinds: list[list], kind_of: list[int]):
        self.ids, self.kinds, self.kind_of = ids, kinds, kind_of
        self._ends: list[int] | None = None

    @classmethod
    def of(cls, rows: list[list]) -> Reading:
        """The reading of ``rows``, each kind kept once."""
        kinds, kind_of = _table([row[1:] for row in rows])
        return cls([row[0] for row in rows], kinds, kind_of)

    def __len__(self) -> int:
        return len(self.ids)

    def row(self, index: int) -> list:
        """Row ``index`` as :func:`~sluice.scheduler.views.forecast.reading_row` made it."""
        return [self.ids[index], *self.kinds[self.kind_of[index]]]

    def rows(self, stop: int | None = None) -> list[list]:
        """The first ``stop`` rows (all of them: None)."""
        return [self.row(index) for index in range(len(self) if stop is None else min(stop, len(self)))]

    def alike_until(self, index: int) -> int:
        """The end of the stretch of items of ``index``'s kind that ``index`` is in."""
        if self._ends is None:
            self._ends = stretch_ends(self.kind_of)
        return self._ends[bisect.bisect_right(self._ends, index)]


def _table(kinds: list[list]) -> tuple[list[list], list[int]]:
    """Each distinct kind once, told apart by ``repr`` (exact for what JSON holds: 1 is not 1.0, nor
    "ab" ["a", "b"]), and where each of ``kinds`` is among them."""
    index: dict[str, int] = {}
    table: list[list] = []
    places = []
    for kind in kinds:
        places.append(index.setdefault(repr(kind), len(index)))
        if len(index) > len(table):
            table.append(kind)
    return table, places


def stretch_ends(values: list) -> list[int]:
    """Where each stretch of equal values ends (exclusive), in order: found by C loops, not a Python one."""
    if not values:
        return []
    changes = list(compress(count(1), map(ne, values[1:], values[:-1])))
    changes.append(len(values))
    return changes


class StretchReading(Reading):
    """A reading whose first rows are whole and whose rest is told as stretches of one kind.

    What :func:`sluice.scheduler.queue.head.read_order` gives: the queue's
    first rows built, the others counted by group in order with their ids
    unread.  Past the whole rows the replay reads kinds only (an id there is
    ``""``); a stretch's end is where its kind changes.
    """

    __slots__ = ("_starts",)

    def __init__(self, rows: list[list], stretches: list[tuple[list, int]]):
        stretches = [(kind, n) for kind, n in stretches if n > 0]
        kinds, places = _table([row[1:] for row in rows] + [kind for kind, _n in stretches])
        lengths = [1] * len(rows) + [n for _kind, n in stretches]
        total = sum(lengths)
        starts, kinds_by_run = _runs(zip(places, lengths, strict=True))
        super().__init__(_Ids([row[0] for row in rows], total), kinds, _Kinds(starts, kinds_by_run, total))
        self._starts = starts

    def alike_until(self, index: int) -> int:
        run = bisect.bisect_right(self._starts, index)
        return self._starts[run] if run < len(self._starts) else len(self)


def _runs(runs: Iterable[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """The starts and kinds of ``runs`` (kind, length), neighbouring runs of one kind merged."""
    starts: list[int] = []
    kinds: list[int] = []
    position = 0
    for kind, n in runs:
        if not kinds or kinds[-1] != kind:
            starts.append(position)
            kinds.append(kind)
        position += n
    return starts, kinds


class _Ids:
    """The ids of a stretch reading: the whole rows' own, ``""`` past them."""

    __slots__ = ("_known", "_total")

    def __init__(self, known: list[str], total: int):
        self._known, self._total = known, total

    def __len__(self) -> int:
        return self._total

    def __getitem__(self, index: int) -> str:
        return self._known[index] if index < len(self._known) else ""

    def index(self, item_id: str) -> int:
        return self._known.index(item_id)


class _Kinds:
    """Each position's kind, kept as runs."""

    __slots__ = ("_kinds", "_starts", "_total")

    def __init__(self, starts: list[int], kinds: list[int], total: int):
        self._starts, self._kinds, self._total = starts, kinds, total

    def __len__(self) -> int:
        return self._total

    def __getitem__(self, index: int) -> int:
        if index < 0:
            index += self._total
        if not 0 <= index < self._total:
            raise IndexError(index)
        return self._kinds[bisect.bisect_right(self._starts, index) - 1]
