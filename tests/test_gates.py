"""The pure gates: host limits on plain readings, sizes, admission under a gate, the binding limit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sluice.core import admission as rules
from sluice.core.admission import Applicant, Limits, Reason, admit
from sluice.core.gates import (
    HostLimits,
    HostReading,
    binding,
    format_size,
    hold_reason,
    host_reasons,
    parse_size,
)

GiB = 1 << 30


def test_each_host_limit_names_its_reading_and_its_limit():
    limits = HostLimits(max_load=1.5, min_free_memory=2 * GiB, min_free_disk=5 * GiB)
    reading = HostReading(at=0, load=2.25, cores=4, free_memory=GiB, disks={"/town": 6 * GiB, "/rig": GiB})
    assert [(r.code, r.detail) for r in host_reasons(limits, reading)] == [
        (rules.HOST_LOAD, "load 2.25 per core (4 cores) is above scheduler.host.max_load 1.5"),
        (rules.HOST_MEMORY, "1GiB of memory free, below scheduler.host.min_free_memory 2GiB"),
        (rules.HOST_DISK, "1GiB free on /rig, below scheduler.host.min_free_disk 5GiB"),
    ]


def test_a_limit_met_or_unset_says_nothing():
    reading = HostReading(at=0, load=0.5, cores=2, free_memory=3 * GiB, disks={"/town": 9 * GiB})
    assert host_reasons(HostLimits(max_load=1.0, min_free_memory=GiB, min_free_disk=GiB), reading) == []
    assert host_reasons(HostLimits(), reading) == []
    assert host_reasons(HostLimits(max_load=0.1), None) == []


def test_the_hold_file_holds_only_while_it_exists():
    assert hold_reason("/t/HOLD", None) is None
    assert hold_reason("/t/HOLD", "") == Reason(rules.HOLD_FILE, "/t/HOLD exists")
    assert hold_reason("/t/HOLD", " deploy ") == Reason(rules.HOLD_FILE, "/t/HOLD exists: deploy")


@given(st.integers(min_value=0, max_value=1 << 70))
def test_a_byte_count_reads_as_itself_and_its_spelling_reads_back_close(size):
    assert parse_size(str(size)) == size
    back = parse_size(format_size(size))
    assert abs(back - size) <= max(size * 0.05, 1)


applicants = st.lists(
    st.builds(Applicant, key=st.uuids().map(str), item_id=st.text(min_size=1, max_size=5),
              rig=st.sampled_from(["a", "b"]), tokens=st.integers(0, 10)),
    max_size=8, unique_by=lambda a: a.key)
limits = st.builds(Limits, capacity=st.integers(0, 5), batch=st.integers(1, 5),
                   rig_caps=st.dictionaries(st.sampled_from(["a", "b"]), st.integers(1, 3)))
gates = st.lists(st.sampled_from([Reason(rules.HOLD_FILE, "x"), Reason(rules.HOST_LOAD, "y")]),
                 min_size=1, max_size=2)


@given(applicants, limits, gates)
def test_under_a_gate_nothing_is_planned_and_every_applicant_names_the_gate_first(apps, caps, held):
    plan = admit(apps, [], caps, gates=held, now=0)
    assert plan.to_dispatch == ()
    assert plan.reason == (held[0].code if apps else "none")
    for a in apps:
        assert plan.held[a.key][:len(held)] == tuple(held)


@given(applicants, limits, st.booleans())
def test_the_binding_limit_is_the_plans_reason_unless_paused_or_nothing_binds(apps, caps, paused):
    plan = admit(apps, [], caps, now=0)
    bound = binding(plan, [a.key for a in apps], paused)
    if paused:
        assert bound is not None and bound.code == rules.PAUSED
    elif plan.reason in ("none", "ready"):
        assert bound is None
    else:
        assert bound is not None and bound.code == plan.reason
