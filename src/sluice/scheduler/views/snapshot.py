"""One snapshot of the town: everything the live views show, as one JSON document.

``sluice snapshot --json``, ``sluice top``, ``sluice web`` and its
``/api/state`` all show this document and nothing else, so a view can never
disagree with the CLI: the scheduler part *is* ``scheduler status`` (the same
call, so whatever status reports — caps, throttles, budgets — the views
report too), the queue *is* ``scheduler list`` and the polecats are rows of
``polecat list``.  The snapshot is built once per refresh; the executor is
asked once for its polecats and that one answer serves the status counts and
the polecat rows.

Shape (``version`` 1)::

    {version, at, town,
     scheduler: {…scheduler status without its items…},
     forecast: {at, drain_at, drain_p90_at, daemon, items_total} (scheduler forecast's head) or {error},
     queue: [… scheduler list rows, dispatch order (the first --limit of them:
             scheduler.items_total counts them all, scheduler.truncated), with start_at and done_at …],
     executor: the configured executor.kind,
     polecats: [… polecat list rows that still run, with runtime_seconds, logs_command and the
                item's title …],
     runs: [… the latest run records, newest first (failures: outcome failed, timed-out, vanished) …],
     rigs: {name: {ready, blocked, queued, queued_ready, queued_blocked, running,
                   merge_queue: {queued, running, depth}}},
     decisions: [… newest first …], events: [… oldest first …]}

``rigs.*.ready`` and ``blocked`` count the rig's items (beads rules), queued
ones or not; ``queued`` counts the rig's queue rows.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from sluice.core.clock import boot_seconds, iso_epoch
from sluice.core.items import gate_of, item_hints
from sluice.errors import ExecutorError, SluiceError
from sluice.scheduler.launch import ends, runs
from sluice.scheduler.launch.polecats import RUNNING_STATES, polecat_row, polecat_runtime
from sluice.scheduler.queue import views as queue_model
from sluice.scheduler.queue.pending import survey
from sluice.scheduler.queue.ranking import Work, rank_work
from sluice.scheduler.session import Session
from sluice.scheduler.views import forecast as forecasting
from sluice.store.database.decisions import recent_decisions
from sluice.store.database.events import recent_events

if TYPE_CHECKING:
    from sluice.executors.base import Executor, Polecat
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import Stores

VERSION = 1
RECENT_DECISIONS = 20
RECENT_EVENTS = 30
RECENT_RUNS = 20


class _OneAnswer:
    """The executor, answering ``active``/``listing`` once per snapshot (one look, one truth)."""

    def __init__(self, executor: Executor):
        self._executor = executor
        self._listing = None

    def __getattr__(self, name):
        return getattr(self._executor, name)

    def listing(self):
        if self._listing is None:
            self._listing = list(self._executor.listing())
        return self._listing

    def active(self):
        return [p for p in self.listing() if p.state in RUNNING_STATES]


def _polecat(polecat: Polecat, now: float, now_boot: float | None, run: dict | None = None) -> dict:
    row = polecat_row(polecat, run)
    runtime = polecat_runtime(polecat, now, now_boot)  # by the boot clock where known: no date step moves it
    row["runtime_seconds"] = None if runtime is None else round(runtime, 1)
    row["logs_command"] = shlex.join(["sluice", "polecat", "logs", row["id"]])
    return row


def _titles(stores: Stores, polecats: list[dict]) -> None:
    """Each running polecat's item title (None when no rig has the item any more), in one lookup."""
    try:
        found = stores.find_many(p["item_id"] for p in polecats)
    except (SluiceError, OSError):  # a broken rig is reported under rigs; the rows just go untitled
        found = {}
    for row in polecats:
        hit = found.get(row["item_id"])
        row["title"] = hit[1].get("title") if hit else None


def _rigs(stores: Stores, counts, polecats: list[dict], now: float, sources: list[dict],
          unreadable: dict[str, str]) -> dict:
    out = {}
    for store in stores.all():
        name = store.rig.name
        if name in unreadable:  # held by the scheduler: the views say so where the rig's row would be
            out[name] = {"error": f"held (rig-unreadable): {unreadable[name]}"}
            continue
        try:
            ready = store.index.ready_count(now)  # counted by the index: a large rig's rows are never built
            blocked = len(store.blocked_raw())
            merge = store.merge_queue_counts()
        except (SluiceError, OSError) as err:  # one broken rig must not blank the whole view
            out[name] = {"error": str(err)}
            continue
        queued_ready, queued_blocked = counts.rigs.get(name, (0, 0))
        stale = next((row for row in sources if row["rig"] == name), None)
        queued_merge, running_merge = merge.get("open", 0), merge.get("in_progress", 0)
        out[name] = {
            "ready": ready,
            "blocked": blocked,
            "queued": queued_ready + queued_blocked,
            "queued_ready": queued_ready,
            "queued_blocked": queued_blocked,
            "running": sum(1 for p in polecats if p["rig"] == name),
            "merge_queue": {"queued": queued_merge, "running": running_merge,
                            "depth": queued_merge + running_merge},
            "source_stale": {k: v for k, v in stale.items() if k != "rig"} if stale else None,
        }
    return out


def _forecast(session: Session, queue: list[dict]) -> dict:
    """The forecast's head, and the shown rows' ``start_at``/``done_at``, from the survey status made.

    One replay per snapshot (so per refresh of a view), never per row; one
    that fails says why in ``error`` and leaves the rest of the view as it is.
    """
    try:
        replayed = forecasting.replay(session, rows=len(queue))  # the rows shown, and the drain
    except (SluiceError, OSError) as err:
        for row in queue:
            row["start_at"] = row["done_at"] = None
        return {"error": str(err)}
    forecasting.with_etas(session, queue, replayed)
    return forecasting.head(replayed)


def snapshot(where: Town | Session, executor: Executor | None = None, *, decisions: int = RECENT_DECISIONS,
             events: int = RECENT_EVENTS, limit: int = 0) -> dict:
    """The town's state as one JSON-ready dict; see the module docstring for its shape.

    ``limit`` keeps the first rows of the queue only (0: all); the counts
    (``scheduler.queued_total`` and ``items_total``, every rig's) stay exact.
    """
    session = Session.of(where, executor)
    town, now, problem = session.files, session.now, None
    once = _OneAnswer(session.executor) if session.executor is not None else None
    if once is not None:
        try:  # a view that looks records what has ended, as any command does
            ends.settle(town, once, session.stores, now=now)
        except (SluiceError, OSError) as err:
            problem = str(err)
    session = session.seeing(once)
    session.head_rows = forecasting.HEAD_ROWS  # the queue's head read once, for the rows and the forecast
    problem = session.problem or problem
    # One survey for the rows, their counts and the forecast's replay.
    status, counts = queue_model.status_with_counts(session, limit=limit)
    queue = status.pop("items")
    eta = _forecast(session, queue)
    polecats: list[dict] = []
    if once is not None and "executor_error" not in status:
        try:
            listed = sorted(once.listing(), key=lambda p: (p.started_at, p.id))
            boot = boot_seconds()
            recorded = runs.running_records(town)
            polecats = [_polecat(p, now, boot, recorded.get(p.id)) for p in listed
                        if p.state in RUNNING_STATES]
        except ExecutorError as err:
            status["executor_error"] = str(err)
    if problem and "executor_error" not in status:
        status["executor_error"] = problem
    _titles(session.stores, polecats)
    return {
        "version": VERSION,
        "at": iso_epoch(now),
        "town": str(town.root),
        "executor": session.config.executor.kind,
        "scheduler": status,
        "forecast": eta,
        "queue": queue,
        "polecats": polecats,
        "runs": runs.history(town, limit=RECENT_RUNS, now=now),
        "rigs": _rigs(session.stores, counts, polecats, now, status["source_stale"], status["unreadable"]),
        "decisions": recent_decisions(town, decisions),
        "events": recent_events(town, events),
    }


def item_detail(where: Town | Session, item_id: str, executor: Executor | None = None) -> dict:
    """One item as the views explain it: its record, queue row, score with reasons, blockers, polecats.

    A queued item's score and reasons are those of the queue (the ranking the
    next cycle uses); an item that is not queued is scored alone, as if it
    were slung now.  Raises :class:`~sluice.errors.UnknownItem` when no rig
    has the item.
    """
    session = Session.of(where, executor)
    town, config, stores, now = session.files, session.config, session.stores, session.now
    store, record = stores.find(item_id)
    once = _OneAnswer(session.executor) if session.executor is not None else None
    session = session.seeing(once)
    active = session.active or []  # an executor that cannot be asked counts no polecats (problem)
    view = survey(town, stores, config.scheduler.max_dispatch_failures, active, session.find, now=now)
    queued = next((w for w in view.queued if w.item["id"] == item_id), None)
    blocked = queued in view.blocked if queued is not None else None
    if queued is None:
        queued = rank_work(town, stores, [Work(item=record, rig=store.rig.name,
                                               order=record.get("created_at") or "")])[0]
    blockers = next((causes for row, causes in store.blocked() if row.get("id") == item_id), [])
    rows = [r for r in queue_model.list_queue(session) if r["id"] == item_id]
    boot = boot_seconds()
    polecats = [_polecat(p, now, boot) for p in (once.listing() if once is not None else [])
                if p.item_id == item_id]
    out = {
        "item": record,
        "rig": store.rig.name,
        "queued": bool(rows),
        "queue_row": rows[0] if rows else None,
        "blocked": blocked,
        "blocked_by": list(blockers),
        "score": queued.score,
        "reasons": list(queued.reasons),
        "graph_id": queued.graph_id,
        "tokens": queued.tokens,
        "polecats": polecats,
        "runs": runs.history(town, item=item_id, limit=10),
        "decisions": [d for d in recent_decisions(town, 200) if d.get("node_id") == item_id][:10],
        **item_hints(record, now),  # estimated_minutes, due_at, due ("due in 3h")
        "gate": gate_of(record),
    }
    if session.problem:
        out["executor_error"] = session.problem
    return out
