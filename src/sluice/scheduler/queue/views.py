"""The queue as the next cycle sees it: ``scheduler status``, ``list`` and ``explain``.

``list`` and ``status`` read the same survey the dispatch cycle acts on
(:mod:`sluice.scheduler.queue.pending`) and the same admission
(:mod:`sluice.scheduler.launch.admission`), so what they show as ready is exactly
what the next cycle would consider, in the order it would launch it (R-L);
``explain`` gives every reason one item would not be launched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.core import admission as rules
from sluice.core.admission import Reason
from sluice.core.clock import format_duration
from sluice.core.items import priority_of
from sluice.core.recordclass import recordclass
from sluice.errors import StoreCorrupt, UsageError
from sluice.scheduler.launch.admission import assess, binding_of, reasons_of, why
from sluice.scheduler.launch.polecats import retry_due_at, retry_window
from sluice.scheduler.queue.pending import held_row, item_store, survey
from sluice.scheduler.session import Session
from sluice.store.database import admission_state as kept
from sluice.store.database import contexts as ctxs
from sluice.store.database import forecasts
from sluice.store.database.state import load_state
from sluice.store.items.sources import stale_rows

if TYPE_CHECKING:
    from sluice.executors.base import Executor
    from sluice.scheduler.launch.admission import Assessment
    from sluice.scheduler.queue.head import Head
    from sluice.scheduler.queue.pending import Survey
    from sluice.scheduler.queue.ranking import Work
    from sluice.store.files.town import Town


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
        "priority": priority_of(work.item),
        "score": work.score,
        "promoted_at": fields.promoted_at or None,
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
        "priority": None,
        "score": None,
    }


def queue_view(session: Session) -> tuple[Survey, Assessment]:
    """One survey and its admission, exactly as the next cycle would see them, made once per session.

    The config, polecats and problem are the session's (an unreachable
    executor counts as no polecats); a view that shows both the queue and its
    forecast pays for one survey.
    """
    if session.surveyed is not None:
        return session.surveyed
    town, config, stores, now = session.files, session.config, session.stores, session.now
    active = session.active
    retry = retry_window(config.scheduler)
    view = survey(town, stores, config.scheduler.max_dispatch_failures, active or [], session.find,
                  now=now, backoff=retry)
    assessment = assess(town, stores, view, active or [], config.scheduler.batch_size, now=now)
    session.surveyed = (view, assessment)
    return view, assessment


def _queue(session: Session, limit: int = 0, offset: int = 0) -> Page:
    """The queue rows from ``offset`` (``limit`` of them, 0: all), with exact counts.

    Only the rows shown are built and given their reasons, so a view of the
    first 50 of 100,000 queued items does not write out the other 99,950;
    the counts (every row, ready rows, per rig) come from the survey itself.
    """
    for name, value in (("limit", limit), ("offset", offset)):
        if value < 0:
            raise UsageError(f"--{name} must be >= 0 (got {value})", parameters=(name,))
    stop = offset + limit if limit else None
    if limit and session.surveyed is None and offset + limit <= HEAD_ROWS_MAX:
        from sluice.scheduler.queue.head import read_head

        head = read_head(session, offset + limit)
        if head is not None:
            return _page(session, head.view, head.assessment, offset, stop, head)
    view, assessment = queue_view(session)
    return _page(session, view, assessment, offset, stop)


#: A page that ends further down than this is cut from a whole survey, not read from the head.
HEAD_ROWS_MAX = 2000


def _page(session: Session, view: Survey, assessment: Assessment, start: int, stop: int | None,
          head: Head | None = None) -> Page:
    """The rows ``start`` to ``stop`` (None: the end) of the survey's queue, with its exact counts:
    ready, backing off, blocked, then held, each row with the reasons it waits.

    With ``head`` the queue was read as its head (:mod:`sluice.scheduler.queue.head`): the
    survey's ready and blocked lists are only its first ones, and the counts are the head's.
    """
    if head is None:
        ready_total, blocked_total, stale_total = len(view.ready), len(view.blocked), len(view.stale)
        rigs = view.rig_counts()
    else:
        ready_total, blocked_total, stale_total, rigs = (head.ready_total, head.blocked_total,
                                                          head.stale_total, head.rigs)
    config = session.config
    retry = retry_window(config.scheduler)
    queued = ready_total + len(view.backing_off) + blocked_total
    counts = QueueCounts(queued + len(view.held), ready_total + len(view.backing_off), rigs)
    stop = counts.total if stop is None else stop
    rows = []
    firsts = (0, ready_total, ready_total + len(view.backing_off))
    for works, first, where in zip((view.ready, view.backing_off, view.blocked), firsts,
                                   ("ready", "backoff", "blocked"), strict=True):
        for work in works[max(0, start - first):max(0, stop - first)]:
            row = _row(work, where == "blocked", retry)
            row["why"] = why(assessment, work, where, config)
            rows.append(row)
    for held in view.held[max(0, start - queued):max(0, stop - queued)]:
        row = _held_row(held)
        row["why"] = [row["held"]]
        rows.append(row)
    return Page(rows, counts, stale_total, len(view.held), dict(view.unreadable), assessment)


@recordclass
class Page:
    """A page of the queue's rows, its exact counts, and the admission of the whole queue."""

    rows: list[dict]
    counts: QueueCounts
    stale: int
    held: int
    unreadable: dict
    assessment: Assessment

    def admission(self) -> dict:
        """What admission said of the whole queue: its reason, the binding limit, the host's gates."""
        binding, gates = binding_of(self.assessment), self.assessment.gates
        return {"plan_reason": self.assessment.admission.reason,
                "binding": binding.to_json() if binding is not None else None,
                "host": gates.to_json() if gates is not None else None}

    def head(self) -> dict:
        counts = self.counts
        return {"rows": self.rows, "total": counts.total, "ready": counts.ready, "rigs": counts.rigs,
                "stale": self.stale, "held": self.held, "unreadable": self.unreadable, **self.admission()}


@recordclass
class QueueCounts:
    """Exact counts of the whole queue, whatever slice of its rows a view shows."""

    total: int
    ready: int
    rigs: dict[str, list[int]]  # rig → [ready, blocked]


def list_queue(where: Town | Session, executor: Executor | None = None, limit: int = 0, offset: int = 0
               ) -> list[dict]:
    """Queued items, one row per item: ready ones in dispatch order, then blocked ones, then held ones.

    ``limit`` rows from ``offset`` (``limit`` 0: every row).  A held row
    (``held: "missing-item"``) is a context whose item no rig has right now;
    it is closed only once ``closes_at`` has passed.
    """
    return _queue(Session.of(where, executor), limit, offset).rows


#: ``scheduler status`` lists this many queue rows unless asked for another number (0: all).
STATUS_ROWS = 50


def status(where: Town | Session, executor: Executor | None = None, limit: int = STATUS_ROWS) -> dict:
    """``scheduler status``."""
    return status_with_counts(where, executor, limit)[0]


def status_with_counts(where: Town | Session, executor: Executor | None = None, limit: int = STATUS_ROWS
                       ) -> tuple[dict, QueueCounts]:
    """``scheduler status`` with its first ``limit`` queue rows (``items_total``, ``truncated``),
    and the whole queue's counts (the snapshot's per-rig figures)."""
    session = Session.of(where, executor)
    town = session.files
    page = _queue(session, limit)
    rows, counts = page.rows, page.counts
    config, active, problem = session.config, session.active, session.problem
    state = load_state(town)
    sched = config.scheduler
    count = len(active) if active is not None else None
    out = {
        "paused": state.paused,
        "paused_by": state.paused_by,
        "paused_at": state.paused_at,
        "queued_total": counts.total,
        "queued_ready": counts.ready,
        "active_polecats": count,
        # Unknown when the executor cannot say how many polecats run: never claim free slots.
        "capacity": max(0, sched.max_polecats - count) if count is not None else None,
        "max_polecats": sched.max_polecats,
        "mode": "deferred" if sched.deferred else "direct",
        "batch_size": sched.batch_size,
        "last_dispatch_at": state.last_dispatch_at,
        "last_dispatch_count": state.last_dispatch_count,
        "stale": page.stale,
        "held": page.held,
        # Rigs with a file sluice cannot read (file and line): their work is held, the rest goes on.
        "unreadable": page.unreadable,
        # Read-only rigs whose items may be behind their beads store (docs/items.md "Item sources").
        "source_stale": stale_rows(town),
        "items": rows,
        "items_total": counts.total,
        "truncated": len(rows) < counts.total,
        **_admission_status(session, page),
        "forecast": kept_forecast(town),
    }
    if problem:
        out["executor_error"] = problem
    return out, counts


def kept_forecast(town: Town) -> dict | None:
    """When the queue drains by the last forecast kept, and when that was made (None: none kept).

    ``scheduler status`` never replays the queue itself: a forecast costs a
    survey and a replay, and status must stay cheap.  Its age is left to the
    reader (the text says it), so two calls a second apart answer the same.
    """
    head = forecasts.last(town)
    keys = ("at", "drain_at", "drain_p90_at", "items_total")
    return {key: head[key] for key in keys} if head is not None else None


def _admission_status(session: Session, page: Page) -> dict:
    """Budgets (spent / budget / window), throttles and broken items for ``scheduler status``, and what
    admission said of the queue."""
    town, config, now = session.files, session.config, session.now
    window = format_duration(config.scheduler.seconds("budget_window"))
    caps, spend = page.assessment.limits, page.assessment.spend
    budgets = []
    if caps.town_budget:
        budgets.append({"rig": None, "spent": spend.town, "budget": caps.town_budget, "window": window})
    for name, budget in sorted(caps.rig_budgets.items()):
        budgets.append({"rig": name, "spent": spend.rigs.get(name, 0), "budget": budget, "window": window})
    return {"budgets": budgets, "throttles": kept.throttle_rows(town, now),
            "rig_caps": dict(sorted(caps.rig_caps.items())), "label_caps": dict(caps.label_caps),
            "circuit_broken": kept.count_broken(town), **page.admission()}


# -- explain ------------------------------------------------------------------------------------


def _with_failures(town: Town, causes: list[str]) -> list[str]:
    """``causes`` (blocker ids), each whose latest run failed said so with that run: how it ended, its
    exit status, when, and whether anything queues it again; a failed blocker is why work waits for
    good, and the bare id would not say so."""
    from sluice.store.database import runs as runlog

    if not causes:
        return causes
    queued = ctxs.open_of_items(town, causes)
    out = []
    for cause in causes:
        run = runlog.latest(town, item=cause)
        if run is None or run.get("outcome") not in runlog.FAILURES:
            out.append(cause)
            continue
        code = run.get("exit_code")
        again = "queued again" if queued.get(cause) else f"nothing queues it again: `sluice retry {cause}`"
        out.append(f"{cause} (its last run {run['outcome']}"
                   f"{'' if code is None else f', exit {code}'}, at {run.get('ended_at') or '?'}; {again})")
    return out


def explain(where: Town | Session, item_id: str, executor: Executor | None = None,
            now: float | None = None) -> dict:
    """Would the next cycle launch ``item_id``, and every reason it would not (``scheduler explain``)."""
    session = Session.of(where, executor, now)
    town, stores, now = session.files, session.stores, session.now
    view, assessment = _explained_view(session, item_id)
    config, active = session.config, session.active or []
    out: dict[str, Any] = {"item_id": item_id, "queued": False, "context_id": None, "would_dispatch": False,
                           "score": None, "promoted_at": None, "reasons": []}
    reasons: list[Reason] = []
    unreadable = None
    try:
        found = item_store(stores, item_id)
    except (StoreCorrupt, OSError) as err:  # its rig cannot be read: held, as the cycle holds it
        found, unreadable = None, str(err)
    # What blocks it in its rig, read once: the blocked reason and the gates both name them.
    causes = (found[0].blocked_by(item_id) or []) if found is not None else []
    lists = (("ready", view.ready), ("backoff", view.backing_off), ("blocked", view.blocked))
    queued = next(((where, w) for where, works in lists for w in works if w.item["id"] == item_id), None)
    held = next((h for h in view.held if h.context.work_id == item_id), None)
    stale = next((c for c in view.stale if c.context.work_id == item_id), None)
    polecat = next((p for p in active if p.item_id == item_id), None)
    if queued is not None:
        where, w = queued
        out.update(queued=True, context_id=w.context_id, score=w.score, promoted_at=w.promoted_at or None)
        blockers = None
        if where == "blocked":  # its running polecat, else its rig's blocking causes
            blockers = [f"its running polecat {polecat.id}"] if polecat else _with_failures(town, causes)
        reasons = reasons_of(assessment, w, where, config, blockers)
        out["would_dispatch"] = not reasons and w.context_id in assessment.planned_keys
    elif held is not None:  # its item is missing now; the context closes after missing_grace
        out.update(queued=True, context_id=held.context.id)
        closes = f", its context closes at {rules.stamp(held.closes_at)}" if held.closes_at else ""
        if held.reason == rules.RIG_UNREADABLE:
            reasons.append(Reason(rules.RIG_UNREADABLE, held.detail or ""))
        else:
            reasons.append(Reason(rules.MISSING_ITEM, f"no rig has item {item_id} right now{closes}"))
    elif stale is not None:
        out.update(queued=True, context_id=stale.context.id)
        code = {ctxs.CIRCUIT_BROKEN: rules.CIRCUIT_BROKEN,
                ctxs.INVALID_WORK_ITEM: rules.MISSING_ITEM}.get(stale.reason, rules.NOT_QUEUED)
        reasons.append(Reason(code, f"the next cycle closes its context ({stale.reason}: {stale.detail})"))
    elif (entry := kept.broken_entry(town, item_id)) is not None:
        nxt = entry.get("next_attempt_at") or "never (scheduler.breaker_cooldown is 0;"
        nxt += ")" if entry.get("next_attempt_at") is None else ""
        reasons.append(Reason(rules.CIRCUIT_BROKEN,
                              f"{entry.get('failures')} failed launches, last: {entry.get('last_error')};"
                              f" next attempt {nxt} (`sluice scheduler reset {item_id}` queues one now)"))
    elif unreadable is not None:
        reasons.append(Reason(rules.RIG_UNREADABLE, unreadable))
    elif found is None:
        reasons.append(Reason(rules.MISSING_ITEM, f"no rig has an item {item_id}"))
    else:
        detail = (f"a polecat ({polecat.id}) is running it" if polecat
                  else f"no open sling context (`sluice sling {item_id} RIG` queues it)")
        reasons.append(Reason(rules.NOT_QUEUED, detail))
    out["reasons"] = [r.to_json() for r in reasons]
    out.update(_beads_hints(found, causes, now))
    out["host"] = assessment.gates.to_json() if assessment.gates is not None else None
    return out


#: How far down the queue ``explain`` looks through its head before it surveys the whole queue.
EXPLAIN_ROWS = 500


def _explained_view(session: Session, item_id: str) -> tuple[Survey, Assessment]:
    """The survey and admission ``explain`` reads: the queue's head when the item is in it, or is not
    queued at all (its head holds every context that is not plain); else the whole survey."""
    if session.surveyed is None:
        from sluice.scheduler.queue.head import read_head

        head = read_head(session, EXPLAIN_ROWS, order=True)  # its forecast row reads the same head
        if head is not None:
            view = head.view
            listed = [w.item["id"] for w in view.ready + view.backing_off + view.blocked]
            listed += [c.context.work_id for c in view.held + view.stale]
            if item_id in listed or not ctxs.find_open(session.files, item_id):
                return view, head.assessment
    return queue_view(session)


def _beads_hints(found, causes: list[str], now: float) -> dict:
    """beads 1.x's runtime hint and deadline of the item, and the gates among what blocks it."""
    from sluice.core.items import gate_of, item_hints

    if found is None:
        return {"estimated_minutes": None, "due_at": None, "due": None, "gates": []}
    store, record = found
    gates = [gate_of(r) for r in store.get_many(causes).values()]
    own = gate_of(record)
    return {**item_hints(record, now), "gates": ([own] if own else []) + [g for g in gates if g]}
