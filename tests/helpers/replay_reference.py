"""The queue replay walked one item at a time: the plain reading of its rules, kept as the oracle
that :func:`sluice.core.replay.simulate` (which walks items alike together) is held to."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from sluice.core.replay import (
    Charge,
    Limits,
    Queued,
    QueueForecast,
    Running,
    Slot,
    _Held,
    _never,
    _next_moment,
    _stuck,
)


def simulate_one_by_one(now: float, queue: Sequence[Queued], running: Sequence[Running] = (),
                        limits: Limits = Limits(), charges: Sequence[Charge] = (),
                        rows: int | None = None) -> QueueForecast:
    """The replay of every item (``rows``: until the first ``rows`` have started), one item at a time."""
    slots, drain, drain_p90 = walk(now, queue, running, limits, charges,
                                   len(queue) if rows is None else min(rows, len(queue)))
    return QueueForecast(now, tuple(slots), drain, drain_p90)


def walk(now: float, queue: Sequence[Queued], running: Sequence[Running], limits: Limits,
          charges: Sequence[Charge], rows: int) -> tuple[list[Slot], float | None, float | None]:
    """The replay, until the first ``rows`` items have their slots (``len(queue)``: to the end).

    The walk reaches items in queue order and takes each one's ``why`` and
    ``not_before`` as it first reaches it.  That gives the same answer as
    knowing every item from the start: a tick at which nothing could go and
    the walk did not reach the end of the queue is one at which the town
    was full, and then only a freed slot lets anything go (an earlier
    throttle's end would be a tick at which nothing launched).
    """
    first = max(now, limits.first_tick if limits.first_tick is not None else now)
    held = _Held(limits, charges, now)
    drain, drain_p90 = None, None
    for run in running:
        end = now + max(0.0, run.remaining)
        held.hold(end, run.rig, run.labels, run.touches)
        drain = end if drain is None else max(drain, end)
        drain_p90 = drain

    size = len(queue)
    slots: list[Slot | None] = [None] * rows
    shown = [queue[position] for position in range(rows)]
    left = 0  # of the first ``rows`` items, those that may start and have no slot yet
    for position, item in enumerate(shown):  # what cannot start says so whether or not the walk gets there
        why = item.why or _never(item, limits)
        if why is not None:
            slots[position] = Slot(item.item_id, item.rig, position + 1, None, None, None, why)
        else:
            left += 1

    def reached(position: int) -> Queued | None:
        """The item at ``position`` if it may start (its ``not_before`` noted), else None."""
        if position < rows:
            item = shown[position]
            if slots[position] is not None:  # it cannot start: its slot says why
                return None
        else:
            item = queue[position]
            if (item.why or _never(item, limits)) is not None:
                return None
        if item.not_before not in seen_holds:
            seen_holds.add(item.not_before)
            bisect.insort(holds_until, item.not_before)
        return item

    # Items passed over at an earlier tick wait in ``waiting`` (in order); all of them come before
    # ``cursor``, which no tick has reached yet.  A tick walks only as far as it can launch.
    waiting: list[int] = []
    cursor = 0
    holds_until: list[float] = []
    seen_holds: set[float] = set()
    tick_number = 0
    while left and (waiting or cursor < size):
        tick = first + tick_number * limits.interval
        held.release(tick)
        launched, walked = 0, 0
        kept: list[int] = []
        refused: set[tuple] = set()
        while launched < limits.batch_size and not held.full():
            if walked < len(waiting):
                position = waiting[walked]
                walked += 1
                item = shown[position] if position < rows else queue[position]
            elif cursor < size:
                position = cursor
                cursor += 1
                item = reached(position)
                if item is None:
                    continue
            else:
                break
            shape = (item.rig, item.labels, item.touches, item.tokens)
            if item.not_before > tick or shape in refused or not held.goes(item):
                if item.not_before <= tick:
                    refused.add(shape)
                kept.append(position)
                continue
            start = tick + launched * limits.spawn_delay
            done, done_p90 = start + item.runtime_p50, start + max(item.runtime_p50, item.runtime_p90)
            frees = start + (item.runtime_mean if item.runtime_mean is not None else item.runtime_p50)
            held.launch(item, start, frees)
            if position < rows:
                slots[position] = Slot(item.item_id, item.rig, position + 1, start, done, done_p90)
                left -= 1
            # The queue drains when the last slot frees; its p90 is no earlier than that.
            drain = frees if drain is None else max(drain, frees)
            drain_p90 = max(done_p90, frees) if drain_p90 is None else max(drain_p90, done_p90, frees)
            launched += 1
        waiting = kept + waiting[walked:]
        if not left or (not waiting and cursor >= size):
            break
        if launched:
            tick_number += 1
            continue
        moment = _next_moment(held, holds_until, tick)
        if moment is None:  # cannot happen (_never() took out what cannot start): no input loops forever
            _stuck(shown, slots)
            break
        tick_number = max(tick_number + 1, math.ceil((moment - first) / limits.interval))
    return [s for s in slots if s is not None], drain, drain_p90
