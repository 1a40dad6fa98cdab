"""Every context a chain's queue holds, and what each counts as: so a close after the marks can be folded.

A chain (:mod:`sluice.scheduler.chain`) keeps the head of the ready queue
and counts of the rest.  A ``scheduler clear --item`` of an item past the
head, or a close by anyone, appends a line the chain could not place: was
the closed context queued when the chain was made, and if so, which count
held it (a ready kind and admission shape, backing off, or blocked, and for
which rig)?  Not knowing, the next view and the next cycle surveyed the
whole queue (about 3.6 s at 100,000 queued) for one closed context.

So the chain keeps :class:`Queued`: per rig whose log holds them, the ids
of every queued context (a :class:`~sluice.store.columns.Slots` column, a
search in C to find one) and, in stretches, the *bucket* each counts in:
``["r", kind, shape]`` (ready), ``["o", rig]`` (backing off) or ``["b",
rig]`` (blocked).  It holds exactly the open contexts of the logs at the
marks: a chain is only made from a survey that found nothing to tidy (no
stale, held, duplicate or mid-launch context: each open context is one
queued work), and it follows the chain's own changes (launches out, folded
slings in).  A closed context that is not in it was not queued, so its
close changes nothing.  About 13 bytes a context, parsed as one string.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from itertools import accumulate
from typing import TYPE_CHECKING

from sluice.store import columns

if TYPE_CHECKING:
    from sluice.scheduler.pending import Survey

READY, BACKING_OFF, BLOCKED = "r", "o", "b"


class _Rig:
    """One log's queued context ids and their items, with the bucket of each as ``[bucket, count]``
    stretches."""

    __slots__ = ("ids", "items", "stretches")

    def __init__(self, ids: columns.Slots | list[str], items: columns.Slots | list[str],
                 stretches: list[list[int]]):
        self.ids, self.items, self.stretches = ids, items, stretches

    def find(self, context_id: str) -> tuple[int, int] | None:
        """(position, stretch number) of ``context_id``; None when it is not queued here."""
        try:
            at = self.ids.index(context_id)
        except ValueError:
            return None
        ends = list(accumulate(count for _bucket, count in self.stretches))
        return at, bisect_right(ends, at)

    def remove(self, at: int, stretch: int) -> None:
        self.ids = columns.removed(self.ids, {at})
        self.items = columns.removed(self.items, {at})
        self.stretches[stretch][1] -= 1
        if not self.stretches[stretch][1]:
            del self.stretches[stretch]

    def add(self, context_id: str, item_id: str, bucket: int) -> None:
        self.ids = columns.inserted(self.ids, len(self.ids), context_id)
        self.items = columns.inserted(self.items, len(self.items), item_id)
        if self.stretches and self.stretches[-1][0] == bucket:
            self.stretches[-1][1] += 1
        else:
            self.stretches.append([bucket, 1])


class Queued:
    """The queued contexts of every log, each with its bucket (see the module docstring)."""

    def __init__(self, buckets: list[list], rigs: dict[str, _Rig]):
        self.buckets, self.rigs = buckets, rigs
        self._index = {_text(bucket): n for n, bucket in enumerate(buckets)}

    @classmethod
    def of_survey(cls, view: Survey, kinds: list[tuple], shapes: list[tuple]) -> Queued | None:
        """The queue of a survey that may be chained (``kinds`` and ``shapes``: those of its ready works,
        in their order); None when a work does not say which context it is."""
        out = cls([], {})
        numbers: dict[tuple, int] = {}  # a bucket as tuples → its number: one JSON text per bucket
        by_rig: dict[str, list[tuple[int, str]]] = {}
        rows = [*zip(view.ready, kinds, shapes, strict=True),
                *((work, BACKING_OFF, work.rig) for work in view.backing_off),
                *((work, BLOCKED, work.rig) for work in view.blocked)]
        for work, kind, shape in rows:
            if work.context_id is None or work.payload is None:
                return None
            key = (kind, shape)
            number = numbers.get(key)
            if number is None:
                bucket = [kind, shape] if isinstance(kind, str) else [READY, list(kind), shape_row(shape)]
                number = numbers[key] = out.bucket(bucket)
            by_rig.setdefault(work.payload.rig, []).append((number, work.context_id, work.item["id"]))
        for rig, found in by_rig.items():
            found.sort()
            ids = [row[1] for row in found]
            items = [row[2] for row in found]
            out.rigs[rig] = _Rig(columns.Slots.of(ids) or ids, columns.Slots.of(items) or items,
                                 columns.stretches([row[0] for row in found]))
        return out

    def bucket(self, bucket: list) -> int:
        """The number of ``bucket`` (made when new)."""
        key = _text(bucket)
        if key not in self._index:
            self._index[key] = len(self.buckets)
            self.buckets.append(bucket)
        return self._index[key]

    def remove(self, rig: str, context_id: str) -> list | None:
        """Take ``context_id`` of ``rig``'s log out; its bucket, or None when it was not queued."""
        found = self.rigs.get(rig)
        where = found.find(context_id) if found is not None else None
        if where is None:
            return None
        bucket = found.stretches[where[1]][0]
        found.remove(*where)
        return self.buckets[bucket]

    def add(self, rig: str, context_id: str, item_id: str, bucket: list) -> None:
        number = self.bucket(bucket)
        self.rigs.setdefault(rig, _Rig([], [], [])).add(context_id, item_id, number)

    def has_item(self, item_id: str) -> bool:
        """Whether a queued context is for ``item_id`` (the queue keeps one per item)."""
        return any(item_id in found.items for found in self.rigs.values())

    def to_json(self) -> dict:
        return {"buckets": self.buckets,
                "rigs": {rig: {"ids": columns.strings(found.ids), "items": columns.strings(found.items),
                               "stretches": found.stretches}
                         for rig, found in self.rigs.items()}}

    @classmethod
    def from_json(cls, data: object) -> Queued | None:
        """The queue :meth:`to_json` wrote; None when it is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("buckets"), list) or \
                not isinstance(data.get("rigs"), dict):
            return None
        buckets = data["buckets"]
        rigs = {}
        for rig, kept in data["rigs"].items():
            if not isinstance(kept, dict):
                return None
            ids, items = columns.strings_back(kept.get("ids")), columns.strings_back(kept.get("items"))
            stretches = kept.get("stretches")
            if ids is None or items is None or len(items) != len(ids) or not _stretches(stretches, buckets) \
                    or sum(s[1] for s in stretches) != len(ids):
                return None
            rigs[rig] = _Rig(ids, items, stretches)
        return cls(buckets, rigs)


def _stretches(kept: object, buckets: list) -> bool:
    return isinstance(kept, list) and all(
        isinstance(s, list) and len(s) == 2 and columns.whole(s[0]) and 0 <= s[0] < len(buckets)
        and columns.whole(s[1]) and s[1] >= 1 for s in kept)


def ready_bucket(kind: tuple, shape: tuple) -> list:
    """The bucket of a ready work: its kind (what its score depends on) and its admission shape."""
    return [READY, list(kind), shape_row(shape)]


def shape_row(shape) -> list:
    """An admission shape as the chain keeps it (JSON): ``[rig, sorted labels, tokens, touches]``."""
    return [shape[0], sorted(shape[1]), shape[2], list(shape[3])]


def shape_of_row(row: list) -> tuple:
    """The shape :func:`shape_row` kept."""
    return (row[0], frozenset(row[1]), row[2], tuple(row[3]))


def _text(bucket: list) -> str:
    return json.dumps(bucket, separators=(",", ":"))


__all__ = ["BACKING_OFF", "BLOCKED", "READY", "Queued", "ready_bucket", "shape_of_row", "shape_row"]
