"""``scheduler forecast``: when each queued item is expected to start and finish.

The readings (queue in dispatch order, running runs, caps, throttles, the
daemon's interval, the run history) are gathered here; every decision is
:mod:`sluice.core.forecast`'s, so what is learned and how the queue is
replayed is tested on plain values.

The same replay is what the other surfaces show, so each of them answers
from one survey of the queue: :func:`list_queue` and :func:`explain` (the
facade's ``list`` and ``explain``) add a row's times to what the queue's
read model says, the snapshot behind ``top`` and ``web`` does the same once
per refresh (:func:`with_etas`), and :func:`forecast` keeps its head for
``scheduler status`` (:mod:`sluice.store.database.forecasts`), which never replays.
Budget fit (:mod:`sluice.core.budget`) is said per row shown, not per item
queued.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING

from sluice.core import admission as rules
from sluice.core import budget
from sluice.core import forecast as model
from sluice.core.clock import format_duration
from sluice.core.defaults import DAEMON_INTERVAL
from sluice.core.items import minutes_of, parse_ts
from sluice.core.recordclass import frozen
from sluice.errors import SluiceError
from sluice.logs import log as logger
from sluice.scheduler.launch import admission
from sluice.scheduler.launch.polecats import retry_due_at, retry_window
from sluice.scheduler.launch.runs import stamp
from sluice.scheduler.queue import views as queue_model
from sluice.scheduler.session import Session
from sluice.scheduler.views.reading import Reading
from sluice.store.database import admission_state as kept
from sluice.store.database import forecasts as kept_forecasts
from sluice.store.database import runs as runlog
from sluice.store.database.state import load_state, read_heartbeat

#: The rows a replay gives slots to at least (the rest count for the drain alone).
HEAD_ROWS = 500

if TYPE_CHECKING:
    from sluice.executors.base import Executor
    from sluice.scheduler.queue.ranking import Work
    from sluice.store.files.town import Town



def learn(town: Town, timeout: float | None = None) -> model.Model:
    """The model of the town's run history: each kind's last runs, one indexed query per kind
    (:func:`sluice.store.database.runs.samples`), so a history of 100,000 runs is not read by every command.
    A run recorded without its issue type counts for its rig and the town only."""
    return model.Model.of_kinds(runlog.samples(town, model.DEFAULT_WINDOW), model.DEFAULT_WINDOW,
                                timeout=timeout)


@frozen
class Budgets:
    """The token budgets that apply, and the launches charged in their window (``(at, tokens)``, oldest
    first), as admission counts them."""

    town: int
    rigs: dict[str, int]
    window: float
    town_charges: list[tuple[float, int]]
    rig_charges: dict[str, list[tuple[float, int]]]

    def fit(self, rig: str, need: int, now: float) -> dict | None:
        """Whether ``need`` tokens fit every budget over ``rig`` now, and when they next do (None: none)."""
        fits = []
        if self.town > 0:
            fits.append(budget.fit(need, self.town, self.town_charges, now, self.window, "town"))
        if self.rigs.get(rig, 0) > 0:
            charges = self.rig_charges.get(rig, [])
            fits.append(budget.fit(need, self.rigs[rig], charges, now, self.window, rig))
        bound = budget.binding(fits)
        if bound is None:
            return None
        return {"tokens_p90": need, "fits": all(f.fits for f in fits), "scope": bound.scope,
                "budget": bound.budget, "remaining": bound.remaining, "window": format_duration(self.window),
                "room_at": _at(bound.room_at)}


@frozen
class Replay:
    """The queue replayed once: the simulation's answer and each queued item's estimate, in queue order."""

    result: model.QueueForecast
    queue: _Queue
    daemon: dict
    budgets: Budgets | None = None

    @cached_property
    def by_item(self) -> dict[str, int]:
        """Each queued item's index in the queue."""
        return {slot.item_id: index for index, slot in enumerate(self.result.slots)}

    def row(self, index: int) -> dict:
        """The ``scheduler forecast`` row of the ``index``-th queued item."""
        slot = self.result.slots[index]
        _, estimate, tokens = self.queue.entry(index)
        p50, p90, basis = self.queue.shown(estimate)
        row = {
            "item_id": slot.item_id, "rig": slot.rig, "position": slot.position,
            "start_at": _at(slot.start_at), "done_at": _at(slot.done_at),
            "done_p90_at": _at(slot.done_p90_at),
            "runtime_p50": p50, "runtime_p90": p90,
            "tokens_p50": estimate.tokens_p50, "tokens_p90": tokens,
            "basis": basis.copy(),
            "budget": None if self.budgets is None or tokens is None else self.budgets.fit(slot.rig, tokens,
                                                                                            self.result.at),
        }
        if slot.why is not None:
            row["why"] = slot.why
        return row


class _Queue(Sequence):
    """The queued items as the replay reads them, each built (with its estimate) when first asked for."""

    def __init__(self, reading: Reading, learned: model.Model, paused: bool,
                 throttle_end: dict[str | None, float]):
        self.reading, self.learned = reading, learned
        self.paused, self.throttle_end = paused, throttle_end
        self.built: dict[int, tuple[model.Queued, model.Estimate, int | None]] = {}
        self._shapes: dict[tuple, tuple] = {}
        self._alike: dict[int, model.Queued] = {}
        self._shown: dict[int, tuple[float, float, dict]] = {}

    def shown(self, estimate: model.Estimate) -> tuple[float, float, dict]:
        """An estimate's runtimes and basis as a row shows them: worked out once per estimate, and a
        queue of 10,000 items shares a few dozen (each kept in :attr:`built`, so its id stays its own)."""
        found = self._shown.get(id(estimate))
        if found is None:
            found = self._shown[id(estimate)] = (
                round(estimate.runtime_p50, 3), round(estimate.runtime_p90, 3),
                {**estimate.basis, "kind": estimate.kind})
        return found

    def __len__(self) -> int:
        return len(self.reading)

    def __getitem__(self, index):  # the replay asks by position only
        return self.entry(index)[0]

    def entry(self, index: int) -> tuple[model.Queued, model.Estimate, int | None]:
        """The item at ``index``, its estimate, and the p90 of its kind's tokens (else its estimate)."""
        found = self.built.get(index)
        if found is not None:
            return found
        found = self.built[index] = self._made(self.reading.row(index))
        return found

    def alike(self, index: int) -> model.Queued:
        """An item as alike as the replay reads it to the one at ``index``: one object for every item of
        its kind (:mod:`sluice.scheduler.views.reading`), for a walk that reads the items past a view's rows
        only for the drain."""
        kind = self.reading.kind_of[index]
        found = self._alike.get(kind)
        if found is None:
            found = self._alike[kind] = self._made(self.reading.row(index))[0]
        return found

    def _made(self, row: list) -> tuple[model.Queued, model.Estimate, int | None]:
        """The reading row ``row`` as the replay reads it, its estimate and token p90 (the parts its
        :func:`_shape` shares worked out once)."""
        shape = _shape(row)
        parts = self._shapes.get(shape)
        if parts is None:
            parts = self._shapes[shape] = self._parts(shape)
        estimate, tokens, held_until, why, labels, touches = parts
        queued = model.Queued(row[0], row[1], estimate.runtime_p50, estimate.runtime_p90, held_until, why,
                              estimate.runtime_mean, labels, touches, row[10])
        return queued, estimate, tokens

    def _parts(self, shape: tuple) -> tuple:
        """What every queued item of one :func:`_shape` shares: its estimate, token p90, hold, why, labels
        and touches."""
        rig, kind, item_labels, minutes, work_tokens, retry_at, why, labels, touches = shape
        estimate = self.learned.estimate(rig, kind, item_labels, minutes, model.DEFAULT_RUNTIME, work_tokens)
        tokens = estimate.tokens_p90 if estimate.tokens_p90 is not None else work_tokens
        held_until = max(self.throttle_end.get(None, 0.0), self.throttle_end.get(rig, 0.0))
        if retry_at is not None:  # a failed launch waits out its backoff, as dispatch has it
            held_until = max(held_until, retry_at)
        return (estimate, tokens, held_until, rules.PAUSED if self.paused else why, frozenset(labels),
                tuple(touches))


class _FirstRows(Sequence):
    """A queue whose first ``rows`` items are its own and whose later ones are :meth:`_Queue.alike`'s."""

    def __init__(self, queue: _Queue, rows: int):
        self.queue, self.rows = queue, rows

    def __len__(self) -> int:
        return len(self.queue)

    def __getitem__(self, index):
        return self.queue.entry(index)[0] if index < self.rows else self.queue.alike(index)

    def alike_until(self, index: int) -> int:
        """Where the stretch of items of ``index``'s kind ends: :meth:`__getitem__` gives one object for
        all of them (past the first rows, where the replay asks)."""
        return self.queue.reading.alike_until(index)


def _shape(row: list) -> tuple:
    """What of a reading's row its estimate and hold depend on (all but its id and launch cost): a queue
    of 10,000 items comes in a few dozen such shapes, each worked out once."""
    _item_id, rig, kind, item_labels, minutes, work_tokens, retry_at, why, labels, touches, _cost = row
    return (rig, kind, tuple(item_labels) if item_labels else (), minutes, work_tokens, retry_at, why,
            tuple(labels), tuple(touches))


@frozen
class _Setting:
    """Everything but the queue that the replay reads: running runs, caps, charges, the daemon."""

    learned: model.Model
    running: list[model.Running]
    limits: model.Limits
    charges: list[model.Charge]
    daemon: dict
    paused: bool
    throttle_end: dict[str | None, float]

    def queue(self, reading: Reading) -> _Queue:
        return _Queue(reading, self.learned, self.paused, self.throttle_end)


def _setting(session: Session, caps: dict) -> _Setting:
    town, config, now = session.files, session.config, session.now
    sched = config.scheduler
    learned = learn(town, sched.seconds("polecat_timeout") or None)
    throttle_end: dict[str | None, float] = {}
    for throttle in kept.throttles(town, now):
        throttle_end[throttle.rig] = max(throttle_end.get(throttle.rig, 0.0), throttle.until)
    running = [model.Running(record.get("rig") or "", _left(learned, record, now),
                             labels=frozenset(record.get("labels") or ()),
                             touches=tuple(record.get("touches") or ()))
               for record in runlog.running(town).values()]
    interval, next_tick = _daemon(town, now)
    limits = model.Limits(town_cap=sched.max_polecats, rig_caps=dict(caps["rig_caps"]),
                          batch_size=sched.batch_size, spawn_delay=sched.seconds("spawn_delay"),
                          interval=interval or DAEMON_INTERVAL, first_tick=next_tick,
                          label_caps=dict(caps["label_caps"]), town_budget=caps["town_budget"],
                          rig_budgets=dict(caps["rig_budgets"]), budget_window=sched.seconds("budget_window"))
    # With no daemon heartbeat the forecast assumes one ticking at the default interval from now.
    daemon = {"running": interval is not None, "interval": limits.interval}
    return _Setting(learned, running, limits, _charges(town, limits, now), daemon, load_state(town).paused,
                    throttle_end)


def replay(where: Town | Session, executor: Executor | None = None, now: float | None = None,
           rows: int | None = None) -> Replay:
    """The queue replayed under today's caps from the learned runtimes (the survey is the session's).

    ``rows``: only the first ``rows`` items get their slots (at least those
    whose times :func:`kept_head` keeps), and the rest count for the drain
    alone; a snapshot of 50 rows of 100,000 queued builds no row for the
    others.  When the reading it replayed may be kept, the replay's head and
    its first rows' times are kept under the same inputs (:func:`kept_head`).
    """
    session = Session.of(where, executor, now)
    slotted = None if rows is None else max(rows, HEAD_ROWS)
    reading, caps = _queue_reading(session, slotted)
    setting = _setting(session, caps)
    queue = setting.queue(reading)
    if slotted is not None and slotted < len(queue):
        result = model.simulate_first(session.now, _FirstRows(queue, slotted), slotted, setting.running,
                                      setting.limits, setting.charges)
    else:
        result = model.simulate(session.now, queue, setting.running, setting.limits, setting.charges)
    return Replay(result, queue, setting.daemon, _budgets(setting.limits, setting.charges, session.now))


def head(replayed: Replay) -> dict:
    """A forecast's head as ``scheduler forecast`` and ``snapshot`` show it: when it was made, when the
    queue drains, the daemon it assumed, and the queue's size."""
    result = replayed.result
    return {"at": stamp(result.at), "drain_at": _at(result.drain_at),
            "drain_p90_at": _at(result.drain_p90_at), "daemon": replayed.daemon,
            "items_total": len(replayed.queue)}


def head_slots(session: Session, rows: int) -> tuple[model.Slot, ...]:
    """The replay's slots of the queue's first ``rows`` items, as :func:`replay` gives them.

    The replay stops once they have all started
    (:func:`~sluice.core.replay.simulate_head`), so it reads the queue only
    as far as that.
    """
    reading, caps = _queue_reading(session, max(rows, HEAD_ROWS))
    setting = _setting(session, caps)
    return model.simulate_head(session.now, setting.queue(reading), rows, setting.running,
                               setting.limits, setting.charges)


def _caps_of(limits) -> dict:
    """The caps and budgets a reading keeps of admission's limits."""
    return {"rig_caps": dict(limits.rig_caps), "label_caps": dict(limits.label_caps),
            "town_budget": limits.town_budget, "rig_budgets": dict(limits.rig_budgets)}


def _head_reading(session: Session, whole: int) -> tuple[Reading, dict] | None:
    """:func:`_queue_reading` of a long queue read as its head
    (:func:`~sluice.scheduler.queue.head.read_order`): its first ``whole`` rows built, the rest as
    stretches of one kind; None: survey instead."""
    from sluice.scheduler.queue.head import read_order
    from sluice.scheduler.views.reading import StretchReading

    order = read_order(session, whole)
    if order is None:
        return None
    ready, backing_off, blocked = _whole_rows(session, order.head.view, order.head.assessment)

    def segments(found: list[tuple], why: str | None) -> list[tuple[list, int, bool]]:
        return [(reading_row(work, None, why, admission.applicant(work)), 1, True) if work is not None
                else (_group_kind(group, why), n, False) for work, group, n in found]

    items = [(row, 1, True) for row in ready] + segments(order.ready, None)  # (row or kind, count, whole)
    items += [(row, 1, True) for row in backing_off + blocked] + segments(order.blocked, rules.BLOCKED)
    split = next((at for at, (_row, _n, whole_row) in enumerate(items) if not whole_row), len(items))
    stretches = [(row[1:] if whole_row else row, n) for row, n, whole_row in items[split:]]
    reading = StretchReading([row for row, _n, _whole in items[:split]], stretches)
    return reading, _caps_of(order.head.assessment.limits)


def _whole_rows(session: Session, view, assessment) -> tuple[list[list], list[list], list[list]]:
    """The reading rows of a survey's ready, backing-off and blocked works, each with the labels, touches
    and tokens admission reads (the ready works' as admission read them)."""
    retry = retry_window(session.config.scheduler)
    seen = assessment.applicants  # the ready works, first in the queue, in order
    ready = [reading_row(w, None, None, seen[p] if p < len(seen) and seen[p].payload is w
                         else admission.applicant(w)) for p, w in enumerate(view.ready)]
    backing_off = [reading_row(w, parse_ts(retry_due_at(w.payload.fields, *retry)), None,
                               admission.applicant(w)) for w in view.backing_off]
    blocked = [reading_row(w, None, rules.BLOCKED, admission.applicant(w)) for w in view.blocked]
    return ready, backing_off, blocked


def _group_kind(group, why: str | None) -> list:
    """A reading row's kind (all but the id) for the plain contexts of one group."""
    labels = json.loads(group.labels) if group.labels else []
    touches = json.loads(group.touches) if group.touches else []
    return [group.target_rig, group.issue_type, labels, group.minutes, group.tokens, None, why,
            sorted(labels), touches, group.tokens]


def _queue_reading(session: Session, whole: int | None = None) -> tuple[Reading, dict]:
    """Each queued item as the replay reads it, in queue order, and the caps and budgets admission reads.

    A row is ``[item id, rig, issue type, the item's labels, its estimated
    minutes, its tokens, the end of its backoff (epoch, or None), why it
    cannot start (None, or blocked), and the labels, touches and tokens
    admission reads]``, from the session's survey.  ``whole``: only the first ``whole`` rows are read
    whole, and a long queue is read as its head (:func:`_head_reading`) when it can be.
    """
    if whole is not None and session.surveyed is None:
        found = _head_reading(session, whole)
        if found is not None:
            return found
    view, assessment = queue_model.queue_view(session)
    ready, backing_off, blocked = _whole_rows(session, view, assessment)
    return Reading.of(ready + backing_off + blocked), _caps_of(assessment.limits)


def _budgets(limits: model.Limits, charges: list[model.Charge], now: float) -> Budgets | None:
    """The budgets that apply and what their window holds now (the launches admission counts), or None."""
    rigs = {name: cap for name, cap in limits.rig_budgets.items() if cap > 0}
    if limits.town_budget <= 0 and not rigs:
        return None
    window = limits.budget_window
    by_rig: dict[str, list[tuple[float, int]]] = {}
    for charge in charges:
        by_rig.setdefault(charge.rig, []).append((charge.at, charge.tokens))
    return Budgets(limits.town_budget, rigs, window,
                   budget.charges_in([(c.at, c.tokens) for c in charges], now, window),
                   {rig: budget.charges_in(rows, now, window) for rig, rows in by_rig.items()})


def forecast(where: Town | Session, executor: Executor | None = None, limit: int = 0,
             now: float | None = None) -> dict:
    """``scheduler forecast``: the queue replayed under today's caps from the learned runtimes.

    Its head is kept (:mod:`sluice.store.database.forecasts`) for ``scheduler
    status``; a head that cannot be written is warned about, never an error
    of the forecast itself.
    """
    session = Session.of(where, executor, now)
    replayed = replay(session, rows=limit or None)  # the daemon's kept forecast asks for one row
    result = replayed.result
    shown = range(min(limit, len(result.slots)) if limit else len(result.slots))
    top = head(replayed)
    try:
        kept_forecasts.keep(session.files, {**top, "at_ts": result.at})
    except (OSError, SluiceError) as err:
        logger.warning("%s: the forecast was not kept (%s); scheduler status shows the previous one",
                    session.files.db.path, err)
    return {**top, "items": [replayed.row(index) for index in shown]}


def with_etas(where: Town | Session, rows: list[dict], replayed: Replay | None = None,
              upto: int | None = None) -> list[dict]:
    """``rows`` (queue rows) with their item's ``start_at`` and ``done_at``; None when it cannot start.

    The order of every item ahead counts, so the replay walks the queue from
    its head; times are written out only for the rows shown.  ``upto``: the
    rows are among the queue's first ``upto``, and the replay (when none is
    given) stops once those have started (:func:`head_slots`), so a page of
    50 rows of a long queue costs what those rows and the items launched
    before them cost.
    """
    if replayed is not None or upto is None:
        replayed = replayed or replay(where)
        slots = replayed.result.slots
        by_item = replayed.by_item
    else:
        slots = head_slots(Session.of(where), upto)
        by_item = {slot.item_id: index for index, slot in enumerate(slots)}
    for row in rows:
        index = by_item.get(row["id"])
        slot = slots[index] if index is not None else None
        row["start_at"] = _at(slot.start_at) if slot is not None else None
        row["done_at"] = _at(slot.done_at) if slot is not None else None
    return rows


def list_queue(where: Town | Session, executor: Executor | None = None, limit: int = 0,
               offset: int = 0) -> list[dict]:
    """``scheduler list``: the queue's rows with their expected start and finish (one survey).

    A page (``limit``) replays the queue only until its rows have started.
    """
    session = Session.of(where, executor)
    if limit:  # the queue's head read once, for the rows and for their times
        session.head_rows = max(offset + limit, HEAD_ROWS)
    rows = queue_model.list_queue(session, limit=limit, offset=offset)
    return with_etas(session, rows, upto=offset + limit if limit else None)


def explain(where: Town | Session, item_id: str, executor: Executor | None = None,
            now: float | None = None) -> dict:
    """``scheduler explain`` with when the item would start and finish, and what that stands on.

    ``start_at``, ``done_at``, ``done_p90_at``, ``runtime_p50``,
    ``runtime_p90`` and ``basis`` are those of ``scheduler forecast``'s row
    (None when the item is not in the queue or cannot start).
    """
    session = Session.of(where, executor, now)
    out = queue_model.explain(session, item_id)
    row = _row_of(session, item_id) if out["queued"] else None
    if row is None:
        out.update(dict.fromkeys(EXPLAINED))
        if not out["queued"]:
            out.update(_running_eta(session, item_id) or {})
        return out
    out.update({key: row[key] for key in EXPLAINED})
    if "why" in row:
        out["eta_why"] = row["why"]
    return out


def _row_of(session: Session, item_id: str) -> dict | None:
    """The forecast row of queued ``item_id``, the queue replayed only until that item has started (a
    slot, once given, never changes: :func:`~sluice.core.replay.simulate_head`); None when the queue the
    replay reads does not hold it.  Explaining the 10,000th of 100,000 queued items replays 10,000 of
    them, not all, and builds no row for the rest."""
    reading, caps = _queue_reading(session, HEAD_ROWS)  # the head's rows, when the queue's head is read
    try:
        index = reading.ids.index(item_id)
    except ValueError:
        head = session.head[3] if session.head is not None else None
        if session.surveyed is not None or head is None:
            return None  # the whole queue was read: the item is not in it
        if any(c.context.work_id == item_id for c in head.view.held + head.view.stale):
            return None  # held or closing: no forecast row
        reading, caps = _queue_reading(session)  # further down than the head's rows: the whole queue
        try:
            index = reading.ids.index(item_id)
        except ValueError:
            return None
    setting = _setting(session, caps)
    queue = setting.queue(reading)
    slots = model.simulate_head(session.now, _FirstRows(queue, index + 1), index + 1, setting.running,
                                setting.limits, setting.charges)
    result = model.QueueForecast(session.now, slots, None, None)
    budgets = _budgets(setting.limits, setting.charges, session.now)
    return Replay(result, queue, setting.daemon, budgets).row(index)


def _running_eta(session: Session, item_id: str) -> dict | None:
    """When a running polecat of ``item_id`` is expected to end: its start, the learned rest, the basis.

    ``running: true`` tells it from a queued item's forecast; ``done_p90_at``
    stays None (what is left of a run is one median, not a spread).
    """
    town, now = session.files, session.now
    record = next((r for r in runlog.running(town).values() if r.get("item_id") == item_id), None)
    if record is None:
        return None
    learned = learn(town, session.config.scheduler.seconds("polecat_timeout") or None)
    estimate = learned.estimate(record.get("rig") or "", record.get("issue_type"), record.get("labels") or ())
    done_at = _at(now + _left(learned, record, now))
    return {"running": True, "start_at": record.get("started_at"), "done_at": done_at,
            "runtime_p50": round(estimate.runtime_p50, 3), "runtime_p90": round(estimate.runtime_p90, 3),
            "basis": {**estimate.basis, "kind": estimate.kind}}


def _left(learned: model.Model, record: dict, now: float) -> float:
    """What is left of a running run (its run record), by the learned runtimes."""
    started = parse_ts(record.get("started_at"))
    elapsed = now - started if started is not None else 0.0
    labels = record.get("labels") or ()
    return learned.left(record.get("rig") or "", elapsed, record.get("issue_type"), labels,
                        default_runtime=model.DEFAULT_RUNTIME)


def _charges(town: Town, limits: model.Limits, now: float) -> list[model.Charge]:
    """The launches the budget ledger holds (only read when a budget is set)."""
    if not (limits.town_budget > 0 or any(v > 0 for v in limits.rig_budgets.values())):
        return []
    return [model.Charge(float(entry["at_ts"]), int(entry["tokens"]), entry["rig"])
            for entry in kept.charges(town, now, limits.budget_window)]


#: The forecast row's keys ``scheduler explain`` carries.
EXPLAINED = ("start_at", "done_at", "done_p90_at", "runtime_p50", "runtime_p90", "tokens_p90", "basis",
             "budget")


def _daemon(town: Town, now: float) -> tuple[float | None, float | None]:
    """The running daemon's tick period and next tick, or (None, None) when its heartbeat is absent or stale.

    The daemon waits its interval *after* each tick, so ticks come an
    interval plus a tick's own time apart (a cycle is a process of its own,
    and its launches take time): the period is the one the heartbeat shows
    so far (first tick to last over the ticks between), never below the
    interval.  A heartbeat whose last tick is more than three periods old is
    a daemon that died without cleaning up: the forecast then assumes one
    from now.
    """
    beat = read_heartbeat(town) or {}
    interval = beat.get("interval")
    last = parse_ts(beat.get("last_tick_at"))
    if not isinstance(interval, (int, float)) or isinstance(interval, bool) or interval <= 0 or last is None:
        return None, None
    period = float(interval)
    first, ticks = parse_ts(beat.get("started_at")), beat.get("ticks")
    if first is not None and isinstance(ticks, int) and not isinstance(ticks, bool) and ticks >= 2:
        period = max(period, (last - first) / (ticks - 1))
    if now - last > 3 * period:
        return None, None
    return period, max(now, last + period)


def _at(epoch: float | None) -> str | None:
    """:func:`stamp`, remembered: the items of a tick start at the same few moments."""
    if epoch is None:
        return None
    found = _stamps.get(epoch)
    if found is None:
        if len(_stamps) >= _STAMPS_KEPT:
            _stamps.clear()
        found = _stamps[epoch] = stamp(epoch)
    return found


#: The moments :func:`_at` remembers, at most :data:`_STAMPS_KEPT` of them.
_stamps: dict[float, str] = {}
_STAMPS_KEPT = 1 << 16


def reading_row(work: Work, retry_at: float | None, why: str | None, seen) -> list:
    """One queued item as the replay reads it: ``[item id, rig, issue type, the item's labels, its
    estimated minutes, its tokens, the end of its backoff, why it cannot start, and the labels, touches
    and tokens admission reads]`` (``seen``: its :func:`~sluice.scheduler.launch.admission.applicant`)."""
    item = work.item
    return [item["id"], work.rig, item.get("issue_type"), item.get("labels") or [], minutes_of(item),
            work.tokens, retry_at, why, sorted(seen.labels), list(seen.touches), seen.tokens]
