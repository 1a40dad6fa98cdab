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
        index: dict[str, int] = {}
        kinds: list[list] = []
        kind_of = []
        for row in rows:
            key = repr(row[1:])  # exact for what JSON holds: 1 is not 1.0, nor "ab" ["a", "b"]
            found = index.get(key)
            if found is None:
                found = index[key] = len(kinds)
                kinds.append(row[1:])
            kind_of.append(found)
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


def stretch_ends(values: list) -> list[int]:
    """Where each stretch of equal values ends (exclusive), in order: found by C loops, not a Python one."""
    if not values:
        return []
    changes = list(compress(count(1), map(ne, values[1:], values[:-1])))
    changes.append(len(values))
    return changes
