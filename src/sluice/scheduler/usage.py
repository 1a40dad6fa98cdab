"""Reported usage: a polecat (or its wrapper) says how many tokens a launch really used.

The budget ledger (:mod:`sluice.store.admission_state`) books each launch at
its estimate; ``polecat usage`` replaces the estimate, also for a polecat the
executor has reaped already.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.errors import UnknownPolecat, UsageError
from sluice.executors import get_executor
from sluice.scheduler.polecats import resolve
from sluice.store import admission_state as kept

if TYPE_CHECKING:
    from sluice.executors.base import Executor
    from sluice.store.town import Town


def report_usage(town: Town, ref: str, tokens: int, executor: Executor | None = None) -> dict:
    """``polecat usage ITEM|ID --tokens N``: replace the launch's estimate with what was really used."""
    town.reload_config()
    if tokens < 0:
        raise UsageError(f"tokens must be >= 0 (got {tokens})", parameters=("tokens",))
    try:
        polecat_id = resolve(executor or get_executor(town), ref)[0].id
    except UnknownPolecat:  # reaped already: the budget ledger still knows its launch
        polecat_id = None
    entry = kept.report_usage(town, polecat_id or ref, tokens, item_id=None if polecat_id else ref)
    if entry is None and polecat_id is None:
        raise UnknownPolecat(f"no polecat with id or item id {ref!r} (see `sluice polecat list`)")
    return {
        "polecat_id": entry["polecat_id"] if entry else polecat_id,
        "item_id": entry["item_id"] if entry else None,
        "tokens": tokens,
        "counted": entry is not None,
    }
