"""Reported usage: a polecat (or its wrapper) says how many tokens a launch really used.

The budget ledger (:mod:`sluice.store.database.admission_state`) books each launch at
its estimate; ``polecat usage`` replaces the estimate, also for a polecat the
executor has reaped already, and sets ``tokens_used`` on the run's record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.errors import UnknownPolecat, UsageError
from sluice.scheduler.launch.polecats import resolve
from sluice.scheduler.session import Session
from sluice.store.database import admission_state as kept
from sluice.store.database import runs as runlog

if TYPE_CHECKING:
    from sluice.executors.base import Executor
    from sluice.store.files.town import Town


def report_usage(where: Town | Session, ref: str, tokens: int, executor: Executor | None = None) -> dict:
    """``polecat usage ITEM|ID --tokens N``: replace the launch's estimate with what was really used."""
    session = Session.of(where, executor)
    town = session.files
    if tokens < 0:
        raise UsageError(f"tokens must be >= 0 (got {tokens})", parameters=("tokens",))
    try:
        polecat_id = resolve(session.require_executor(), ref)[0].id
    except UnknownPolecat:  # reaped already: the budget ledger still knows its launch
        polecat_id = None
    entry = kept.report_usage(town, polecat_id or ref, tokens, item_id=None if polecat_id else ref)
    run = _latest_run_of(town, polecat_id, ref)
    if run is not None:  # the run record keeps what was used, whether or not the window still counts it
        runlog.update(town, run["run_id"], {"tokens_used": tokens})
    if entry is None and polecat_id is None and run is None:
        raise UnknownPolecat(f"no polecat with id or item id {ref!r} (see `sluice polecat list`)")
    return {
        "polecat_id": entry["polecat_id"] if entry else polecat_id or (run or {}).get("polecat_id"),
        "item_id": entry["item_id"] if entry else (run or {}).get("item_id"),
        "tokens": tokens,
        "counted": entry is not None,
        "run_id": run["run_id"] if run else None,
    }


def _latest_run_of(town: Town, polecat_id: str | None, ref: str) -> dict | None:
    """The run of polecat ``polecat_id``, else the newest run of polecat or item ``ref``."""
    found = [runlog.latest(town, polecat=p) for p in dict.fromkeys((polecat_id, ref)) if p is not None]
    if polecat_id is None:
        found.append(runlog.latest(town, item=ref))
    found = [run for run in found if run is not None]
    return max(found, key=lambda run: run.get("started_at") or "") if found else None
