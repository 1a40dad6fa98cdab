"""The witness patrol: one rig's queue health, for a person or for cron.

A patrol reads the same survey the dispatcher acts on (:mod:`sluice.scheduler.queue.pending`)
and reports, for one rig, what is queued, what keeps failing, what the next
cycle would close, duplicates left by racing slings, contexts nobody can act
on, and the polecats running for the rig.  ``fix`` closes only the stale and
duplicate contexts — never an item, never a polecat — so a patrol from cron
is safe to run as often as you like.

* **stale**: the next dispatch cycle would close it (invalid JSON, circuit
  broken, item closed/tombstoned/hooked).
* **duplicates**: a younger open context for an item that already has one.
* **held**: an open context whose item no rig has right now (reason
  ``missing-item``); the cycle closes it only after ``scheduler.missing_grace``.
* **orphaned**: an open context that points at something the town no longer
  has: its item is in no registered rig, or its target rig is not
  registered.  The dispatch cycle closes these too, but a patrol only reports
  them — they usually mean a rig was removed or a store lost records, and a
  person should look before the evidence goes (`scheduler clear --item`
  when it is really gone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.errors import ExecutorUnavailable
from sluice.scheduler.launch.polecats import retry_due_at, retry_window
from sluice.scheduler.queue.pending import held_row, survey
from sluice.scheduler.session import Session
from sluice.store.database import contexts as ctxs
from sluice.store.database import events
from sluice.store.items.rigs import other_towns
from sluice.store.items.sources import source_stale

if TYPE_CHECKING:
    from sluice.executors.base import Executor
    from sluice.scheduler.queue.pending import Stale, Survey
    from sluice.scheduler.queue.ranking import Work
    from sluice.store.files.town import Town

ORPHAN_REASONS = frozenset({ctxs.INVALID_WORK_ITEM})
DUPLICATE = "duplicate"  # close reason for a younger context of an already queued item


def _context_row(context) -> dict:
    fields = context.fields
    return {
        "context_id": context.id,
        "item_id": context.work_id,
        "target_rig": fields.target_rig if fields else None,
        "enqueued_at": fields.enqueued_at if fields else None,
        "dispatch_failures": context.failures,
    }


def _queued_row(work: Work, blocked: bool) -> dict:
    context = work.payload
    return {
        "item_id": work.item["id"],
        "context_id": work.context_id,
        "title": work.item.get("title", ""),
        "blocked": blocked,
        "dispatch_failures": context.failures if context is not None else 0,
        "score": work.score,
    }


def _stale_row(stale: Stale) -> dict:
    return {**_context_row(stale.context), "reason": stale.reason, "detail": stale.detail}


def patrol(where: Town | Session, rig_name: str, fix: bool = False, executor: Executor | None = None) -> dict:
    """The patrol report for ``rig_name``; with ``fix``, close its stale and duplicate contexts."""
    session = Session.of(where, executor)
    town, stores = session.files, session.stores
    town.rig(rig_name)  # an unknown rig is an error, not an empty report
    sched = session.config.scheduler
    executor = session.require_executor()
    executor_error = None
    try:
        active = executor.active()
        find = executor.find
    except ExecutorUnavailable as err:
        active, find, executor_error = [], (lambda _cid: None), str(err)
    view = survey(town, stores, sched.max_dispatch_failures, active, find)
    rigs = {rig.name for rig in town.rigs()}
    retry = retry_window(sched)
    report = _report(rig_name, view, active, stores, rigs, retry)
    # The same keys on every run, so a cron job's JSON lines compare: `fixed` is [] without --fix,
    # `executor_error` null while the executor answers.
    report["executor_error"] = executor_error
    report["events_missing"] = events.missing(town)
    report["unreadable"] = view.unreadable.get(rig_name)  # this rig's file that cannot be read, or None
    report["source_stale"] = source_stale(town, town.rig(rig_name))
    report["other_towns"] = other_towns(town, town.rig(rig_name))  # they dispatch its items too
    report["fixed"] = _fix(town, stores, rig_name, view, rigs) if fix else []
    return report


def _orphaned(stale: Stale, rigs: set[str]) -> bool:
    fields = stale.context.fields
    if stale.reason in ORPHAN_REASONS:
        return True
    return stale.reason == ctxs.INVALID_CONTEXT and fields is not None and fields.target_rig not in rigs


def _report(rig_name: str, view: Survey, active, stores, rigs: set[str], retry: tuple[float, float]) -> dict:
    queued = [_queued_row(w, False) for w in view.ready if w.payload.rig == rig_name]
    queued += [_queued_row(w, False) for w in view.backing_off if w.payload.rig == rig_name]
    queued += [_queued_row(w, True) for w in view.blocked if w.payload.rig == rig_name]
    failing = []
    for work in [*view.ready, *view.backing_off, *view.blocked]:
        context = work.payload
        if context.rig == rig_name and context.failures > 0:
            failing.append({
                "context_id": context.id,
                "item_id": context.work_id,
                "dispatch_failures": context.failures,
                "last_failure": context.fields.last_failure or None,
                "last_failure_at": context.fields.last_failure_at or None,
                "retry_at": retry_due_at(context.fields, *retry),  # when the daemon tries it again
            })
    mine = [s for s in view.stale if s.context.rig == rig_name]
    stale = [_stale_row(s) for s in mine if not _orphaned(s, rigs)]
    orphaned = [_stale_row(s) for s in mine if _orphaned(s, rigs)]
    duplicates = [_context_row(c) for c in view.duplicates if c.rig == rig_name]
    held = [{**_context_row(h.context), **held_row(h)} for h in view.held if h.context.rig == rig_name]
    polecats = [{"id": p.id, "item_id": p.item_id, "context_id": p.context_id, "executor": p.executor,
                 "started_at": p.started_at, "state": p.state, "pid": p.pid}
                for p in active if p.rig == rig_name]
    counts = stores.rig(rig_name).merge_queue_counts()
    return {
        "rig": rig_name,
        "queued": queued,
        "ready": sum(1 for row in queued if not row["blocked"]),
        "blocked": sum(1 for row in queued if row["blocked"]),
        "failing": failing,
        "stale": stale,
        "duplicates": duplicates,
        "orphaned": orphaned,
        "held": held,
        "polecats": polecats,
        "merge_queue": {"queued": counts.get("open", 0), "running": counts.get("in_progress", 0)},
    }


def _fix(town: Town, stores, rig_name: str, view: Survey, rigs: set[str]) -> list[dict]:
    """Close this rig's stale contexts (with the cycle's reasons) and duplicates; nothing else."""
    store = stores.rig(rig_name)
    wanted: list[tuple[str, str, dict | None]] = [
        (stale.context.id, stale.reason, None) for stale in view.stale
        if stale.context.rig == rig_name and not _orphaned(stale, rigs)]
    wanted += [(c.id, DUPLICATE, None) for c in view.duplicates if c.rig == rig_name]
    done = set(ctxs.close_many(town, store, wanted))  # one lock, one read, one append
    closed = []
    for cid, reason, _extra in wanted:
        if cid in done:
            done.discard(cid)  # a context both stale and a duplicate is closed (and reported) once
            closed.append({"context_id": cid, "reason": reason})
    return closed
