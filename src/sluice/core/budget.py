"""Budget fit: does an item's p90 token use fit what is left of a token budget's window, and if not, when.

Admission holds a launch whose tokens would take the spend inside the
window (``scheduler.budget_window``) above the budget (reason ``budget``);
the window slides, so room comes back as old launches leave it.  These
answers are over plain values — the launches charged, the budget, the
window, ``now`` — and read the charges exactly as admission counts them (a
charge stamped up to a window in the future, after the clock was set back,
still counts), so the time given is when admission would let the item go
as far as the budget is concerned, if nothing else were launched before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sluice.core.recordclass import frozen


@frozen
class Fit:
    """One budget's answer for one need: what is left, whether it fits, when it will (None: never)."""

    scope: str  # "town" or the rig's name
    budget: int
    remaining: int
    fits: bool
    room_at: float | None  # ``now`` when it fits already; None when the need alone exceeds the budget


def charges_in(charges: Iterable[tuple[float, int]], now: float, window: float) -> list[tuple[float, int]]:
    """The charges (``(at, tokens)``) admission counts at ``now``, oldest first."""
    return sorted((at, tokens) for at, tokens in charges if now - window < at <= now + window)


def fit(need: int, budget: int, charges: Sequence[tuple[float, int]], now: float, window: float,
        scope: str = "town") -> Fit:
    """Whether ``need`` tokens fit ``budget`` over ``charges`` (from :func:`charges_in`) at ``now``.

    When they do not, the room comes when enough of the oldest charges have
    left the window (each at its time plus the window); a need larger than
    the budget itself never fits.
    """
    spent = sum(tokens for _, tokens in charges)
    remaining = max(0, budget - spent)
    if spent + need <= budget:
        return Fit(scope, budget, remaining, True, now)
    if need > budget:
        return Fit(scope, budget, remaining, False, None)
    for at, tokens in charges:
        spent -= tokens
        if spent + need <= budget:
            return Fit(scope, budget, remaining, False, max(now, at + window))
    return Fit(scope, budget, remaining, False, None)  # not reached: with no charge left the need fits


def binding(fits: Sequence[Fit]) -> Fit | None:
    """Of several budgets that apply (the town's, the rig's), the one the item waits for longest."""
    if not fits:
        return None
    never = [f for f in fits if f.room_at is None]
    if never:
        return never[0]
    return max(fits, key=lambda f: (f.room_at, -f.remaining))
