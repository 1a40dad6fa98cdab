"""The queue replay: when each queued item would start and finish under every rule dispatch applies.

:func:`simulate` walks the dispatch order tick by tick as the daemon would,
and at each tick launches what :func:`sluice.core.admission.admit` would
admit, by the same rules on the same figures:

* the town cap, each rig's cap and each label's cap (``scheduler.label_caps``);
* the overlap gate: an item whose ``touches`` overlap those of a run held in
  its rig waits (:func:`~sluice.core.admission.touches_overlap`);
* token budgets per window (``scheduler.token_budget``, ``rigs.NAME.token_budget``
  over ``scheduler.budget_window``): each launch is charged its estimate when
  it starts, a charge counts until a window after it, and the charges already
  in the ledger (:class:`Charge`) count from the start;
* throttles and launch-failure backoff: an item waits until its
  ``not_before`` (the end of a throttle that holds it, or when its backoff
  lets it be tried again, whichever is later);
* the batch per tick, the spawn delay, and the daemon's ticks.

An item that cannot go at a tick is passed over, as dispatch passes it over,
and the items behind it go around it.  Pure and deterministic: the same
inputs give the same answer.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence

from sluice.core.admission import touches_overlap
from sluice.core.recordclass import field, frozen, recordclass
from sluice.errors import ConfigError

#: ``why`` of an item that no slot can ever take (its rig's or the town's cap is 0).
WHY_NO_CAPACITY = "capacity"
#: ``why`` of an item whose estimate alone is more than its town's or rig's budget for a window.
WHY_BUDGET = "budget"


@recordclass(frozen=True)
class Queued:
    """One queued item in dispatch order; ``why`` set means it cannot start (blocked, paused, broken)."""

    item_id: str
    rig: str
    runtime_p50: float
    runtime_p90: float
    not_before: float = 0.0  # the end of a throttle that holds it, or of its launch backoff
    why: str | None = None
    runtime_mean: float | None = None  # how long it holds its slot; None: its median
    labels: frozenset[str] = frozenset()
    touches: tuple[str, ...] = ()
    tokens: int = 0  # the launch estimate a budget is charged


@recordclass(frozen=True)
class Running:
    """A running polecat: the slots it holds (its rig, labels, touches) until ``remaining`` s from now."""

    rig: str
    remaining: float
    labels: frozenset[str] = frozenset()
    touches: tuple[str, ...] = ()


@recordclass(frozen=True)
class Charge:
    """A launch already charged to a budget: ``tokens`` at ``at`` (epoch seconds) in ``rig``."""

    at: float
    tokens: int
    rig: str = ""


@frozen
class Limits:
    """What bounds dispatch: caps (None is no cap), budgets (0 is none), batch, spawn delay, tick interval."""

    town_cap: int | None = None
    rig_caps: Mapping[str, int] = field(default_factory=dict)
    batch_size: int = 3
    spawn_delay: float = 0.0
    interval: float = 60.0
    first_tick: float | None = None  # the next daemon tick; None: now
    label_caps: Mapping[str, int] = field(default_factory=dict)
    town_budget: int = 0
    rig_budgets: Mapping[str, int] = field(default_factory=dict)
    budget_window: float = 3600.0

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"scheduler.batch_size must be >= 1 (got {self.batch_size})")
        if not self.interval > 0:
            raise ConfigError(f"the daemon interval must be > 0 (got {self.interval})")
        if self.spawn_delay < 0:
            raise ConfigError(f"scheduler.spawn_delay must be >= 0 (got {self.spawn_delay})")
        if not self.budget_window > 0:
            raise ConfigError(f"scheduler.budget_window must be > 0 (got {self.budget_window})")


@recordclass(frozen=True)
class Slot:
    """When one queued item is expected to start and finish (None: it cannot start, see ``why``)."""

    item_id: str
    rig: str
    position: int
    start_at: float | None
    done_at: float | None
    done_p90_at: float | None
    why: str | None = None


@frozen
class QueueForecast:
    at: float
    slots: tuple[Slot, ...]
    drain_at: float | None  # when the last expected run (queued or running) ends; None: nothing to wait for
    drain_p90_at: float | None


class _Held:
    """What holds the town at one moment of the replay: slots by rig and label, touches, budget spend."""

    def __init__(self, limits: Limits, charges: Sequence[Charge], now: float):
        self.limits = limits
        self.busy: list[tuple[float, int, str, frozenset[str], tuple[str, ...], int]] = []  # frees at, seq, …
        self.held = 0  # runs held: alike runs that free together are one entry of ``busy``, counted
        self.seq = 0
        self.per_rig: dict[str, int] = {}
        self.per_label: dict[str, int] = {}
        self.touching: dict[str, dict[int, tuple[str, ...]]] = {}
        self.budgeted = limits.town_budget > 0 or any(v > 0 for v in limits.rig_budgets.values())
        self.charges: deque[Charge] = deque()
        self.town_spend = 0
        self.rig_spend: dict[str, int] = {}
        if self.budgeted:  # the ledger's charges inside the window, oldest first (as admission counts them)
            for charge in sorted(charges, key=lambda c: c.at):
                if now - limits.budget_window < charge.at:
                    self._charge(charge)

    def _charge(self, charge: Charge) -> None:
        self.charges.append(charge)
        self.town_spend += charge.tokens
        self.rig_spend[charge.rig] = self.rig_spend.get(charge.rig, 0) + charge.tokens

    def hold(self, frees: float, rig: str, labels: frozenset[str], touches: tuple[str, ...],
             count: int = 1) -> None:
        self.seq += 1
        heapq.heappush(self.busy, (frees, self.seq, rig, labels, touches, count))
        self.held += count
        self.per_rig[rig] = self.per_rig.get(rig, 0) + count
        for label in labels:
            self.per_label[label] = self.per_label.get(label, 0) + count
        if touches:  # alike runs that touch paths overlap each other: never more than one at once
            self.touching.setdefault(rig, {})[self.seq] = touches

    def launch(self, item: Queued, start: float, frees: float, count: int = 1) -> None:
        """Hold ``count`` runs alike to ``item`` started at ``start``, and charge their tokens."""
        self.hold(frees, item.rig, item.labels, item.touches, count)
        if self.budgeted:
            self._charge(Charge(start, item.tokens * count, item.rig))

    def room(self, item: Queued, most: int) -> int:
        """How many items alike to ``item`` (which :meth:`goes`) may go now one after another, at most
        ``most``: each cap's room, each budget's room in tokens, and one at a time for touched paths."""
        limits = self.limits
        room = most
        if limits.town_cap is not None:
            room = min(room, limits.town_cap - self.held)
        rig_cap = limits.rig_caps.get(item.rig)
        if rig_cap is not None:
            room = min(room, rig_cap - self.per_rig.get(item.rig, 0))
        for label in item.labels:
            cap = limits.label_caps.get(label)
            if cap is not None:
                room = min(room, cap - self.per_label.get(label, 0))
        if item.tokens > 0:
            if limits.town_budget > 0:
                room = min(room, (limits.town_budget - self.town_spend) // item.tokens)
            rig_budget = limits.rig_budgets.get(item.rig, 0)
            if rig_budget > 0:
                room = min(room, (rig_budget - self.rig_spend.get(item.rig, 0)) // item.tokens)
        if item.touches:
            room = min(room, 1)
        return max(room, 1)

    def release(self, tick: float) -> None:
        """Free the slots whose runs have ended by ``tick`` and forget charges a window old."""
        while self.busy and self.busy[0][0] <= tick:
            _, seq, rig, labels, touches, count = heapq.heappop(self.busy)
            self.held -= count
            self.per_rig[rig] -= count
            for label in labels:
                self.per_label[label] -= count
            if touches:
                del self.touching[rig][seq]
        window = self.limits.budget_window
        while self.charges and self.charges[0].at + window <= tick:
            charge = self.charges.popleft()
            self.town_spend -= charge.tokens
            self.rig_spend[charge.rig] -= charge.tokens

    def full(self) -> bool:
        cap = self.limits.town_cap
        return cap is not None and self.held >= cap

    def goes(self, item: Queued) -> bool:
        """Whether admission would let ``item`` go now (its ``not_before`` is the caller's)."""
        limits = self.limits
        rig_cap = limits.rig_caps.get(item.rig)
        if rig_cap is not None and self.per_rig.get(item.rig, 0) >= rig_cap:
            return False
        for label in item.labels:
            cap = limits.label_caps.get(label)
            if cap is not None and self.per_label.get(label, 0) >= cap:
                return False
        if limits.town_budget > 0 and self.town_spend + item.tokens > limits.town_budget:
            return False
        rig_budget = limits.rig_budgets.get(item.rig, 0)
        if rig_budget > 0 and self.rig_spend.get(item.rig, 0) + item.tokens > rig_budget:
            return False
        if item.touches:
            for other in self.touching.get(item.rig, {}).values():
                if touches_overlap(item.touches, other):
                    return False
        return True


def _never(item: Queued, limits: Limits) -> str | None:
    """Why ``item`` can never start whatever else runs, or None."""
    if (limits.town_cap is not None and limits.town_cap <= 0) or limits.rig_caps.get(item.rig, 1) <= 0:
        return WHY_NO_CAPACITY
    if any(limits.label_caps.get(label, 1) <= 0 for label in item.labels):
        return WHY_NO_CAPACITY
    rig_budget = limits.rig_budgets.get(item.rig, 0)
    if (limits.town_budget > 0 and item.tokens > limits.town_budget) or (0 < rig_budget < item.tokens):
        return WHY_BUDGET
    return None


def simulate(now: float, queue: Sequence[Queued], running: Sequence[Running] = (),
             limits: Limits = Limits(), charges: Sequence[Charge] = ()) -> QueueForecast:
    """Replay dispatch over ``queue`` (in dispatch order) from ``now``; the same inputs give the same answer.

    Launches happen only at daemon ticks (``first_tick`` then every
    ``interval``), at most ``batch_size`` a tick, ``spawn_delay`` apart.  At
    a tick the queue is walked in order and an item is launched when the
    rules of the module docstring let it; an item that cannot go is passed
    over and waits for a later tick.  A slot is held for the item's mean
    runtime when it has one (a queue drains by the sum of its runtimes, and
    a sum goes by the mean), else its median; ``done_at`` is the item's own
    median finish and the p90 only widens it.  Ticks at which nothing can
    change are skipped, and a tick asks each group of waiting items alike
    once (:func:`_walk`), so a long queue behind a cap costs its groups per
    tick, not its items; within a tick, an item shaped like one already
    passed over (rig, labels, touches, tokens) is passed over without asking
    again, since launches only ever take room.

    Raising a cap does not always bring every ETA forward, as it does not in
    dispatch either.  Raising the town cap under rig caps does while the
    batch does not bind, and the tests hold it to that (without throttles: a
    throttled item passed over at one tick can find the slots a larger cap
    gave to the items behind it still held when its throttle ends); a batch
    that binds goes to the items first in the queue, so items ahead that a
    larger cap lets go earlier can take a tick's batch from one behind them.  With label caps an item carrying
    two capped labels can start earlier under a raised cap and take the
    slot of one label from an item behind it that, under the lower cap,
    had gone first; the overlap gate and the budgets do the same with
    touches and tokens: more room ahead lets an earlier item hold a path,
    or spend a window's tokens, that a later one then waits for.
    """
    return simulate_first(now, queue, len(queue), running, limits, charges)


def simulate_head(now: float, queue: Sequence[Queued], rows: int, running: Sequence[Running] = (),
                  limits: Limits = Limits(), charges: Sequence[Charge] = ()) -> tuple[Slot, ...]:
    """The slots of the first ``rows`` items of ``queue``, exactly as :func:`simulate` gives them.

    The replay stops once each of them has started (a slot, once given,
    never changes), so a view of the first 50 rows of a long queue asks
    ``queue`` for the items the walk reaches before then, not for every
    one: ``queue`` may build its items as they are asked for.
    """
    return tuple(_walk(now, queue, running, limits, charges, min(rows, len(queue)))[0])


def simulate_first(now: float, queue: Sequence[Queued], rows: int, running: Sequence[Running] = (),
                   limits: Limits = Limits(), charges: Sequence[Charge] = ()) -> QueueForecast:
    """:func:`simulate`'s slots of the first ``rows`` items, and its drain of the whole queue.

    The walk goes to the end of the queue (the queue drains when its last
    run ends), but of the items past ``rows`` it reads only what makes them
    alike (:class:`_Alike`), never their ids, so ``queue`` may give one
    object for all the items of a kind there.  A queue that does may also
    say where such a stretch ends: ``queue.alike_until(position)``, the
    position after the last of the items from ``position`` on that it gives
    as the very same object.  Then the items of a stretch that go together
    at a tick are counted, not reached one by one, a stretch that can never
    start is passed over whole, and a run of ticks at which only a batch of
    one stretch can go, and nothing waits, is taken at once
    (:func:`_batches_of_a_stretch`): a queue of 100,000 items of a few kinds
    costs its ticks and stretches, not its items, and a tick that only
    launches a batch costs a few sums.
    """
    slots, drain, drain_p90 = _walk(now, queue, running, limits, charges, min(rows, len(queue)), to_end=True)
    return QueueForecast(now, tuple(slots), drain, drain_p90)


class _Alike:
    """Queued items that a tick passes over together, waiting in queue order.

    What decides whether an item may go (its rig, labels, touches, tokens
    under a budget, hold and ``why``) is the same for all of them, so what
    stops one stops the next, and a tick asks each such group once instead
    of each item: a queue of 100,000 behind a rig cap walks the few groups
    that wait at each tick, not the 100,000 items.  Each item keeps its own
    runtimes, which count only once it goes.
    """

    __slots__ = ("item", "never", "order", "passed", "shape", "waiting")

    def __init__(self, item: Queued, never: str | None, order: int, budgeted: bool):
        self.item = item  # the first of them: what admission reads of any of them
        self.shape = (item.rig, item.labels, item.touches, item.tokens if budgeted else 0)
        self.never = never  # why none of them can ever start, or None
        self.waiting: deque[tuple[int, Queued]] = deque()  # (position, item) reached and not launched
        self.order = order  # tells two groups apart (one's first position is never another's)
        self.passed = -1  # the tick (its number) at which the walk last passed the group over


def _runtimes(item: Queued) -> tuple[float, float, float | None]:
    return item.runtime_p50, item.runtime_p90, item.runtime_mean


def _walk(now: float, queue: Sequence[Queued], running: Sequence[Running], limits: Limits,
          charges: Sequence[Charge], rows: int,
          to_end: bool = False) -> tuple[list[Slot], float | None, float | None]:
    """The replay, until the first ``rows`` items have their slots (``len(queue)`` or ``to_end``: to the
    end; the slots are those of the first ``rows`` items either way).

    A tick walks the waiting items in queue order and then the items no
    tick has reached yet, launching each that may go, until its batch is
    launched or the town is full.  The items that wait are kept in groups of
    items alike (:class:`_Alike`), and a tick walks the groups' first items
    in queue order: a group whose first item cannot go is passed over whole,
    since the rest of it cannot go either (the same hold, and launches only
    take room).  The walk reaches items in queue order and takes each one's
    ``why`` and ``not_before`` as it first reaches it.  That gives the same
    answer as knowing every item from the start: a tick at which nothing
    could go and the walk did not reach the end of the queue is one at which
    the town was full, and then only a freed slot lets anything go (an
    earlier throttle's end would be a tick at which nothing launched).
    ``tests/helpers/replay_reference.py`` walks the items one by one, and the
    tests hold the two to the same slots.
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
    stretch = getattr(queue, "alike_until", None) if to_end else None  # see simulate_first
    slots: list[Slot | None] = [None] * rows
    shown = [queue[position] for position in range(rows)]
    groups: dict[tuple, _Alike] = {}
    by_object: dict[int, tuple[Queued, _Alike]] = {}  # a queue may give one object for many items
    budgeted = held.budgeted  # tokens count only under a budget

    def group_of(item: Queued) -> _Alike:
        found = by_object.get(id(item))
        if found is not None and found[0] is item:
            return found[1]
        key = (item.why, item.rig, item.labels, item.touches, item.tokens if budgeted else 0, item.not_before)
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Alike(item, item.why or _never(item, limits), len(groups), budgeted)
            by_object[id(item)] = (item, group)  # kept alive here, so its id is no other object's
            if group.never is None and item.not_before not in seen_holds:
                seen_holds.add(item.not_before)
                bisect.insort(holds_until, item.not_before)
        return group

    left = 0  # of the first ``rows`` items, those that may start and have no slot yet
    for position, item in enumerate(shown):  # what cannot start says so whether or not the walk gets there
        why = item.why or _never(item, limits)
        if why is not None:
            slots[position] = Slot(item.item_id, item.rig, position + 1, None, None, None, why)
        else:
            left += 1

    waiting = 0  # items reached and not launched; every one of them comes before ``cursor``
    cursor = 0
    holds_until: list[float] = []
    seen_holds: set[float] = set()
    tick_number = 0  # it grows at every tick walked: a group passed over notes it
    batch, spawn_delay = limits.batch_size, limits.spawn_delay
    # The groups with items waiting, as (first position, order, group), in queue order: a tick walks
    # them from the start; one whose first item moved on at this tick (some of it launched) waits in
    # ``moved`` for its new turn, and one passed over keeps its place in ``passed`` for the next tick.
    heads: list[tuple[int, int, _Alike]] = []
    peeked: tuple[int, Queued, _Alike] | None = None  # the item at ``cursor`` and its group, once looked at
    while (left or to_end) and (waiting or cursor < size):
        tick = first + tick_number * limits.interval
        held.release(tick)
        if stretch is not None and not waiting and rows <= cursor < size and not held.full():
            # Nothing waits: the tick's walk starts at ``cursor``.  Ticks that can only launch a batch
            # of its stretch each are taken together (:func:`_batches_of_a_stretch`).
            if peeked is None or peeked[0] != cursor:
                reached = queue[cursor]
                peeked = (cursor, reached, group_of(reached))
            if peeked[2].never is None:
                alike = min(stretch(cursor), size) - cursor
                ticks, drain, drain_p90 = _batches_of_a_stretch(held, peeked[1], alike, first, tick_number,
                                                                drain, drain_p90)
                if ticks:
                    cursor += ticks * batch
                    tick_number += ticks
                    continue
        launched = 0
        refused: set[tuple] = set()
        at = 0
        moved: list[tuple[int, int, _Alike]] = []
        passed: list[tuple[int, int, _Alike]] = []
        while launched < batch and not held.full():
            if at < len(heads) and (not moved or heads[at][0] < moved[0][0]):
                position, _, group = heads[at]
                source = heads
            elif moved:
                position, _, group = moved[0]
                source = moved
            elif cursor < size:  # every waiting item was walked: the next one no tick has reached
                position = cursor
                cursor += 1
                if peeked is not None and peeked[0] == position:  # looked at already, by a launch
                    _, reached, group = peeked
                else:
                    reached = queue[position] if position >= rows else shown[position]
                    group = group_of(reached)
                if group.never is not None:
                    if position >= rows and stretch is not None:  # so is the rest of its stretch
                        cursor = max(cursor, min(stretch(position), size))
                    continue
                if group.passed == tick_number:  # passed over at this tick: it waits with its group
                    group.waiting.append((position, reached))
                    waiting += 1
                    continue
                source = None  # none of its group waits (it would be walked already): it is asked now
            else:
                break
            item = group.item
            if item.not_before > tick or (refused and group.shape in refused) or not held.goes(item):
                if item.not_before <= tick:
                    refused.add(group.shape)
                group.passed = tick_number
                if source is None:
                    group.waiting.append((position, reached))
                    waiting += 1
                    passed.append((position, group.order, group))
                elif source is heads:
                    passed.append(heads[at])
                    at += 1
                else:
                    passed.append(heapq.heappop(moved))
                continue
            # The first item goes, with its own runtimes; with no spawn delay, the items of its group
            # with the same runtimes that the walk meets next go with it, as far as there is room:
            # they start, end and free their slots together.
            if source is None:
                first_item, others = reached, size
            else:
                first_item = group.waiting.popleft()[1]
                waiting -= 1
                if source is heads:
                    at += 1
                else:
                    heapq.heappop(moved)
                # where the next other group's first item stands (the queue's end: none waits)
                others = min(heads[at][0] if at < len(heads) else size, moved[0][0] if moved else size)
            runtimes = _runtimes(first_item)
            start = tick + launched * spawn_delay
            done, done_p90 = start + runtimes[0], start + max(runtimes[0], runtimes[1])
            frees = start + (runtimes[2] if runtimes[2] is not None else runtimes[0])
            together = [position]  # those that go together and are shown (< rows): ``count`` in all
            count = 1
            most = 0 if spawn_delay == 0 else 1  # how many may go together, worked out once one could
            while (group.waiting and group.waiting[0][0] < others
                   and _runtimes(group.waiting[0][1]) == runtimes):
                most = most or held.room(item, batch - launched)
                if count >= most:
                    break
                together.append(group.waiting.popleft()[0])
                waiting -= 1
                count += 1
            if not group.waiting and others == size:  # the walk's next item is one it has not reached
                town_cap = limits.town_cap
                while cursor < size:
                    if launched + count >= batch or (town_cap is not None and held.held + count >= town_cap):
                        break  # the tick is over: its walk reads no further
                    after = queue[cursor] if cursor >= rows else shown[cursor]
                    peeked = (cursor, after, group_of(after))  # the walk's next item, whatever happens here
                    if peeked[2] is not group or _runtimes(after) != runtimes:
                        break
                    most = most or held.room(item, batch - launched)
                    if count >= most:
                        break
                    if cursor >= rows and stretch is not None:  # the same object up to its stretch's end
                        take = min(max(min(stretch(cursor), size) - cursor, 1), most - count)
                    else:
                        take = 1
                        together.append(cursor)
                    count += take
                    cursor += take
            if group.waiting:
                heapq.heappush(moved, (group.waiting[0][0], group.order, group))
            held.launch(item, start, frees, count)
            for position in together:
                if position < rows:
                    slots[position] = Slot(shown[position].item_id, item.rig, position + 1, start, done,
                                           done_p90)
                    left -= 1
            # The queue drains when the last slot frees; its p90 is no earlier than that.
            drain = frees if drain is None else max(drain, frees)
            drain_p90 = max(done_p90, frees) if drain_p90 is None else max(drain_p90, done_p90, frees)
            launched += count
        heads = passed + moved + heads[at:]  # runs in queue order each: the sort merges them
        heads.sort()
        if (not left and not to_end) or (not waiting and cursor >= size):
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


def _batches_of_a_stretch(held: _Held, item: Queued, alike: int, first: float, tick_number: int,
                          drain: float | None,
                          drain_p90: float | None) -> tuple[int, float | None, float | None]:
    """Launch together the ticks from ``tick_number`` on at which the walk could only launch a whole batch
    of the stretch of ``alike`` items, all ``item`` itself, that it reaches first; return how many ticks
    that was (0: none is sure to) and the drain after them.

    It is exact.  The caller sees that nothing waits, so at each of these
    ticks the walk starts at the stretch, and every item of it may go: its
    ``not_before`` has passed, it touches no path and no budget is set, and
    every cap it counts under (town, rig, labels) has room for a batch at
    each tick even if nothing were freed meanwhile (a slot freed only adds
    room).  So each tick launches ``batch_size`` of them, ``spawn_delay``
    apart, and its walk ends on the batch before reading past it.  A run
    that ends by the tick after these would be freed at that tick's start,
    before anything reads the holds again, so it is not held at all; and
    the last run to start is the last to end (a float sum only grows with
    what it adds to), so it alone can move the drain.
    """
    limits = held.limits
    batch, spawn_delay = limits.batch_size, limits.spawn_delay
    tick = first + tick_number * limits.interval
    if held.budgeted or item.touches or item.not_before > tick or not held.goes(item):
        return 0, drain, drain_p90
    ticks = held.room(item, alike) // batch  # goes(): every cap has room for one, so this is their room
    if not ticks:
        return 0, drain, drain_p90
    p50, p90, mean = _runtimes(item)
    slot_for = mean if mean is not None else p50
    after = first + (tick_number + ticks) * limits.interval  # the next tick, which frees what ends by then
    for number in range(tick_number, tick_number + ticks):
        tick = first + number * limits.interval
        for launched in range(batch) if spawn_delay else (0,):  # with no delay a batch goes as one
            start = tick + launched * spawn_delay
            if not start + slot_for <= after:  # as release() reads it: what ends by ``after`` is freed
                held.launch(item, start, start + slot_for, 1 if spawn_delay else batch)
    done_p90, frees = start + max(p50, p90), start + slot_for
    drain = frees if drain is None else max(drain, frees)
    drain_p90 = max(done_p90, frees) if drain_p90 is None else max(drain_p90, done_p90, frees)
    return ticks, drain, drain_p90


def _next_moment(held: _Held, holds_until: list[float], tick: float) -> float | None:
    """After a tick at which nothing could go, the next moment that matters: the first at which a slot
    frees, a charge leaves the budget window, or a throttle or backoff (of those in ``holds_until``,
    sorted) ends; None when there is none."""
    moments = []
    if held.busy:
        moments.append(held.busy[0][0])
    if held.charges:
        moments.append(held.charges[0].at + held.limits.budget_window)
    later = bisect.bisect_right(holds_until, tick)
    if later < len(holds_until):
        moments.append(holds_until[later])
    return min(moments) if moments else None


def _stuck(shown: Sequence[Queued], slots: list[Slot | None]) -> None:
    """Give every shown item still without a slot one that says no slot can take it."""
    for position, stuck in enumerate(shown):  # waiting, or not reached yet
        if slots[position] is None:
            slots[position] = Slot(stuck.item_id, stuck.rig, position + 1, None, None, None, WHY_NO_CAPACITY)
