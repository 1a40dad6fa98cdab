"""Looking at and steering the queue: status, list, pause, resume, clear.

``list`` and ``status`` read the same survey the dispatch cycle acts on
(:mod:`sluice.scheduler.pending`), so what they show as ready is exactly what the next
cycle would consider, in the order it would launch it.  ``pause`` and
``resume`` only flip the state file (Gas Town R-J); ``clear`` closes contexts
and never touches a work item or the state (R-K); ``compact`` rewrites rigs'
ephemeral logs (:mod:`sluice.store.compaction`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sluice.core.clock import format_duration
from sluice.errors import ExecutorError
from sluice.executors import get_executor
from sluice.scheduler.admission import assess, why
from sluice.scheduler.dispatch import held_row
from sluice.scheduler.pending import survey
from sluice.scheduler.polecats import retry_due_at
from sluice.store import admission_state as kept
from sluice.store import contexts as ctxs
from sluice.store import events
from sluice.store.compaction import compact as compact_log
from sluice.store.compaction import line_count
from sluice.store.rigstore import Stores
from sluice.store.state import load_state, set_paused, set_resumed

if TYPE_CHECKING:
    from sluice.executors.base import Executor, Polecat
    from sluice.scheduler.ranking import Work
    from sluice.store.town import Town


def _fresh_config(town: Town):
    """Every control command reads the config first: a corrupt file is an error, never a default."""
    return town.reload_config()


def _active(
    town: Town, executor: Executor | None
) -> tuple[list[Polecat] | None, Executor | None, str | None]:
    try:
        if executor is None:
            executor = get_executor(town)
        return executor.active(), executor, None
    except ExecutorError as err:
        return None, executor, str(err)


def _row(work: Work, blocked: bool, retry: tuple[float, float]) -> dict:
    context = work.payload
    fields = context.fields
    return {
        "id": work.item["id"],
        "title": work.item.get("title", ""),
        "status": work.item.get("status", "open"),
        "target_rig": work.rig,
        "blocked": blocked,
        "context_id": context.id,
        "enqueued_at": fields.enqueued_at,
        "dispatch_failures": fields.dispatch_failures,
        "last_failure": fields.last_failure or None,
        "retry_at": retry_due_at(fields, *retry),  # when the daemon tries a failed launch again
        "score": work.score,
        "held": None,  # or why the context waits although its item may be ready (e.g. missing-item)
    }


def _held_row(held) -> dict:
    """A held context in the shape of a queue row: the item is missing, so only its id is known."""
    context = held.context
    fields = context.fields
    row = held_row(held)
    return {
        "id": context.work_id,
        "title": None,
        "status": None,
        "target_rig": fields.target_rig,
        "blocked": True,
        "held": held.reason,
        "missing_since": row["missing_since"],
        "closes_at": row["closes_at"],
        "context_id": context.id,
        "enqueued_at": fields.enqueued_at,
        "dispatch_failures": fields.dispatch_failures,
        "last_failure": fields.last_failure or None,
        "retry_at": None,
        "score": None,
    }


def queue_view(town: Town, executor: Executor | None = None, now: float | None = None):
    """One survey and its admission, exactly as the next cycle would see them.

    Returns ``(config, survey, active polecats, assessment)``; an unreachable
    executor counts as no polecats (``status`` reports the problem).
    """
    return _survey(town, executor, now)[:4]


def _survey(town: Town, executor: Executor | None, now: float | None = None):
    config = _fresh_config(town)
    now = time.time() if now is None else now
    active, executor, problem = _active(town, executor)
    stores = Stores(town)
    find = executor.find if executor is not None and problem is None else (lambda _cid: None)
    retry = (config.scheduler.seconds("retry_base"), config.scheduler.seconds("retry_max"))
    view = survey(town, stores, config.scheduler.max_dispatch_failures, active or [], find,
                  now=now, backoff=retry)
    assessment = assess(town, stores, view, active or [], config.scheduler.batch_size, now=now)
    return config, view, active or [], assessment, problem, active


def _queue(town: Town, executor: Executor | None):
    config, view, _active_list, assessment, problem, active = _survey(town, executor)
    retry = (config.scheduler.seconds("retry_base"), config.scheduler.seconds("retry_max"))
    codes = why(assessment, config)
    rows = [_row(w, False, retry) for w in view.ready + view.backing_off] + \
        [_row(w, True, retry) for w in view.blocked]
    rows += [_held_row(h) for h in view.held]
    for row in rows:
        row["why"] = [row["held"]] if row.get("held") else codes.get(row["context_id"], [])
    return config, view, rows, active, problem, assessment


def list_queue(town: Town, executor: Executor | None = None) -> list[dict]:
    """Queued items, one row per item: ready ones in dispatch order, then blocked ones, then held ones.

    A held row (``held: "missing-item"``) is a context whose item no rig has
    right now; it is closed only once ``closes_at`` has passed.
    """
    return _queue(town, executor)[2]


def status(town: Town, executor: Executor | None = None) -> dict:
    config, view, rows, active, problem, assessment = _queue(town, executor)
    state = load_state(town)
    sched = config.scheduler
    count = len(active) if active is not None else None
    out = {
        "paused": state.paused,
        "paused_by": state.paused_by,
        "paused_at": state.paused_at,
        "queued_total": len(rows),
        "queued_ready": sum(1 for r in rows if not r["blocked"]),
        "active_polecats": count,
        # Unknown when the executor cannot say how many polecats run: never claim free slots.
        "capacity": max(0, sched.max_polecats - count) if count is not None else None,
        "max_polecats": sched.max_polecats,
        "mode": "deferred" if sched.deferred else "direct",
        "batch_size": sched.batch_size,
        "last_dispatch_at": state.last_dispatch_at,
        "last_dispatch_count": state.last_dispatch_count,
        "stale": len(view.stale),
        "held": len(view.held),
        "items": rows,
        **_admission_status(town, config, assessment),
    }
    if problem:
        out["executor_error"] = problem
    return out


def _admission_status(town: Town, config, assessment) -> dict:
    """Budgets (spent / budget / window), throttles and broken items for ``scheduler status``."""
    window = format_duration(config.scheduler.seconds("budget_window"))
    caps = assessment.limits
    budgets = []
    if caps.town_budget:
        budgets.append({"rig": None, "spent": assessment.spend.town, "budget": caps.town_budget,
                        "window": window})
    for name, budget in sorted(caps.rig_budgets.items()):
        budgets.append({"rig": name, "spent": assessment.spend.rigs.get(name, 0), "budget": budget,
                        "window": window})
    return {"budgets": budgets, "throttles": kept.throttle_rows(town, assessment.now),
            "rig_caps": dict(sorted(caps.rig_caps.items())), "label_caps": dict(caps.label_caps),
            "circuit_broken": len(kept.broken(town)), "plan_reason": assessment.admission.reason}


def pause(town: Town, actor: str | None = None) -> dict:
    _fresh_config(town)
    state, changed = set_paused(town, actor)
    if changed:
        events.emit_event(town, events.PAUSED, {"by": state.paused_by})
    return {"paused": True, "paused_by": state.paused_by, "paused_at": state.paused_at, "changed": changed}


def resume(town: Town) -> dict:
    _fresh_config(town)
    _state, changed = set_resumed(town)
    if changed:
        events.emit_event(town, events.RESUMED, {})
    # The keys of `pause`, so a caller reads one shape: after a resume nobody has it paused.
    return {"paused": False, "paused_by": None, "paused_at": None, "changed": changed}


def clear(town: Town, item_id: str | None = None) -> dict:
    """Close every open context (``cleared``), or every one for ``item_id`` in every rig.

    An ``item_id`` that no rig has and no open context names is :class:`UnknownItem`
    (a typo must not read as "nothing to clear"); the contexts of an item that has
    gone missing are still cleared.
    """
    _fresh_config(town)
    stores = Stores(town)
    closed, failed = [], []
    by_rig: dict[str, list] = {}
    matched = 0
    for context in ctxs.open_contexts(stores, fresh=True):
        if item_id is None or context.work_id == item_id:
            matched += 1
            by_rig.setdefault(context.rig, []).append(context)
    if item_id is not None and not matched:
        stores.for_id(item_id)  # raises UnknownItem when no rig has it
    for rig_name, found in by_rig.items():
        try:  # one lock, one read and one append per rig, however many contexts
            wanted = [(c.id, ctxs.CLEARED, None) for c in found]
            done = set(ctxs.close_many(town, stores.rig(rig_name), wanted))
        except OSError as err:
            failed.extend({"context_id": c.id, "error": str(err)} for c in found)
            continue
        closed.extend({"context_id": c.id, "item_id": c.work_id, "rig": c.rig} for c in found if c.id in done)
    if closed:
        events.emit_event(town, events.CLEARED, {"item_id": item_id, "count": len(closed)})
    return {"item_id": item_id, "cleared": len(closed), "contexts": closed, "errors": failed}


def compact(town: Town, rig: str | None = None) -> dict:
    """Compact every rig's ephemeral log (or ``rig``'s), archiving contexts closed before the retention."""
    config = _fresh_config(town)
    stores = Stores(town)
    targets = [stores.rig(town.rig(rig).name)] if rig is not None else stores.all()
    retention = config.scheduler.seconds("compact_retention")
    rows = [compact_log(store, retention).to_json() for store in targets]
    return {"retention": config.scheduler.compact_retention, "rigs": rows}


def compact_if_long(town: Town) -> list[dict]:
    """The daemon's housekeeping: compact each rig whose log passed ``scheduler.compact_at`` lines."""
    sched = town.config.scheduler
    if sched.compact_at <= 0:
        return []
    retention = sched.seconds("compact_retention")
    return [compact_log(store, retention).to_json() for store in Stores(town).all()
            if line_count(store) > sched.compact_at]
