"""Durations and fresh ids: the clock module's promises."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.core.clock import format_duration, parse_duration, random_id


def test_random_ids_are_version_4_uuids_and_differ():
    ids = [random_id() for _ in range(200)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        assert uuid.UUID(hex=text).version == 4 and uuid.UUID(hex=text).hex == text


@given(st.floats(min_value=0.001, max_value=10**6).map(lambda s: round(s, 3)))
def test_a_formatted_duration_reads_back(seconds):
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, abs=0.001)


@pytest.mark.parametrize("text", ["", "5", "1x", "m5", "1h 2m"])
def test_what_is_not_a_duration_is_refused(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)
