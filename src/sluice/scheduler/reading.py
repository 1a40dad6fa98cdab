"""The forecast's reading of the queue: the items' ids in a column, over a table of kinds.

A reading (rows made by :func:`sluice.scheduler.forecast.reading_row`) is
every queued item in dispatch order with what the replay needs of it.  Of a
row's eleven fields only the first, the item's id, is its own: the other ten
(rig, type, labels, minutes, tokens, backoff, why, and the labels, touches
and tokens admission reads) are what make it like other items, and a queue
of 100,000 holds a few dozen such *kinds*, mostly in long stretches, since
items of a kind rank alike.

So a reading is held as its kinds, once each; the stretches of consecutive
items of one kind (``[kind, count]``); and the ids in one column (one text
of equal slots, :class:`~sluice.store.columns.Slots`, when no id holds a
newline, else a list).  The replay of the items past a view's rows counts a
stretch instead of walking it (``alike_until``,
:func:`sluice.core.replay.simulate_first`).  (The reading was once kept
between commands and carried past changes; with the store in the town
database it is made afresh from each survey.)
"""

from __future__ import annotations

import bisect

from sluice.store.columns import (
    Slots,
    expand,
    inserted,
    removed,
    stretch_ends,
    stretches,
    strings,
    strings_back,
    whole,
)

#: Fields of a reading row, the id first; the rest make its kind.
ROW_FIELDS = 11


class Reading:
    """A reading in columns: ``ids[i]`` and ``kinds[kind_of[i]]`` make row ``i``.

    ``ranks`` (contexts, scores, enqueue times; None when not kept) are the
    rows' rank facts, for carrying the reading past a change.
    """

    __slots__ = ("_ends", "ids", "kind_of", "kinds", "ranks")

    def __init__(self, ids: Slots | list[str], kinds: list[list], kind_of: list[int],
                 ranks: tuple[Slots | list[str], list[float], Slots | list[str]] | None = None):
        self.ids, self.kinds, self.kind_of, self.ranks = ids, kinds, kind_of, ranks
        self._ends: list[int] | None = None

    @classmethod
    def of(cls, rows: list[list], ranks: list[list] | None = None) -> Reading:
        """The reading of ``rows`` (and their rank facts, when kept), each kind kept once."""
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
        columns = None
        if ranks is not None:
            columns = ([r[0] for r in ranks], [r[1] for r in ranks], [r[2] for r in ranks])
        return cls([row[0] for row in rows], kinds, kind_of, columns)

    def __len__(self) -> int:
        return len(self.ids)

    def row(self, index: int) -> list:
        """Row ``index`` as :func:`~sluice.scheduler.readingtail.reading_row` made it."""
        return [self.ids[index], *self.kinds[self.kind_of[index]]]

    def rows(self, stop: int | None = None) -> list[list]:
        """The first ``stop`` rows (all of them: None)."""
        return [self.row(index) for index in range(len(self) if stop is None else min(stop, len(self)))]

    def alike_until(self, index: int) -> int:
        """The end of the stretch of items of ``index``'s kind that ``index`` is in."""
        if self._ends is None:
            self._ends = stretch_ends(self.kind_of)
        return self._ends[bisect.bisect_right(self._ends, index)]

    def remove(self, gone: set[int]) -> None:
        """Take out the rows at the positions ``gone``."""
        if gone:
            self._set_columns([removed(column, gone) for column in self._columns()])

    def insert(self, position: int, row: list, rank: list) -> None:
        """Put ``row`` (with its rank facts) at ``position``."""
        key = repr(row[1:])
        kind = next((k for k, known in enumerate(self.kinds) if repr(known) == key), None)
        if kind is None:
            kind = len(self.kinds)
            self.kinds.append(row[1:])
        values = [row[0], kind, *(rank if self.ranks is not None else ())]
        self._set_columns([inserted(column, position, value)
                           for column, value in zip(self._columns(), values, strict=True)])

    def _columns(self) -> list:
        return [self.ids, self.kind_of, *(self.ranks or ())]

    def _set_columns(self, columns: list) -> None:
        self.ids, self.kind_of = columns[0], columns[1]
        if self.ranks is not None:
            self.ranks = (columns[2], columns[3], columns[4])
        self._ends = None

    def encode(self) -> dict:
        """The reading as it is kept (JSON-ready)."""
        out = {"ids": strings(self.ids), "kinds": self.kinds, "kind_stretches": stretches(self.kind_of)}
        if self.ranks is not None:
            contexts, scores, orders = self.ranks
            out.update({"contexts": strings(contexts), "scores": stretches(scores),
                        "orders": strings(orders)})
        return out

    @classmethod
    def decode(cls, kept: object) -> Reading | None:
        """A kept reading as :meth:`encode` wrote it; None when it is not one (then the queue is surveyed)."""
        if not isinstance(kept, dict):
            return None
        kinds = kept.get("kinds")
        if not isinstance(kinds, list) or not all(
                isinstance(kind, list) and len(kind) == ROW_FIELDS - 1 and isinstance(kind[0], str)
                for kind in kinds):
            return None
        ids = strings_back(kept.get("ids"))
        kind_of = expand(kept.get("kind_stretches"), lambda k: whole(k) and 0 <= k < len(kinds))
        if ids is None or kind_of is None or len(ids) != len(kind_of):
            return None
        ranks = None
        if "contexts" in kept:
            contexts, orders = strings_back(kept.get("contexts")), strings_back(kept.get("orders"))
            scores = expand(kept.get("scores"), lambda s: s is None or whole(s) or isinstance(s, float))
            if contexts is None or orders is None or scores is None or not (
                    len(contexts) == len(scores) == len(orders) == len(ids)):
                return None
            ranks = (contexts, scores, orders)
        return cls(ids, kinds, kind_of, ranks)
