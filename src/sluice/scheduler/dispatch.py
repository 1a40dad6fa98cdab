"""The dispatch cycle: launch queued work within the polecat cap (Gas Town shape).

One cycle, in order (Gas Town's R-E, see docs/architecture.md):

1. try-lock ``runtime/dispatch.lock`` — busy: a manual run fails with
   ``dispatch already in progress``, a daemon tick returns quietly;
2. paused ⇒ skip with ``reason: paused`` (a dry run still previews and says
   ``paused: true``, its ``reason`` being the plan's);
3. direct mode (``max_polecats <= 0``) ⇒ nothing to do, with a warning when
   contexts are still open from an earlier deferred mode;
4. clean stale contexts and reconcile interrupted launches
   (:mod:`sluice.scheduler.pending` says which); a context whose item is missing is
   *held* (``missing-item``, with ``missing_since`` recorded once) and closed
   only after ``scheduler.missing_grace``;
5. capacity = ``max(0, max_polecats − active polecats)``; pending = ready
   contexts, one per item, ranked by :func:`sluice.scheduler.ranking.rank_work`;
6. :func:`sluice.core.admission.admit` (town cap, batch, rig and label caps,
   token budgets, throttles, overlap), then for each planned context: record
   the launch intent, launch, close it ``dispatched`` (3 tries) and log the
   decision — or count the failure and trip the breaker at the threshold;
   ``spawn_delay`` between successful launches; a pause issued meanwhile
   stops further launches;
7. after each launch, record ``last_dispatch_at/count`` (this cycle's launches
   so far) in the state, re-read fresh under its lock.

Crash safety: because the intent is on the context before the executor is
asked, a cycle killed at any point leaves either no intent (nothing was
launched) or an intent the next cycle checks against the executor's records,
so no item is ever launched twice by the scheduler.

A dry run reads only: no lock, no cleanup, no events, no decisions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sluice.core import admission as rules
from sluice.core.clock import iso
from sluice.core.items import effective_tokens, parse_ts
from sluice.errors import (
    ConfigError,
    DispatchBusy,
    ExecutorError,
    ExecutorUnavailable,
    LockBusy,
    SluiceError,
    UsageError,
)
from sluice.executors import get_executor
from sluice.executors.base import LaunchRequest, substitute
from sluice.scheduler import admission
from sluice.scheduler.pending import survey
from sluice.scheduler.signals import Graphs
from sluice.store import admission_state as kept
from sluice.store import contexts as ctxs
from sluice.store import events, fsutil
from sluice.store.decisions import append_decisions, make_decision
from sluice.store.rigstore import Stores
from sluice.store.state import load_state, record_dispatch

if TYPE_CHECKING:
    from sluice.core.records import SlingContextFields
    from sluice.executors.base import Executor
    from sluice.scheduler.ranking import Work
    from sluice.store.town import Town

CLOSE_RETRY_WAITS = (0.5, 1.0)  # three attempts to close a dispatched context


@dataclass
class CycleReport:
    """What one cycle planned and did; ``to_json`` is the ``scheduler run --json`` document."""

    planned: list[dict] = field(default_factory=list)
    dispatched: int = 0
    failed: int = 0
    skipped: int = 0
    reason: str = "none"
    capacity: int = 0
    batch: int = 0
    ready: int = 0
    dry_run: bool = False
    paused: bool = False
    mode: str = "deferred"
    launched: list[dict] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    closed: list[dict] = field(default_factory=list)
    backing_off: int = 0
    held: list[dict] = field(default_factory=list)
    why: dict[str, int] = field(default_factory=dict)  # reason code -> queued items it holds back
    requeued: list[dict] = field(default_factory=list)  # breaker cooldowns and throttle exits
    messages: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def daemon_mode() -> bool:
    return os.environ.get("SLUICE_DAEMON") == "1"


def command_template(town: Town, executor: Executor) -> tuple[str, ...]:
    """The polecat argv template: ``executor.command``, else the executor's own default."""
    command = tuple(town.config.executor.command) or getattr(executor, "default_command", None) or ()
    if not command and executor.kind == "local":
        raise ConfigError(
            "executor.command is not set, so no polecat can be launched; set it with"
            ' `sluice config set executor.command \'["my-agent", "{item_id}"]\'`'
            " (or use executor.kind demo)"
        )
    return tuple(command)


def make_request(
    town: Town, template: tuple[str, ...], item: dict, rig_name: str, context_id: str, fields=None
) -> LaunchRequest:
    """The launch of one polecat: argv substituted per element, context parameters in the env.

    ``formula``, ``args``, ``vars`` and ``agent`` of the sling reach the polecat as
    ``SLUICE_FORMULA`` … ``SLUICE_AGENT`` (only those that are set).
    """
    rig = town.rig(rig_name)
    title = str(item.get("title") or "")
    values = {"item_id": item["id"], "rig": rig.name, "title": title, "context_id": context_id,
              "repo": str(rig.repo)}
    env: dict[str, str] = {}
    for key in ("formula", "args", "vars", "agent"):
        value = getattr(fields, key, "") if fields is not None else ""
        if value:
            env[f"SLUICE_{key.upper()}"] = value
    return LaunchRequest(
        item_id=item["id"], rig=rig.name, title=title, context_id=context_id, repo=str(rig.repo),
        town=str(town.root), argv=substitute(list(template), values), env=env,
    )


def run_cycle(
    town: Town,
    batch: int | None = None,
    dry_run: bool = False,
    executor: Executor | None = None,
    daemon: bool | None = None,
    sleep: Callable[[float], None] = time.sleep,
    ignore_backoff: bool = False,
) -> CycleReport:
    """Run (or, with ``dry_run``, preview) one dispatch cycle.

    A context whose last launch failed waits out its retry backoff in every
    cycle, manual or daemon; ``ignore_backoff`` tries it at once.
    """
    config = town.reload_config()
    daemon = daemon_mode() if daemon is None else daemon
    if batch is not None and batch < 1:
        raise UsageError(f"batch must be >= 1 (got {batch})", parameters=("batch",))
    report = CycleReport(dry_run=dry_run, batch=batch or config.scheduler.batch_size)
    if dry_run:
        return _cycle(town, report, executor, daemon, sleep, ignore_backoff)
    lock = fsutil.file_lock(town.lock_path("dispatch"), timeout=0)
    try:
        lock.acquire()
    except LockBusy:
        if daemon:
            report.reason = "busy"
            return report
        raise DispatchBusy("dispatch already in progress") from None
    try:
        return _cycle(town, report, executor, daemon, sleep, ignore_backoff)
    finally:
        lock.release()


def _cycle(town: Town, report: CycleReport, executor, daemon: bool, sleep,
           ignore_backoff: bool) -> CycleReport:
    config = town.config
    sched = config.scheduler
    report.mode = "deferred" if sched.deferred else "direct"
    state = load_state(town)
    if state.paused:
        report.paused = True
        report.reason = "paused"
        if not report.dry_run:
            by = state.paused_by or "unknown"
            report.messages.append(f"scheduler is paused (by {by}), skipping dispatch")
            return report
        report.messages.append("scheduler is paused; this is what a cycle would do after resume")
    stores = Stores(town)
    if not sched.deferred:
        report.reason = "direct"
        if not report.dry_run and not daemon:
            left = sum(1 for c in ctxs.open_contexts(stores) if c.valid)
            if left:
                report.messages.append(
                    f"{left} sling context(s) still open from an earlier deferred mode;"
                    " close them with `sluice scheduler clear`, or re-enable deferred dispatch with"
                    " `sluice config set scheduler.max_polecats N`"
                )
        return report

    executor = executor or get_executor(town)
    try:
        template = command_template(town, executor)
    except ConfigError as err:
        if not report.dry_run:
            raise
        template = ()
        report.messages.append(f"warning: {err}")
    now = time.time()
    if not report.dry_run:
        # Polecats that asked for a throttle (exit code) and broken items whose cooldown ended
        # are queued again before the survey, so this very cycle sees them.
        listing = getattr(executor, "listing", None)  # only executors that keep finished records
        if listing is not None:
            report.requeued += admission.settle_exits(town, stores, listing(), now)
        report.requeued += admission.requeue_due(town, stores, now)
    active = executor.active()
    backoff = None if ignore_backoff else (sched.seconds("retry_base"), sched.seconds("retry_max"))
    view = survey(town, stores, sched.max_dispatch_failures, active, executor.find, now=now, backoff=backoff)
    if not report.dry_run:
        _clean(town, stores, view, report)
    report.held = [held_row(h) for h in view.held]
    report.capacity = max(0, sched.max_polecats - len(active))
    assessment = admission.assess(town, stores, view, active, report.batch, now=now)
    plan = assessment.admission
    report.ready = len(view.ready)
    report.backing_off = len(view.backing_off)
    report.skipped = plan.skipped
    for reasons in plan.held.values():
        for code in dict.fromkeys(r.code for r in reasons):
            report.why[code] = report.why.get(code, 0) + 1
    if view.backing_off:
        report.why[rules.BACKOFF] = len(view.backing_off)
    if view.held:
        report.why[rules.MISSING_ITEM] = len(view.held)
    # A dry run while paused previews the cycle after resume, so its reason is the plan's; `paused`
    # stays true.  `reason: paused` means exactly "the cycle skipped planning".
    report.reason = plan.reason
    planned = [a.payload for a in plan.to_dispatch]
    report.planned = [_planned_row(w) for w in planned]
    if report.dry_run:
        return report

    launcher = Launcher(town, stores, executor, template, sched.max_dispatch_failures, report, sleep)
    for position, work in enumerate(planned):
        if position and load_state(town).paused:
            left = len(planned) - position
            report.paused = True
            report.skipped += left
            report.messages.append(f"paused during the cycle; {left} planned item(s) left queued")
            break
        if not launcher.launch(work):
            continue
        record_dispatch(town, report.dispatched)  # at once: a cycle killed later still leaves it recorded
        if sched.seconds("spawn_delay") > 0 and position < len(planned) - 1:
            sleep(sched.seconds("spawn_delay"))
    admission.note_budget(town, assessment)  # after the launches, so the event counts what they spent
    return report


def _planned_row(work: Work) -> dict:
    return {"item_id": work.item["id"], "context_id": work.context_id, "rig": work.rig,
            "title": work.item.get("title", ""), "score": work.score}


def held_row(held) -> dict:
    """One held context as the cycle, ``scheduler list`` and patrol report it."""
    context = held.context
    closes_at = iso(datetime.fromtimestamp(held.closes_at, UTC)) if held.closes_at is not None else None
    return {"context_id": context.id, "item_id": context.work_id, "rig": context.rig,
            "reason": held.reason, "missing_since": held.since, "closes_at": closes_at}


def _clean(town: Town, stores: Stores, view, report: CycleReport) -> None:
    """Close stale contexts, settle interrupted launches, drop intents whose launch never happened.

    Also keeps the missing-item clock: a held context gets ``missing_since``
    (the first time only), a context whose item came back loses it.
    Each kind of write is grouped by rig: one lock, one read and one append per rig.
    """
    stamp = iso()
    unmarked: dict[str, list] = {}
    for held in view.held:
        if held.since is None:
            unmarked.setdefault(held.context.rig, []).append(held)
    grace = town.config.scheduler.seconds("missing_grace")
    for rig_name, group in unmarked.items():
        marked = ctxs.mark_missing(stores.rig(rig_name), [h.context.id for h in group], stamp)
        for held in group:
            updated = marked.get(held.context.id)
            if updated is not None and updated.fields is not None:
                held.since = updated.fields.missing_since
                since = parse_ts(held.since)
                held.closes_at = since + grace if since is not None else None
    back: dict[str, list[str]] = {}
    for context in view.reappeared:
        back.setdefault(context.rig, []).append(context.id)
    for rig_name, ids in back.items():
        ctxs.clear_missing(stores.rig(rig_name), ids)
    closes: dict[str, list[tuple[str, str, dict | None]]] = {}
    rows: dict[str, dict] = {}
    for stale in view.stale:
        context = stale.context
        closes.setdefault(context.rig, []).append((context.id, stale.reason, {"detail": stale.detail}))
        rows[context.id] = {"context_id": context.id, "item_id": context.work_id, "rig": context.rig,
                            "reason": stale.reason}
    for context, polecat in view.launched:
        closes.setdefault(context.rig, []).append(
            (context.id, ctxs.DISPATCHED, {"polecat_id": polecat.id, "reconciled": True}))
        rows[context.id] = {"context_id": context.id, "item_id": context.work_id, "rig": context.rig,
                            "reason": ctxs.DISPATCHED, "polecat_id": polecat.id}
    closed: set[str] = set()
    for rig_name, batch in closes.items():
        closed.update(ctxs.close_many(town, stores.rig(rig_name), batch))
    for stale in view.stale:
        context = stale.context
        if context.id in closed and stale.reason == ctxs.CIRCUIT_BROKEN and context.fields is not None:
            admission.trip_breaker(town, context.fields, context.fields.last_failure)
    for context_id, row in rows.items():
        if context_id not in closed:
            continue
        report.closed.append(row)
        if "polecat_id" in row:
            report.messages.append(f"{row['item_id']}: an interrupted launch had started polecat"
                                   f" {row['polecat_id']}; context closed")
    relaunch: dict[str, list[str]] = {}
    for context in view.relaunch:
        relaunch.setdefault(context.rig, []).append(context.id)
    for rig_name, ids in relaunch.items():
        ctxs.clear_launch(stores.rig(rig_name), ids)


class Launcher:
    """The one launch path: the dispatch cycle and sling's direct mode both launch through it.

    For one piece of work it records the launch intent on the sling context
    (when there is one), builds the request, asks the executor, logs the
    ``Dispatched`` event and the decision, and closes the context
    ``dispatched``; or it books the failure: a ``DispatchFailed`` event and,
    on a context, the failure count and the breaker at ``max_failures``.
    Outcomes go into ``report`` (``launched``/``dispatched``,
    ``failures``/``failed``, ``messages``).  ExecutorUnavailable is nobody's
    item's fault: the intent is withdrawn and the error propagates.
    """

    def __init__(self, town, stores, executor, template, max_failures, report: CycleReport,
                 sleep: Callable[[float], None] = time.sleep):
        self.town = town
        self.stores = stores
        self.executor = executor
        self.template = template
        self.max_failures = max_failures
        self.report = report
        self.sleep = sleep

    def launch(self, work: Work, fields: SlingContextFields | None = None) -> bool:
        """Launch ``work``; True when its polecat runs (and its context, if any, is closed).

        ``work.payload`` is the sling context, or None for a direct launch,
        which then takes its parameters from ``fields``.
        """
        context = work.payload
        store = self.stores.rig(context.rig) if context is not None else None
        item = work.item
        if context is not None:
            fields = context.fields
            if ctxs.mark_launch(store, context.id) is None:  # cleared or closed since the survey
                self.report.skipped += 1
                return False
        context_id = context.id if context is not None else None
        request = make_request(self.town, self.template, item, work.rig, context_id or "", fields)
        try:
            polecat = self.executor.launch(request)
        except ExecutorUnavailable:
            if context is not None:
                ctxs.clear_launch(store, [context.id])
            raise
        except ExecutorError as err:
            self._failed(work, store, f"launch failed: {err}")
            return False
        payload = {"context_id": context_id, "item_id": item["id"], "rig": work.rig, "polecat_id": polecat.id}
        direct = {} if context is not None else {"direct": True}
        events.emit_event(self.town, events.DISPATCHED, {**payload, **direct})
        append_decision(self.town, work, polecat.id)
        self._admitted(work, polecat.id)
        self.report.launched.append(payload)
        if context is None or self._close_dispatched(store, context, polecat.id):
            self.report.dispatched += 1
            return True
        self.report.failed += 1
        return False

    def _admitted(self, work: Work, polecat_id: str) -> None:
        """Charge the launch to the token budgets; a half-open item that launched is healed."""
        config = self.town.config
        if admission.needs_spend(config):
            kept.record_launch(self.town, rig=work.rig, item_id=work.item["id"],
                               context_id=work.context_id or "", polecat_id=polecat_id,
                               tokens=work.tokens if work.tokens is not None else effective_tokens(work.item),
                               now=time.time(),
                               window=config.scheduler.seconds("budget_window"))
        kept.heal(self.town, work.item["id"])

    def _close_dispatched(self, store, context, polecat_id: str) -> bool:
        last_error: Exception | None = None
        for attempt in range(len(CLOSE_RETRY_WAITS) + 1):
            try:
                ctxs.close(self.town, store, context.id, ctxs.DISPATCHED, {"polecat_id": polecat_id})
                return True
            except (OSError, SluiceError) as err:
                last_error = err
                if attempt < len(CLOSE_RETRY_WAITS):
                    self.sleep(CLOSE_RETRY_WAITS[attempt])
        message = f"dispatch succeeded but closing its context failed: {last_error}"
        self.report.messages.append(f"warning: {context.work_id}: {message}")
        try:  # last resort; failing that, the intent on the context still prevents a relaunch
            ctxs.close(self.town, store, context.id, ctxs.DISPATCH_CLOSE_FAILED, {"polecat_id": polecat_id})
        except (OSError, SluiceError):
            self.report.messages.append(
                f"warning: {context.id} is still open with a launch intent; the next cycle will settle it"
            )
        return False

    def _failed(self, work: Work, store, error: str) -> None:
        context = work.payload
        self.report.failed += 1
        if context is None:  # a direct launch: no context to count the failure on or to break
            failures = 1
        else:
            updated = ctxs.record_failure(store, context.id, error)
            failures = updated.failures if updated is not None else context.failures + 1
        row = {"context_id": context.id if context is not None else None, "item_id": work.item["id"],
               "rig": work.rig, "error": error, "failures": failures, "circuit_broken": False}
        payload = {k: v for k, v in row.items() if k != "circuit_broken"}
        events.emit_event(self.town, events.DISPATCH_FAILED, payload)
        if context is not None and failures >= self.max_failures:
            ctxs.close(self.town, store, context.id, ctxs.CIRCUIT_BROKEN, {"last_failure": error})
            if updated is not None and updated.fields is not None:
                admission.trip_breaker(self.town, updated.fields, error)
            events.emit_event(self.town, events.CIRCUIT_BROKEN, {
                "context_id": context.id, "item_id": work.item["id"], "rig": work.rig,
                "failures": failures, "last_failure": error})
            row["circuit_broken"] = True
            self.report.messages.append(
                f"{work.item['id']}: context {context.id} failed {failures} times, circuit-broken"
            )
        self.report.failures.append(row)


# -- decisions -------------------------------------------------------------------


def append_decision(town: Town, work: Work, polecat_id: str) -> dict:
    """Log a launch in ``decisions.jsonl`` in the advisor's decision shape, so fairness sees it."""
    item = work.item
    graph_id = work.graph_id if work.score is not None else Graphs(town, Stores(town)).of_record(item)
    decision = make_decision(
        item, town.rig(work.rig), graph_id=graph_id, score=work.score, reasons=work.reasons, at=iso(),
        source="dispatch", context_id=getattr(work.payload, "id", None), polecat_id=polecat_id,
    )
    append_decisions(town, [decision])
    return decision
