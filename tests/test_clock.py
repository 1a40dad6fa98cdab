"""Durations, fresh ids and stamps: the clock module's promises."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.core.clock import format_duration, iso, iso_epoch, parse_duration, random_id, random_ids


def test_random_ids_are_version_4_uuids_and_differ():
    ids = [random_id() for _ in range(200)] + random_ids(1000)
    assert len(set(ids)) == len(ids)
    for text in ids:
        found = uuid.UUID(hex=text)
        assert found.version == 4 and found.variant == uuid.RFC_4122 and found.hex == text


@given(st.floats(min_value=0.001, max_value=10**6).map(lambda s: round(s, 3)))
def test_a_formatted_duration_reads_back(seconds):
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, abs=0.001)


@pytest.mark.parametrize("text", ["", "5", "1x", "m5", "1h 2m"])
def test_what_is_not_a_duration_is_refused(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


#: Moments whose microseconds sit on a rounding edge: half a microsecond, just under a whole second.
EDGES = st.integers(0, 2**34).flatmap(lambda second: st.sampled_from(
    [second + 0.0000005, second + 0.0000015, second + 0.9999995, second + 0.9999996, float(second)]))


@given(st.one_of(st.floats(0, 253402300798.0), st.floats(1.6e9, 2.0e9), EDGES))
def test_an_epoch_is_spelled_as_its_datetime_is(epoch):
    assert iso_epoch(epoch) == iso(datetime.fromtimestamp(epoch, UTC))


@pytest.mark.parametrize("epoch", [-1.5, -86400.25, 253402300798.9999999, 1e12, float("nan"), float("inf"),
                                   True, Decimal("1.5")])
def test_outside_the_spelled_span_it_is_the_datetime_or_its_error(epoch):
    try:
        expected = iso(datetime.fromtimestamp(epoch, UTC))
    except (OverflowError, OSError, TypeError, ValueError) as err:
        with pytest.raises(type(err)):
            iso_epoch(epoch)
    else:
        assert iso_epoch(epoch) == expected
