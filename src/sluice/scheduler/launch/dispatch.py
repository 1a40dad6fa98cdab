"""The dispatch cycle: launch queued work within the polecat cap (Gas Town shape).

One cycle, in order (Gas Town's R-E, see docs/architecture.md):

1. try-lock ``runtime/dispatch.lock`` — busy: a manual run fails with
   ``dispatch already in progress``, a daemon tick returns quietly;
2. paused ⇒ skip with ``reason: paused`` (a dry run still previews and says
   ``paused: true``, its ``reason`` being the plan's);
3. direct mode (``max_polecats <= 0``) ⇒ nothing to do, with a warning when
   contexts are still open from an earlier deferred mode;
4. clean stale contexts and reconcile interrupted launches
   (:mod:`sluice.scheduler.queue.pending` says which); a context whose item is missing is
   *held* (``missing-item``, with ``missing_since`` recorded once) and closed
   only after ``scheduler.missing_grace``;
5. capacity = ``max(0, max_polecats − active polecats)``; pending = ready
   contexts, one per item, ranked by :func:`sluice.scheduler.queue.ranking.rank_work`
   from a survey of the queue (a query of the town database);
6. :func:`sluice.core.admission.admit` (town cap, batch, rig and label caps,
   token budgets, throttles, overlap), then for each planned context: record
   the launch intent, launch, close it ``dispatched`` (3 tries) and log the
   decision — or count the failure and trip the breaker at the threshold;
   ``spawn_delay`` between successful launches; a pause issued meanwhile
   stops further launches, and ends a delay as soon as it is seen.  With no
   delay, the launches are begun one after another (intent, charge, the
   executor's start) and then finished in plan order (the executor's answer,
   the records, the close), so the local executor's watchers start side by
   side rather than each waiting for the one before;
7. after each launch (or each batch of launches begun together), record
   ``last_dispatch_at/count`` (this cycle's launches so far) in the state,
   re-read fresh under its lock.

Crash safety: because the intent is on the context before the executor is
asked, a cycle killed at any point leaves either no intent (nothing was
launched) or an intent the next cycle checks against the executor's records,
so no item is ever launched twice by the scheduler.

A dry run reads only: no lock, no cleanup, no events, no decisions.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from sluice.core import admission as rules
from sluice.core.clock import iso
from sluice.core.items import parse_ts
from sluice.core.recordclass import replace
from sluice.errors import ConfigError, DispatchBusy, LockBusy, NotAdmitted, SluiceError, UsageError
from sluice.scheduler.launch import admission, ends, runs
from sluice.scheduler.launch import gates as gate_view
from sluice.scheduler.launch.breaker import requeue_due, trip_breaker
from sluice.scheduler.launch.launching import CycleReport, Launcher, Started, command_template
from sluice.scheduler.launch.polecats import retry_window
from sluice.scheduler.queue.head import read_head
from sluice.scheduler.queue.pending import MISSING_ITEM, RIG_UNREADABLE, held_row, survey
from sluice.scheduler.session import Session
from sluice.store.database import contexts as ctxs
from sluice.store.database.state import load_state, record_dispatch
from sluice.store.files import fsutil

if TYPE_CHECKING:
    from sluice.executors.base import Executor
    from sluice.scheduler.queue.pending import Survey
    from sluice.scheduler.queue.ranking import Work
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import Stores

__all__ = ["CycleReport", "run_cycle"]


def run_cycle(
    where: Town | Session,
    batch: int | None = None,
    dry_run: bool = False,
    executor: Executor | None = None,
    daemon: bool | None = None,
    sleep: Callable[[float], None] = time.sleep,
    ignore_backoff: bool = False,
    item: str | None = None,
) -> CycleReport:
    """Run (or, with ``dry_run``, preview) one dispatch cycle.

    A context whose last launch failed waits out its retry backoff in every
    cycle, manual or daemon; ``ignore_backoff`` tries it at once.  With
    ``item`` the cycle launches that item only, ahead of the queue, if every
    cap, budget and gate lets it; otherwise it raises
    :class:`~sluice.errors.NotAdmitted` with the reasons.

    The cycle judges at its session's ``now``; each launch takes the clock
    afresh (its run starts with its polecat, after any ``spawn_delay``).
    """
    session = Session.of(where, executor)
    town, config = session.files, session.config
    daemon = os.environ.get("SLUICE_DAEMON") == "1" if daemon is None else daemon
    if batch is not None and batch < 1:
        raise UsageError(f"batch must be >= 1 (got {batch})", parameters=("batch",))
    report = CycleReport(dry_run=dry_run, batch=batch or config.scheduler.batch_size)
    if dry_run:
        return _cycle(session, report, daemon, sleep, ignore_backoff, item)
    lock = fsutil.file_lock(town.lock_path("dispatch"), timeout=0)
    try:
        lock.acquire()
    except LockBusy:
        if daemon:
            report.reason = "busy"
            return report
        raise DispatchBusy("dispatch already in progress") from None
    try:
        return _cycle(session, report, daemon, sleep, ignore_backoff, item)
    finally:
        lock.release()


def _cycle(session: Session, report: CycleReport, daemon: bool, sleep,
           ignore_backoff: bool, item: str | None = None) -> CycleReport:
    town, config, stores = session.files, session.config, session.stores
    sched = config.scheduler
    report.mode = "deferred" if sched.deferred else "direct"
    state = load_state(town)
    if item is not None and (state.paused or not sched.deferred):
        raise NotAdmitted(item, [r for r in _explained(session, item)
                                 if r.code in (rules.PAUSED, rules.DIRECT_MODE)])
    if state.paused:
        report.paused = True
        report.reason = "paused"
        if not report.dry_run:
            by = state.paused_by or "unknown"
            report.messages.append(f"scheduler is paused (by {by}), skipping dispatch")
            return report
        report.messages.append("scheduler is paused; this is what a cycle would do after resume")
    if not sched.deferred:
        report.reason = "direct"
        if not report.dry_run and not daemon:
            left = sum(1 for c in ctxs.open_contexts(town) if c.valid)
            if left:
                report.messages.append(
                    f"{left} sling context(s) still open from an earlier deferred mode;"
                    " close them with `sluice scheduler clear`, or re-enable deferred dispatch with"
                    " `sluice config set scheduler.max_polecats N`"
                )
        return report

    executor = session.require_executor()
    try:
        template = command_template(town, executor)
    except ConfigError as err:
        if not report.dry_run:
            raise
        template = ()
        report.messages.append(f"warning: {err}")
    now = session.now
    if not report.dry_run:
        # Ended runs are recorded and acted on (a throttle exit, a retry of a failed run), and broken
        # items whose cooldown ended are queued again, before the survey, so this very cycle sees them.
        for record in ends.settle(town, executor, stores, now):
            report.ended.append({k: record.get(k) for k in ("run_id", "item_id", "outcome", "exit_code")})
            if record.get("requeued"):
                report.requeued.append(record["requeued"])
        report.requeued += requeue_due(town, stores, now)
    gates = gate_view.current(town, fresh=not report.dry_run)
    active = session.require_active()
    report.capacity = max(0, sched.max_polecats - len(active))
    planned, assessment = _surveyed(session, report, active, gates, now, ignore_backoff, item)
    if report.dry_run:
        return report

    launcher = Launcher(session, template, sched.max_dispatch_failures, report, sleep)
    launched: list[str] = []
    delay = sched.seconds("spawn_delay")
    waiting: list[Started] = []  # launches begun whose polecats are not known yet, in plan order

    def finish_waiting() -> None:
        batch, before = waiting[:], report.dispatched
        waiting.clear()
        if not batch:
            return
        try:
            outcomes = launcher.finish_many(batch)
        except BaseException:
            if report.dispatched > before:  # what was booked before the error stays recorded
                with contextlib.suppress(OSError, SluiceError):
                    record_dispatch(town, report.dispatched)
            raise
        if report.dispatched > before:  # once per batch booked: a cycle killed later still has them
            record_dispatch(town, report.dispatched)
        launched.extend(s.work.context_id for s, made in zip(batch, outcomes, strict=True) if made)

    try:
        for position, work in enumerate(planned):
            if position and load_state(town).paused:
                left = len(planned) - position
                report.paused = True
                report.skipped += left
                report.messages.append(f"paused during the cycle; {left} planned item(s) left queued")
                break
            if position and _gated(town, report, len(planned) - position):
                break
            started = launcher.start(work)
            if started is None:
                continue
            waiting.append(started)
            if delay > 0 or started.alone or len(waiting) >= OVERLAP:  # (a delay after each one made)
                made = len(launched)
                finish_waiting()
                if delay > 0 and len(launched) > made and position < len(planned) - 1:
                    _spawn_delay(town, delay, sleep)
    except BaseException as stop:  # the launches begun are booked whatever stopped the loop: they may run
        try:
            finish_waiting()
        except BaseException as also:
            raise stop from also  # what stopped the loop is what the cycle reports
        raise
    finish_waiting()
    try:  # after the launches, so the event counts what they spent
        admission.note_budget(town, assessment)
    except OSError as err:  # the launches are made: a refused note is a warning, not a failed cycle
        report.messages.append(f"warning: the budget's exhausted flag was not written: {err}")
    return report


def _surveyed(session: Session, report: CycleReport, active, gates, now: float, ignore_backoff: bool,
              item: str | None):
    """The survey path of a cycle: survey, tidy, admit and report; returns (planned works, assessment)."""
    town, config, stores = session.files, session.config, session.stores
    sched = config.scheduler
    backoff = None if ignore_backoff else retry_window(sched)
    find = session.require_executor().find
    head = None
    if item is None and backoff is not None:
        # A long queue's head, read without surveying all of it (None: survey).
        head = read_head(session, 0, gates=gates, batch=report.batch, fill=not report.dry_run)
    if head is not None:
        view, assessment = head.view, head.assessment
    else:
        view = survey(town, stores, sched.max_dispatch_failures, active, find, now=now, backoff=backoff)
    if not report.dry_run:
        _clean(town, stores, view, report)
    report.held = [held_row(h) for h in view.held]
    report.messages += [f"rig {name!r} is held (rig-unreadable): {detail}"
                        for name, detail in view.unreadable.items()]
    if item is not None:
        view = _only(session, item, view)
    if head is None:
        assessment = admission.assess(town, stores, view, active, report.batch, now=now, gates=gates)
    if item is not None and not assessment.admission.to_dispatch:
        [work] = view.ready
        raise NotAdmitted(item, admission.reasons_of(assessment, work, "ready", config))
    plan = assessment.admission
    summary = admission.cycle_summary(view, assessment)
    if head is not None:  # the whole queue's figures, not the head's
        summary.update(ready=head.ready_total, skipped=head.tally.skipped, reason=head.tally.reason,
                       why={**head.tally.why, **({rules.BACKOFF: len(view.backing_off)} if view.backing_off
                                                 else {})})
    report.ready, report.backing_off = summary["ready"], summary["backing_off"]
    report.skipped, report.reason = summary["skipped"], summary["reason"]
    report.why.update(summary["why"])
    for held in view.held:
        code = rules.RIG_UNREADABLE if held.reason == RIG_UNREADABLE else rules.MISSING_ITEM
        report.why[code] = report.why.get(code, 0) + 1
    # A dry run while paused previews the cycle after resume, so its reason is the plan's; `paused`
    # stays true.  `reason: paused` means exactly "the cycle skipped planning".
    planned = [a.payload for a in plan.to_dispatch]
    report.planned = [_planned_row(w) for w in planned]
    return planned, assessment


#: Launches begun before the cycle waits for their answers: each holds a pipe and a starting watcher.
OVERLAP = 32

#: How often a cycle waiting out ``spawn_delay`` looks for a pause (seconds).
PAUSE_POLL = 0.25


def _spawn_delay(town: Town, seconds: float, sleep: Callable[[float], None]) -> None:
    """Wait ``seconds`` between two launches, or less when the town is paused meanwhile.

    An operator who pauses during a long delay means "launch nothing more":
    the cycle need not sit out the rest of the delay before saying so.
    """
    left = seconds
    while left > 0:
        step = min(PAUSE_POLL, left)
        sleep(step)
        left -= step
        if left > 0 and load_state(town).paused:
            return


def _only(session: Session, item: str, view: Survey) -> Survey:
    """The survey cut to ``item``'s ready context (``run --item``), or NotAdmitted with explain's reasons."""
    work = next((w for w in view.ready if w.item["id"] == item), None)
    if work is None:
        raise NotAdmitted(item, _explained(session, item))
    return replace(view, ready=[work], blocked=[], backing_off=[])


def _explained(session: Session, item: str) -> list[rules.Reason]:
    from sluice.scheduler.queue.views import explain

    return [rules.Reason(r["code"], r["detail"]) for r in explain(session, item)["reasons"]]


def _gated(town: Town, report: CycleReport, left: int) -> bool:
    """A hold file or the host guard that closed while this cycle launched: the rest stay queued."""
    reasons = gate_view.current(town, fresh=True).reasons
    if not reasons:
        return False
    report.skipped += left
    for reason in reasons:
        report.why[reason.code] = report.why.get(reason.code, 0) + left
    report.messages.append(f"{reasons[0].code} during the cycle ({reasons[0].detail});"
                           f" {left} planned item(s) left queued")
    return True


def _planned_row(work: Work) -> dict:
    return {"item_id": work.item["id"], "context_id": work.context_id, "rig": work.rig,
            "title": work.item.get("title", ""), "score": work.score}


def _clean(town: Town, stores: Stores, view, report: CycleReport) -> None:
    """Close stale contexts, settle interrupted launches, drop intents whose launch never happened.

    Also keeps the missing-item clock: a held context gets ``missing_since``
    (the first time only), a context whose item came back loses it.
    Each kind of write is grouped by rig: one lock, one read and one append per rig.
    """
    stamp = iso()
    unmarked = _by_rig((h.context.rig, h) for h in view.held if h.since is None and h.reason == MISSING_ITEM)
    grace = town.config.scheduler.seconds("missing_grace")
    for rig_name, group in unmarked.items():
        marked = ctxs.mark_missing(stores.rig(rig_name), [h.context.id for h in group], stamp)
        for held in group:
            updated = marked.get(held.context.id)
            if updated is not None and updated.fields is not None:
                held.since = updated.fields.missing_since
                since = parse_ts(held.since)
                held.closes_at = since + grace if since is not None else None
    for rig_name, ids in _by_rig((c.rig, c.id) for c in view.reappeared).items():
        ctxs.clear_missing(stores.rig(rig_name), ids)
    closes = _by_rig((s.context.rig, (s.context.id, s.reason, {"detail": s.detail})) for s in view.stale)
    for context, polecat in view.launched:
        closes.setdefault(context.rig, []).append(
            (context.id, ctxs.DISPATCHED, {"polecat_id": polecat.id, "reconciled": True}))
    rows = {s.context.id: {"context_id": s.context.id, "item_id": s.context.work_id, "rig": s.context.rig,
                           "reason": s.reason} for s in view.stale}
    rows.update({c.id: {"context_id": c.id, "item_id": c.work_id, "rig": c.rig, "reason": ctxs.DISPATCHED,
                        "polecat_id": p.id} for c, p in view.launched})
    runs.record_reconciled(town, stores, view.launched)  # before the close: a crash here repeats only this
    closed: set[str] = set()
    for rig_name, batch in closes.items():
        closed.update(ctxs.close_many(town, stores.rig(rig_name), batch))
    for stale in view.stale:
        context = stale.context
        if context.id in closed and stale.reason == ctxs.CIRCUIT_BROKEN and context.fields is not None:
            trip_breaker(town, context.fields, context.fields.last_failure)
    for context_id, row in rows.items():
        if context_id not in closed:
            continue
        report.closed.append(row)
        if "polecat_id" in row:
            report.messages.append(f"{row['item_id']}: an interrupted launch had started polecat"
                                   f" {row['polecat_id']}; context closed")
    for rig_name, ids in _by_rig((c.rig, c.id) for c in view.relaunch).items():
        ctxs.clear_launch(stores.rig(rig_name), ids)


def _by_rig(pairs: Iterable[tuple[str, Any]]) -> dict[str, list]:
    """(rig, value) pairs as each rig's values, in order: each kind of write is one per rig."""
    out: dict[str, list] = {}
    for rig_name, value in pairs:
        out.setdefault(rig_name, []).append(value)
    return out
