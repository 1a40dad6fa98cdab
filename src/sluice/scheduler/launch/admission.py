"""Admission in the town: the survey and the runtime state fed to the pure rules.

:func:`sluice.core.admission.admit` decides; this module gathers what it
decides on — the ranked ready contexts of one :func:`~sluice.scheduler.queue.pending.survey`,
the running polecats with their items' rigs, labels and touches, the caps from
the config, the token spend in the budget window, the running throttles — and
turns the answer into reasons:

* :func:`assess` — one survey, one admission: used by ``scheduler run`` (and
  its dry run), ``list``, ``status``, ``explain``, the daemon and MCP;
* :func:`reasons_of` and :func:`why` — why a queued item waits
  (``explain`` and ``list --json``'s ``why``, for the rows shown);
* :func:`note_budget` — ``BudgetExhausted`` once per spell.

Running work is counted from its run record (labels, touches, rig frozen at
launch), never from the item file as it is now: an export cut short or an
item edited under a running polecat cannot open a cap or the overlap gate.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sluice.core import admission as rules
from sluice.core.admission import Admission, Applicant, Limits, Reason, Running
from sluice.core.items import labels_of, touches_of
from sluice.core.recordclass import field, recordclass
from sluice.scheduler.launch.polecats import retry_due_at, retry_window
from sluice.scheduler.queue.pending import item_store
from sluice.store.database import admission_state as kept
from sluice.store.database import events
from sluice.store.database.runs import running as running_runs
from sluice.store.database.state import load_state

if TYPE_CHECKING:
    from sluice.core.models import TownConfig
    from sluice.executors.base import Polecat
    from sluice.scheduler.launch.gates import Gates
    from sluice.scheduler.queue.pending import Survey
    from sluice.scheduler.queue.ranking import Work
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import Stores


def applicant(work: Work) -> Applicant:
    item = work.item
    item_id = item["id"]
    # Most items carry no labels and no metadata: those are read only where they are.
    labels = frozenset(labels_of(item)) if item.get("labels") else NO_LABELS
    touches = touches_of(item) if "metadata" in item else ()
    return Applicant(work.context_id or item_id, item_id, work.rig, work.tokens or 0, labels, touches, work)


NO_LABELS: frozenset[str] = frozenset()


def running(stores: Stores, active: list[Polecat]) -> list[Running]:
    """The running polecats with the labels and touches frozen in their run records.

    A polecat without a run record (launched before run records, or a tmux
    session nobody recorded) falls back to its item as it is now.
    """
    recorded = {r["polecat_id"]: r for r in running_runs(stores.town).values()} if active else {}
    out = []
    for polecat in active:
        run = recorded.get(polecat.id)
        if run is not None:
            out.append(Running(item_id=run["item_id"], rig=run.get("rig") or polecat.rig,
                               labels=frozenset(run.get("labels") or ()),
                               touches=tuple(run.get("touches") or ())))
            continue
        found = item_store(stores, polecat.item_id) if polecat.item_id else None
        record = found[1] if found else {}
        out.append(Running(item_id=polecat.item_id, rig=polecat.rig, labels=frozenset(labels_of(record)),
                           touches=touches_of(record)))
    return out


def limits(config: TownConfig, active: int, batch: int) -> Limits:
    sched = config.scheduler
    return Limits(
        capacity=max(0, sched.max_polecats - active),
        batch=batch,
        rig_caps={name: rig.max_polecats for name, rig in config.rigs.items() if rig.max_polecats},
        label_caps=dict(sched.label_caps),
        town_budget=sched.token_budget,
        rig_budgets={name: rig.token_budget for name, rig in config.rigs.items() if rig.token_budget},
    )


def needs_spend(config: TownConfig) -> bool:
    return config.scheduler.token_budget > 0 or any(r.token_budget for r in config.rigs.values())


@recordclass
class Assessment:
    """One survey and its admission: the answer every surface shows."""

    view: Survey
    admission: Admission
    limits: Limits
    spend: rules.Spend
    throttles: list[rules.Throttle]
    paused: bool
    deferred: bool
    now: float
    planned_keys: set[str] = field(default_factory=set)
    gates: Gates | None = None
    paused_by: str | None = None
    applicants: list[Applicant] = field(default_factory=list)  # view.ready as admission read it, in order


def assess(
    town: Town, stores: Stores, view: Survey, active: list[Polecat], batch: int, now: float | None = None,
    gates: Gates | None = None,
) -> Assessment:
    """Admit the survey's ranked ready contexts under the town's caps, budgets, throttles and gates.

    ``gates`` defaults to the hold file now and the last cycle's host reading
    (:func:`sluice.scheduler.launch.gates.current`); a real cycle passes a fresh one.
    """
    from sluice.scheduler.launch import gates as gate_view

    now = time.time() if now is None else now
    gates = gate_view.current(town) if gates is None else gates
    config = town.config
    window = config.scheduler.seconds("budget_window")
    spend = kept.spend(town, now, window) if needs_spend(config) else rules.Spend()
    throttles = kept.throttles(town, now)
    caps = limits(config, len(active), batch)
    applicants = [applicant(w) for w in view.ready]
    admission = rules.admit(applicants, running(stores, active), caps, spend=spend, throttles=throttles,
                            gates=gates.reasons, now=now)
    state = load_state(town)
    return Assessment(view, admission, caps, spend, throttles, state.paused, config.scheduler.deferred, now,
                      planned_keys={a.key for a in admission.to_dispatch}, gates=gates,
                      paused_by=state.paused_by, applicants=applicants)


def binding_of(assessment: Assessment) -> Reason | None:
    """The one limit that stops the next launch now (``scheduler status``'s ``binding``)."""
    from sluice.core.gates import binding

    if not assessment.deferred:
        return None
    keys = [w.context_id or w.item["id"] for w in assessment.view.ready]
    return binding(assessment.admission, keys, assessment.paused, assessment.paused_by)


def backoff_reason(work: Work, config: TownConfig) -> Reason:
    fields = work.payload.fields
    at = retry_due_at(fields, *retry_window(config.scheduler))
    return Reason(rules.BACKOFF, f"{_failures_text(fields)}; next attempt at {at}"
                                 " (`scheduler run --ignore-backoff` tries now)")


def _failures_text(fields) -> str:
    parts = [f"{fields.dispatch_failures} failed launch(es)" if fields.dispatch_failures else "",
             f"{fields.run_failures} failed run(s)" if fields.run_failures else ""]
    return " and ".join(part for part in parts if part) or "a failure"


def reasons_of(
    assessment: Assessment, work: Work, where: str, config: TownConfig, blockers: list[str] | None = None
) -> list[Reason]:
    """Every reason a queued item (in survey list ``where``) would not be launched by the next cycle."""
    out: list[Reason] = []
    if assessment.paused:
        out.append(Reason(rules.PAUSED, "the scheduler is paused (`sluice scheduler resume`)"))
    if not assessment.deferred:
        out.append(Reason(rules.DIRECT_MODE, "scheduler.max_polecats <= 0: sling launches directly,"
                                             " queued contexts are not dispatched"))
    if where == "blocked":
        out.append(Reason(rules.BLOCKED, "blocked by " + ", ".join(blockers) if blockers
                          else "not ready (blocked, deferred or running)"))
    elif where == "backoff":
        out.append(backoff_reason(work, config))
    elif assessment.deferred:  # in direct mode no cycle admits anything: the caps say nothing
        # A ready item's held reasons include the gates; the others' come from the gates themselves.
        out.extend(assessment.admission.held.get(work.context_id or work.item["id"], ()))
        return out
    out.extend(assessment.gates.reasons if assessment.gates is not None else ())
    return out


def why(assessment: Assessment, work: Work, where: str, config: TownConfig) -> list[str]:
    """The reason codes of one queued item in survey list ``where`` (empty: the next cycle launches it).

    Asked per row shown, not per item queued: a page of 50 rows of 100,000
    pays for 50.
    """
    if where == "ready" and assessment.deferred:  # reasons_of's codes: ``paused`` first, then admission's
        held = assessment.admission.held.get(work.context_id or work.item["id"], ())
        return list(dict.fromkeys([*([rules.PAUSED] if assessment.paused else []), *(r.code for r in held)]))
    return list(dict.fromkeys(r.code for r in reasons_of(assessment, work, where, config)))


def note_budget(town: Town, assessment: Assessment) -> bool:
    """After a real cycle: log ``BudgetExhausted`` when the budget starts holding work (once per spell)."""
    held = any(r.code == rules.BUDGET for reasons in assessment.admission.held.values() for r in reasons)
    started = kept.note_exhausted(town, held)
    if started:  # what is spent now, this cycle's launches included
        spend = kept.spend(town, time.time(), town.config.scheduler.seconds("budget_window"))
        events.emit_event(town, events.BUDGET_EXHAUSTED, {"spent": spend.town, "rigs": dict(spend.rigs)})
    return started


def cycle_summary(view: Survey, assessment: Assessment) -> dict:
    """What a dispatch cycle would report of this survey and admission, and whether it had anything to do.

    ``tidy``: nothing for the cycle to write before it plans (no stale or
    duplicate context to close, no missing item to mark or unmark).
    """
    plan = assessment.admission
    why: dict[str, int] = {}
    for reasons in plan.held.values():
        for code in dict.fromkeys(r.code for r in reasons):
            why[code] = why.get(code, 0) + 1
    if view.backing_off:
        why[rules.BACKOFF] = len(view.backing_off)
    return {"planned": len(plan.to_dispatch), "ready": len(view.ready), "backing_off": len(view.backing_off),
            "skipped": plan.skipped, "why": why, "reason": plan.reason,
            "tidy": not (view.stale or view.held or view.duplicates or view.reappeared)}
