"""Budget fit on plain values: what is left of a window, and when an item's p90 tokens next fit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sluice.core.budget import Fit, binding, charges_in, fit

NOW = 10_000.0
WINDOW = 3600.0


def test_a_need_that_fits_fits_now():
    charges = charges_in([(NOW - 100, 400)], NOW, WINDOW)
    assert fit(500, 1000, charges, NOW, WINDOW) == Fit("town", 1000, 600, True, NOW)


def test_room_comes_when_the_oldest_charges_leave_the_window():
    charges = charges_in([(NOW - 600, 300), (NOW - 1200, 500), (NOW - 5000, 900)], NOW, WINDOW)
    assert charges == [(NOW - 1200, 500), (NOW - 600, 300)]  # the one older than the window no longer counts
    answer = fit(400, 1000, charges, NOW, WINDOW, scope="api")
    assert (answer.remaining, answer.fits, answer.room_at) == (200, False, NOW - 1200 + WINDOW)
    assert fit(900, 1000, charges, NOW, WINDOW).room_at == NOW - 600 + WINDOW  # both must leave


def test_a_need_above_the_budget_never_fits():
    assert fit(1001, 1000, [], NOW, WINDOW).room_at is None


def test_the_budget_waited_for_longest_binds():
    town = Fit("town", 1000, 900, True, NOW)
    rig = Fit("api", 500, 0, False, NOW + 60)
    assert binding([town, rig]) is rig
    assert binding([town, Fit("api", 100, 100, False, None)]).room_at is None
    assert binding([]) is None


charge = st.tuples(st.floats(NOW - 2 * WINDOW, NOW, allow_nan=False), st.integers(0, 2000))


@given(st.lists(charge, max_size=12), st.integers(0, 3000), st.integers(1, 3000))
def test_the_room_given_is_the_first_moment_the_need_fits(raw, need, budget):
    charges = charges_in(raw, NOW, WINDOW)
    answer = fit(need, budget, charges, NOW, WINDOW)
    assert (answer.room_at is None) == (need > budget)
    assert answer.fits == (answer.room_at == NOW and sum(t for _, t in charges) + need <= budget)
    if answer.room_at is not None:
        then = answer.room_at + 1e-6  # (a charge leaves the window at its time plus the window, to rounding)
        assert fit(need, budget, charges_in(raw, then, WINDOW), then, WINDOW).fits  # it fits then
        if answer.room_at > NOW:
            before = answer.room_at - 1e-3
            assert not fit(need, budget, charges_in(raw, before, WINDOW), before, WINDOW).fits  # not sooner
