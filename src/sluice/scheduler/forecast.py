"""``scheduler forecast``: when each queued item is expected to start and finish.

The readings (queue in dispatch order, running runs, caps, throttles, the
daemon's interval, the run history) are gathered here; every decision is
:mod:`sluice.core.forecast`'s, so what is learned and how the queue is
replayed is tested on plain values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core import admission as rules
from sluice.core import forecast as model
from sluice.core.items import estimated_minutes, parse_ts
from sluice.scheduler import daemon
from sluice.scheduler.runs import stamp
from sluice.scheduler.session import Session
from sluice.store import admission_state as kept
from sluice.store import runs as log
from sluice.store.state import load_state

if TYPE_CHECKING:
    from sluice.executors.base import Executor
    from sluice.store.town import Town


def learn(town: Town, timeout: float | None = None, types: dict[str, str] | None = None) -> model.Model:
    """The model of the town's run history (the log as one process keeps it, read incrementally)."""
    types = types or {}
    return model.learn(model.sample_of(r, types.get(r.get("item_id", "")), timeout)
                       for r in log.read_runs(town).values())


def forecast(where: Town | Session, executor: Executor | None = None, limit: int = 0,
             now: float | None = None) -> dict:
    """``scheduler forecast``: the queue replayed under today's caps from the learned runtimes."""
    from sluice.scheduler.queue import _survey

    session = Session.of(where, executor, now)
    town, config, now = session.files, session.config, session.now
    view, assessment = _survey(session)
    sched = config.scheduler
    timeout = sched.seconds("polecat_timeout") or None
    works = [(w, None) for w in view.ready + view.backing_off] + [(w, rules.BLOCKED) for w in view.blocked]
    types = {w.item["id"]: w.item.get("issue_type") or "task" for w, _ in works}
    learned = learn(town, timeout, types)
    default = model.DEFAULT_RUNTIME
    paused = load_state(town).paused

    throttle_end: dict[str | None, float] = {}
    for throttle in kept.throttles(town, now):
        throttle_end[throttle.rig] = max(throttle_end.get(throttle.rig, 0.0), throttle.until)

    queue, estimates = [], []
    for work, why in works:
        item = work.item
        minutes = estimated_minutes(item)
        if minutes is None and isinstance(item.get("metadata"), dict):
            minutes = estimated_minutes(item["metadata"])
        estimate = learned.estimate(work.rig, item.get("issue_type"), item.get("labels") or (), minutes,
                                    default, work.tokens)
        estimates.append(estimate)
        held_until = max(throttle_end.get(None, 0.0), throttle_end.get(work.rig, 0.0))
        queue.append(model.Queued(item["id"], work.rig, estimate.runtime_p50, estimate.runtime_p90,
                                  not_before=held_until, why=rules.PAUSED if paused else why,
                                  runtime_mean=estimate.runtime_mean))

    running = []
    for record in log.digest(town).running.values():
        started = parse_ts(record.get("started_at"))
        elapsed = now - started if started is not None else 0.0
        rig = record.get("rig") or ""
        running.append(model.Running(rig, learned.left(rig, elapsed, record.get("issue_type"),
                                                       record.get("labels") or (), default_runtime=default)))

    interval, next_tick = _daemon(town, now)
    limits = model.Limits(town_cap=sched.max_polecats, rig_caps=dict(assessment.limits.rig_caps),
                          batch_size=sched.batch_size, spawn_delay=sched.seconds("spawn_delay"),
                          interval=interval or daemon.DEFAULT_INTERVAL, first_tick=next_tick)
    result = model.simulate(now, queue, running, limits)
    items = []
    for slot, estimate in zip(result.slots, estimates, strict=True):
        row = {
            "item_id": slot.item_id, "rig": slot.rig, "position": slot.position,
            "start_at": _at(slot.start_at), "done_at": _at(slot.done_at),
            "done_p90_at": _at(slot.done_p90_at),
            "runtime_p50": round(estimate.runtime_p50, 3), "runtime_p90": round(estimate.runtime_p90, 3),
            "tokens_p50": estimate.tokens_p50, "basis": {**estimate.basis, "kind": estimate.kind},
        }
        if slot.why is not None:
            row["why"] = slot.why
        items.append(row)
    return {
        "at": stamp(now), "drain_at": _at(result.drain_at), "drain_p90_at": _at(result.drain_p90_at),
        # With no daemon heartbeat the forecast assumes one ticking at the default interval from now.
        "daemon": {"running": interval is not None, "interval": limits.interval},
        "items_total": len(items), "items": items[:limit] if limit else items,
    }


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
    beat = daemon.read_heartbeat(town) or {}
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
    return None if epoch is None else stamp(epoch)
