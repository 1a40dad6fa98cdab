"""Run records: what each launch froze, read back for admission, history and the views.

* **At launch** (:func:`record_launch`, from the one launch path) a run record
  freezes what admission needs about running work — rig, labels, touches,
  token estimate — so caps never consult an item file that changed since.
* **Outcomes** (:func:`outcome_of`): ``ok`` (exit 0), ``throttled``
  (``scheduler.throttle_exit_code``), ``failed`` (another status), ``stopped``,
  ``timed-out`` (the stall timeout stopped it) or ``vanished`` (it ended with
  no recorded status: a lost node, a reboot).  Ends are recorded, and acted
  on, by :mod:`sluice.scheduler.ends`.

A launch that crash recovery settles as never started has no run record: only
:func:`record_launch` writes one, after the executor said the polecat runs,
and reconciliation (:func:`record_reconciled`) writes one for a polecat that
was found running.
"""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sluice.core.clock import iso, random_id
from sluice.core.items import effective_tokens, labels_of, parse_ts
from sluice.scheduler.admission import touches_of
from sluice.scheduler.pending import item_store
from sluice.store import runs as log

if TYPE_CHECKING:
    from sluice.core.records import SlingContextFields
    from sluice.executors.base import Polecat
    from sluice.store.rigstore import Stores
    from sluice.store.town import Town

LIVE_STATES = ("running", "pending")


def stamp(epoch: float) -> str:
    return iso(datetime.fromtimestamp(epoch, UTC))


def host_of(polecat: Polecat) -> str:
    """Where the polecat runs: this machine, or the Ray node once the cluster names it."""
    if polecat.executor == "ray":
        return str(polecat.detail.get("node_id") or polecat.detail.get("address") or "")
    return socket.gethostname()


# -- writing records --------------------------------------------------------------


def new_record(item: dict, rig: str, polecat: Polecat, *, started: float, tokens: int,
               attempt: int = 1) -> dict:
    return {
        "run_id": random_id(),
        "polecat_id": polecat.id,
        "item_id": item.get("id") or polecat.item_id,
        "rig": rig,
        "context_id": polecat.context_id or None,
        "executor": polecat.executor,
        "host": host_of(polecat),
        "started_at": stamp(started),
        "ended_at": None,
        "runtime_seconds": None,
        "exit_code": None,
        "outcome": log.RUNNING,
        "tokens_estimated": tokens,
        "tokens_used": None,
        "labels": sorted(labels_of(item)),
        "touches": list(touches_of(item)),
        "attempt": attempt,
    }


def record_launch(town: Town, item: dict, rig: str, polecat: Polecat, *, started: float, tokens: int,
                  fields: SlingContextFields | None = None) -> dict:
    """The run record of a launch that just succeeded, appended with outcome ``running``.

    ``attempt`` is 1 for the first run after a sling and one more for each retry of a failed run.
    """
    attempt = (fields.run_failures if fields is not None else 0) + 1
    record = new_record(item, rig, polecat, started=started, tokens=tokens, attempt=attempt)
    log.append(town, [record])
    return record


def record_reconciled(town: Town, stores: Stores, found: list[tuple]) -> list[dict]:
    """Run records for polecats an interrupted launch had started (none is written twice).

    A polecat the executor reports ``lost`` never started: crash recovery
    settles its launch, and it is not a run.
    """
    found = [(context, polecat) for context, polecat in found if polecat.state != "lost"]
    if not found:
        return []
    known = {r.get("polecat_id") for r in log.read_runs(town).values()}
    out = []
    for context, polecat in found:
        if polecat.id in known:
            continue
        hit = item_store(stores, context.work_id)
        item = hit[1] if hit else {"id": context.work_id}
        started = parse_ts(polecat.started_at) or time.time()
        out.append(new_record(item, context.rig, polecat, started=started, tokens=effective_tokens(item),
                              attempt=(context.fields.run_failures if context.fields else 0) + 1))
    log.append(town, out)
    return out


def running_records(town: Town) -> dict[str, dict]:
    """Runs still running, by polecat id."""
    return {r["polecat_id"]: r for r in log.read_runs(town).values() if r.get("outcome") == log.RUNNING}



# -- outcomes ---------------------------------------------------------------------------


def outcome_of(polecat: Polecat, throttle_code: int) -> tuple[str, int | None] | None:
    """(outcome, exit code) of an ended polecat; None while it runs."""
    if polecat.state in LIVE_STATES:
        return None
    code = polecat.detail.get("exit_code")
    if polecat.state == "stopped":
        return log.STOPPED, code
    if polecat.state == "lost":
        return log.VANISHED, code
    if code is None:
        # Ray reports a succeeded job without always naming the driver's status.
        if polecat.executor == "ray" and polecat.detail.get("status") == "SUCCEEDED":
            return log.OK, 0
        return log.VANISHED, None
    if code == 0:
        return log.OK, 0
    if code == throttle_code:
        return log.THROTTLED, code
    return log.FAILED, code


# -- reading --------------------------------------------------------------------------


def history(town: Town, *, item: str | None = None, rig: str | None = None, outcome: str | None = None,
            since: float | None = None, limit: int = 100, now: float | None = None) -> list[dict]:
    """Run records newest first, filtered; ``since`` in seconds (started or ended that recently)."""
    from sluice.errors import UsageError

    if outcome is not None and outcome not in log.OUTCOMES:
        raise UsageError(f"outcome {outcome!r} is not one of {', '.join(log.OUTCOMES)}",
                         parameters=("outcome",))
    if limit < 0:
        raise UsageError(f"limit must be >= 0 (got {limit})", parameters=("limit",))
    now = time.time() if now is None else now
    cutoff = now - since if since is not None else None
    rows = []
    for record in reversed(list(log.read_runs(town).values())):
        if item is not None and record.get("item_id") != item:
            continue
        if rig is not None and record.get("rig") != rig:
            continue
        if outcome is not None and record.get("outcome") != outcome:
            continue
        if cutoff is not None:
            last = parse_ts(record.get("ended_at")) or parse_ts(record.get("started_at")) or 0
            if last < cutoff and record.get("outcome") != log.RUNNING:
                continue
        rows.append(dict(record))
    rows.sort(key=lambda r: r.get("started_at") or "", reverse=True)
    return rows[:limit] if limit else rows


def latest_by_item(town: Town) -> dict[str, dict]:
    """Each item's latest run (by start)."""
    out: dict[str, dict] = {}
    for record in log.read_runs(town).values():
        item_id = record.get("item_id")
        prior = out.get(item_id)
        if prior is None or (record.get("started_at") or "") >= (prior.get("started_at") or ""):
            out[item_id] = record
    return out


def ended_ids(town: Town) -> dict[str, str]:
    """run id → outcome of every ended run (the daemon counts those it had not seen)."""
    return {rid: r["outcome"] for rid, r in log.read_runs(town).items() if r.get("outcome") != log.RUNNING}


def count_new(ended: dict[str, str], seen: set[str]) -> dict[str, int]:
    """Ended runs not in ``seen``, counted by outcome."""
    counts: dict[str, int] = {}
    for run_id, outcome in ended.items():
        if run_id not in seen:
            counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def counts_text(counts: dict[str, int]) -> str:
    """``3 ok, 1 failed`` in the order of the outcomes."""
    return ", ".join(f"{counts[o]} {o}" for o in log.ENDED if counts.get(o))
