"""Dispatch planning: how many queued items one cycle may launch, and which.

This is the pure core of Gas Town's deferred dispatch (its ``PlanDispatch``, rule R-F):
given the free polecat slots, the batch size and the ranked pending contexts,
decide what to launch and say *why* the cycle stopped where it did.  Keeping
it free of IO and clocks is what lets the rules be pinned down by table tests
and hypothesis properties; the scheduler module does the launching.

Also here: the circuit breaker (a context that failed ``max_failures`` times
is taken out of the queue), an exponential retry delay and the "oldest
context wins" de-duplication.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from sluice.core.recordclass import frozen
from sluice.errors import ConfigError

T = TypeVar("T")

#: The four reasons a plan can give, exactly Gas Town's words.
REASON_NONE = "none"  # nothing was ready
REASON_CAPACITY = "capacity"  # free polecat slots were the binding limit
REASON_BATCH = "batch"  # the batch size was the limit (also every tie)
REASON_READY = "ready"  # fewer items were ready than either limit allowed


@frozen
class DispatchPlan(Generic[T]):
    """What one cycle will launch; ``skipped`` items stay queued for later."""

    to_dispatch: tuple[T, ...]
    skipped: int
    reason: str


def plan_dispatch(capacity: int, batch: int, pending: Sequence[T]) -> DispatchPlan[T]:
    """Plan one dispatch cycle (Gas Town ``PlanDispatch``, rules R-F1..R-F4).

    ``pending`` must already be in dispatch order; the plan takes a prefix of
    it, so the ranking decided elsewhere is never second-guessed here.

    A ``batch`` below 1 can only come from a hand-edited config.  Gas Town
    silently dispatched nothing (batch 0) or panicked (negative); here it is a
    :class:`ConfigError` so the user learns which key to fix.  It is checked
    first, even with an empty queue, so a broken config surfaces at once
    rather than on the day work arrives.
    """
    if batch < 1:
        raise ConfigError(f"scheduler.batch_size must be >= 1 (got {batch})")
    items = tuple(pending)
    ready = len(items)
    if ready == 0:
        return DispatchPlan((), 0, REASON_NONE)
    if capacity <= 0:
        return DispatchPlan((), ready, REASON_CAPACITY)

    count = min(batch, capacity, ready)
    # Only a *strictly* smaller limit earns its name; any tie is "batch".
    # The two strict conditions cannot both hold, so the order is immaterial.
    if capacity < batch and capacity < ready:
        reason = REASON_CAPACITY
    elif ready < batch and ready < capacity:
        reason = REASON_READY
    else:
        reason = REASON_BATCH
    return DispatchPlan(items[:count], ready - count, reason)


# --------------------------------------------------------------------------
# Circuit breaker


def is_circuit_broken(failures: int, max_failures: int) -> bool:
    """True once an item has failed as often as the breaker allows.

    The count never decays (R-H4): a broken context is closed.  Gas Town
    stops there; sluice's breaker (``sluice.scheduler.launch.breaker``) queues the
    item again once ``scheduler.breaker_cooldown`` has passed, one failure
    short of the threshold (half-open), and a re-sling starts a fresh count.
    """
    return failures >= max_failures


# --------------------------------------------------------------------------
# Retry back-off

# 2.0 ** 1024 overflows a float; any sane maximum is reached long before.
_LARGEST_EXPONENT = 1023


def retry_delay(failures: int, base: float, maximum: float) -> float:
    """Seconds to wait before retrying an item that failed ``failures`` times.

    Doubles from ``base`` with every failure and is capped at ``maximum``, so
    a transient outage (a Dolt blip, a busy lock) does not burn the whole
    failure budget in back-to-back cycles.  No failure, no wait.
    """
    if base < 0 or maximum < 0:
        raise ValueError(f"retry delays must be >= 0 (base={base}, maximum={maximum})")
    if failures <= 0:
        return 0.0
    exponent = min(failures - 1, _LARGEST_EXPONENT)
    return float(min(base * 2.0**exponent, maximum))


def next_attempt_at(
    last_failure_at: float | None,
    failures: int,
    base: float,
    maximum: float,
) -> float | None:
    """Earliest time (same clock as ``last_failure_at``) to try the item again.

    ``None`` means there is nothing to wait for: the item never failed.
    """
    if last_failure_at is None or failures <= 0:
        return None
    return last_failure_at + retry_delay(failures, base, maximum)


# --------------------------------------------------------------------------
# One context per item


def pick_oldest_per_item(
    contexts: Iterable[T],
    item_of: Callable[[T], Hashable],
    order_key: Callable[[T], Any],
    id_of: Callable[[T], Any] | None = None,
) -> tuple[list[T], list[T]]:
    """Keep one context per work item: the oldest one.

    Racing slings (or a crash between two writes) can leave several open
    contexts for the same item; only one may ever be dispatched.  "Oldest"
    is the smallest ``order_key`` (normally ``enqueued_at``), ties broken by
    ``id_of`` when given, else by input order.

    Returns ``(survivors, duplicates)``, both in input order, so a caller can
    keep its own ranking and close or report the duplicates.
    """
    listed = list(contexts)

    def key(position: int) -> tuple[Any, ...]:
        context = listed[position]
        return (order_key(context), id_of(context) if id_of is not None else None, position)

    # Keys are worked out only where an item is seen twice: duplicates are rare, and a survey of
    # 100,000 contexts would otherwise build 100,000 keys to compare none of them.
    winner_at: dict[Hashable, int] = {}
    rivals = False
    for position, context in enumerate(listed):
        item = item_of(context)
        held = winner_at.get(item)
        if held is None:
            winner_at[item] = position
        else:
            rivals = True
            if key(position) < key(held):
                winner_at[item] = position
    if not rivals:
        return listed, []
    winning_positions = set(winner_at.values())
    survivors = [c for i, c in enumerate(listed) if i in winning_positions]
    duplicates = [c for i, c in enumerate(listed) if i not in winning_positions]
    return survivors, duplicates
