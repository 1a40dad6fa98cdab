"""The fields beads 1.x adds, beads' JSON envelope, and `bd ready`'s filters on `item ready`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import make_repo
from sluice.core.items import ReadyFilter, gate_of, unwrap_envelope
from sluice.core.scoring import Candidate, Weights, deadline_factor, due_text, score_candidate

NOW = datetime.now(UTC)


def stamp(delta: timedelta) -> str:
    return (NOW + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(item_id: str, **extra) -> dict:
    return {"_type": "issue", "id": item_id, "title": f"work {item_id}", "status": "open", "priority": 2,
            "issue_type": "task", "created_at": "2026-11-01T10:00:00Z", "updated_at": "2026-11-01T10:00:00Z",
            **extra}


def blocks(target: str, source: str) -> dict:
    return {"issue_id": source, "depends_on_id": target, "type": "blocks",
            "created_at": "2026-11-01T10:00:00Z"}


@pytest.fixture
def export_rig(cli, tmp_path):
    """A rig ``be`` reading a beads export the test writes (``write(records)``)."""
    export = tmp_path / "issues.jsonl"

    def write(records: list[dict]) -> Path:
        export.write_text("".join(json.dumps(r) + "\n" for r in records))
        return export

    write([])
    cli.run("rig", "add", "be", str(make_repo(tmp_path / "repos" / "be")), "--items", str(export))
    return write


# -- pure parts --------------------------------------------------------------------------------

records_strategy = st.lists(st.fixed_dictionaries({"id": st.text(min_size=1, max_size=8)}), max_size=4)


@given(records_strategy, st.integers(min_value=1, max_value=3))
def test_the_envelope_is_unwrapped_however_deep(records, depth):
    wrapped = records
    for _ in range(depth):
        wrapped = {"schema_version": 1, "data": wrapped}
    assert unwrap_envelope(wrapped) == records


@given(st.one_of(records_strategy, st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)))
def test_anything_but_an_envelope_is_left_as_it_is(value):
    if isinstance(value, dict) and {"data", "schema_version"} <= value.keys():
        return
    assert unwrap_envelope(value) is value


def test_a_record_that_has_data_and_schema_version_keys_is_no_envelope():
    item = {"id": "be-1", "data": [1], "schema_version": 1}
    assert unwrap_envelope(item) is item


candidates = st.builds(
    Candidate, item_id=st.text(min_size=1, max_size=5), priority=st.integers(0, 4),
    tokens=st.integers(0, 10_000), rig=st.sampled_from(["a", "b", None]), order=st.just("2026"),
    due_in_hours=st.one_of(st.none(), st.floats(-1000, 1000)))
weights = st.builds(Weights, priority=st.floats(-10, 10), affinity=st.floats(-10, 10),
                    cost=st.floats(-10, 10), fairness=st.floats(0, 10))


@given(candidates, weights, st.booleans(), st.booleans(), st.integers(0, 5))
def test_with_deadline_weight_zero_a_due_date_changes_no_score_and_no_reason(c, w, warm, under, depth):
    from sluice.core.recordclass import replace

    kwargs = {"warm": warm, "underrepresented": under, "merge_depth": depth, "threshold": 3, "penalty": 2.0}
    with_due = score_candidate(c, w, **kwargs)
    without = score_candidate(replace(c, due_in_hours=None), w, **kwargs)
    assert (with_due.score, with_due.reasons) == (without.score, without.reasons)


@given(st.floats(-1000, 1000), st.floats(-1000, 1000))
def test_the_deadline_factor_grows_as_the_due_date_nears_and_is_one_once_due(a, b):
    sooner, later = sorted((a, b))
    assert 0 < deadline_factor(later) <= deadline_factor(sooner) <= 1
    assert deadline_factor(min(sooner, 0.0)) == 1.0
    assert deadline_factor(None) == 0.0


def test_due_text_says_it_in_words():
    assert due_text(3.0) == "due in 3h"
    assert due_text(72.0) == "due in 3d"
    assert due_text(-0.5) == "overdue by 30m"


def test_ready_filter_is_bd_readys():
    item = record("be-1", labels=["ui", "p"], assignee="ann", priority=1, issue_type="bug")
    assert ReadyFilter(labels=("ui", "p")).matches(item)
    assert not ReadyFilter(labels=("ui", "x")).matches(item)
    assert ReadyFilter(labels_any=("x", "ui")).matches(item)
    assert not ReadyFilter(labels_any=("x",)).matches(item)
    assert ReadyFilter(assignee="ann").matches(item) and not ReadyFilter(unassigned=True).matches(item)
    assert ReadyFilter(unassigned=True).matches(record("be-2", assignee=""))
    assert ReadyFilter(issue_type="task").matches(record("be-3", issue_type=None))
    assert not ReadyFilter(priority=2).matches(item) and ReadyFilter(priority=1).matches(item)


def test_gate_of_reads_beads_gate_fields():
    gate = record("be-g", issue_type="gate", await_type="gh:run", await_id="123", timeout=3_600_000_000_000)
    assert gate_of(gate) == {"id": "be-g", "status": "open", "await_type": "gh:run", "await_id": "123",
                             "timeout": "1h"}
    assert gate_of(record("be-1")) is None


# -- through the CLI ---------------------------------------------------------------------------


def test_an_open_gate_blocks_its_dependents_and_explain_names_its_kind(cli, export_rig):
    gate = record("be-g", issue_type="gate", await_type="gh:pr", await_id="42", timeout=1_800_000_000_000)
    work = record("be-1", dependencies=[blocks("be-g", "be-1")], estimated_minutes=45,
                  due_at=stamp(timedelta(hours=3, minutes=5)))
    export_rig([gate, work])
    assert cli.json("item", "ready", "be") == []  # the gate is never ready, and its dependent waits
    assert cli.json("item", "blocked", "be")[0]["blocked_by"] == ["be-g"]
    cli.run("config", "set", "scheduler.max_polecats", "1")
    cli.run("sling", "be-1")
    explained = cli.json("scheduler", "explain", "be-1")
    assert explained["gates"] == [{"id": "be-g", "status": "open", "await_type": "gh:pr", "await_id": "42",
                                   "timeout": "30m"}]
    assert explained["estimated_minutes"] == 45 and explained["due"] == "due in 3h"
    text = cli.run("scheduler", "explain", "be-1").stdout
    assert "gate be-g (open): waits for gh:pr 42, timeout 30m" in text
    assert "estimated: 45 min" in text and "due in 3h" in text
    from sluice.api import open_town

    detail = open_town(cli.town).item_detail("be-1")  # the item page of the views
    assert (detail["due"], detail["estimated_minutes"], detail["gate"]) == ("due in 3h", 45, None)
    assert open_town(cli.town).item_detail("be-g")["gate"]["await_type"] == "gh:pr"
    export_rig([{**gate, "status": "closed", "closed_at": "2026-11-02T10:00:00Z"}, work])
    assert [r["id"] for r in cli.json("item", "ready", "be")] == ["be-1"]  # the closed gate releases it


def test_deadline_weight_zero_leaves_the_order_and_a_weight_puts_due_work_first(cli, export_rig):
    export_rig([record("be-1", priority=1, created_at="2026-11-01T10:00:00Z"),
                record("be-2", priority=2, due_at=stamp(timedelta(hours=-1)))])
    first = cli.json("schedule", "next", "--limit", "2", "--preview")
    assert [d["node_id"] for d in first] == ["be-1", "be-2"]
    assert not any(r.startswith("deadline=") for d in first for r in d["reasons"])
    policy = cli.json("schedule", "policy", "set", "--deadline", "2")
    assert policy["weights"]["deadline"] == 2.0
    second = cli.json("schedule", "next", "--limit", "2", "--preview")
    assert [d["node_id"] for d in second] == ["be-2", "be-1"]
    assert "deadline=1.0000(overdue by 1h)" in second[0]["reasons"]
    cli.run("config", "set", "scheduler.max_polecats", "2")
    cli.run("sling", "be-1", "be-2")
    assert [r["id"] for r in cli.json("scheduler", "list")] == ["be-2", "be-1"]  # the dispatcher agrees


def test_item_ready_takes_bd_readys_filters(cli, export_rig):
    export_rig([
        record("be-1", labels=["ui"], assignee="ann", priority=1, created_at="2026-11-03T10:00:00Z"),
        record("be-2", labels=["ui", "api"], priority=2, issue_type="bug", created_at="2026-11-01T10:00:00Z"),
        record("be-3", labels=["api"], assignee="bob", priority=1, created_at="2026-11-02T10:00:00Z"),
    ])

    def ready(*flags: str) -> list[str]:
        return [r["id"] for r in cli.json("item", "ready", "be", *flags)]

    assert ready() == ["be-1", "be-3", "be-2"]
    assert ready("--label", "ui") == ["be-1", "be-2"]
    assert ready("--label", "ui", "--label", "api") == ["be-2"]
    assert ready("--label-any", "api", "--label-any", "nope") == ["be-3", "be-2"]
    assert ready("--assignee", "bob") == ["be-3"]
    assert ready("--unassigned") == ["be-2"]
    assert ready("--type", "bug") == ["be-2"]
    assert ready("--priority", "1") == ["be-1", "be-3"]
    assert ready("--sort", "oldest") == ["be-2", "be-3", "be-1"]
    assert ready("--sort", "oldest", "--limit", "1") == ["be-2"]
    bad = cli.run("item", "ready", "--sort", "hybrid", check=False)
    assert bad.returncode == 2 and "sort must be one of priority, oldest" in bad.stderr


def test_the_python_api_takes_the_same_filters(cli, export_rig):
    from sluice.api import open_town

    export_rig([record("be-1", labels=["ui"]), record("be-2", assignee="ann")])
    town = open_town(cli.town)
    assert [r["id"] for r in town.ready("be", labels=["ui"])] == ["be-1"]
    assert [r["id"] for r in town.ready(unassigned=True, labels_any=["ui", "x"])] == ["be-1"]
    assert [r["id"] for r in town.ready(assignee="ann", sort="oldest")] == ["be-2"]
    assert town.set_policy(deadline=0.5).weights["deadline"] == 0.5


def _rig():
    from sluice.store.files.town import ItemCommand, Rig

    return Rig("be", Path("/nowhere"), "be", Path("/nowhere/s.jsonl"),
               ItemCommand(("bd", "export"), (), 30.0, 30.0, 2.0))


ids_strategy = st.lists(st.integers(0, 999).map(lambda n: f"be-{n}"), unique=True, max_size=6)


@given(ids_strategy)
def test_jsonl_an_array_and_an_envelope_of_the_same_records_keep_the_same_records(ids):
    from sluice.store.items.sources import snapshot_bytes

    records = [record(i) for i in ids]
    jsonl = "".join(json.dumps(r) + "\n" for r in records).encode()
    forms = [jsonl, json.dumps(records, indent=2).encode(),
             json.dumps({"schema_version": 1, "data": records}).encode()]
    kept = [snapshot_bytes(_rig(), form) for form in forms]
    assert kept[0] == (jsonl, len(ids))  # JSONL is kept byte for byte
    for body, count in kept:
        assert count == len(ids) and [json.loads(line) for line in body.splitlines()] == records


def test_one_pretty_printed_record_is_read_as_one_record():
    from sluice.store.items.sources import snapshot_bytes

    body, count = snapshot_bytes(_rig(), json.dumps(record("be-1"), indent=2).encode())
    assert count == 1 and json.loads(body)["id"] == "be-1"
