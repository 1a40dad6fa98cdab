"""The policy file: defaults, validation, overrides, locking, atomic writes."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import stat

import pytest
from pydantic import ValidationError

from sluice.core.scoring import Weights
from sluice.errors import ConfigError, UsageError
from sluice.store.files.policy import GraphOverride, Policy, PolicyWeights, load_policy, set_policy


@pytest.fixture
def paths(tmp_path):
    schedule = tmp_path / "schedule"
    runtime = tmp_path / "runtime"
    return schedule / "policy.json", runtime / "policy.lock"


def write(path, document):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else json.dumps(document), encoding="utf-8")


# --------------------------------------------------------------------------
# Model


def test_defaults():
    policy = Policy()
    assert policy.weights == PolicyWeights(priority=1.0, affinity=0.5, cost=0.25, fairness=0.0)
    assert policy.merge_queue_threshold == 3
    assert policy.merge_pressure_penalty == 2.0
    assert policy.skip_on_merge_pressure is False
    assert policy.graph_overrides == {}


def test_dump_key_order():
    dumped = Policy(graph_overrides={"g": GraphOverride(cost=1.0)}).model_dump(mode="json")
    assert list(dumped) == [
        "weights",
        "merge_queue_threshold",
        "merge_pressure_penalty",
        "skip_on_merge_pressure",
        "graph_overrides",
        "aging",
        "aging_max",
    ]
    assert list(dumped["weights"]) == ["priority", "affinity", "cost", "fairness", "deadline"]
    assert dumped["graph_overrides"]["g"] == dict(priority=None, affinity=None, cost=1.0, fairness=None,
                                                  deadline=None)


def test_threshold_is_validated_on_construction_and_assignment():
    with pytest.raises(ValidationError, match=r"merge_queue_threshold must be >= 1 \(got 0\)"):
        Policy(merge_queue_threshold=0)
    policy = Policy()
    with pytest.raises(ValidationError):
        policy.merge_queue_threshold = 0
    assert policy.merge_queue_threshold == 3
    policy.merge_queue_threshold = 1
    assert policy.merge_queue_threshold == 1


def test_non_finite_weights_are_refused_by_the_model():
    with pytest.raises(ValidationError):
        PolicyWeights(priority=math.nan)
    with pytest.raises(ValidationError):
        Policy(merge_pressure_penalty=math.inf)


def test_weights_for_applies_graph_overrides():
    policy = Policy(
        weights=PolicyWeights(priority=2.0),
        graph_overrides={"release": GraphOverride(cost=4.0), "nulls": GraphOverride()},
    )
    assert policy.weights_for(None) == Weights(priority=2.0, affinity=0.5, cost=0.25, fairness=0.0)
    assert policy.weights_for("release") == Weights(priority=2.0, affinity=0.5, cost=4.0, fairness=0.0)
    assert policy.weights_for("nulls") == policy.weights_for(None)
    assert policy.weights_for("unknown") == policy.weights_for(None)


# --------------------------------------------------------------------------
# Loading


def test_missing_file_gives_defaults(paths):
    policy_path, _ = paths
    assert load_policy(policy_path) == Policy()
    assert not policy_path.exists()


def test_unknown_keys_are_ignored(paths):
    policy_path, _ = paths
    write(
        policy_path,
        {
            "weights": {"priority": 2, "speed": 9},
            "color": "blue",
            "graph_overrides": {"g": {"cost": 1, "extra": True}},
        },
    )
    policy = load_policy(policy_path)
    assert policy.weights.priority == 2.0
    assert policy.graph_overrides["g"].cost == 1.0
    assert "color" not in policy.model_dump()


def test_threshold_zero_in_the_file_is_a_clear_config_error(paths):
    policy_path, _ = paths
    write(policy_path, {"merge_queue_threshold": 0})
    with pytest.raises(ConfigError) as caught:
        load_policy(policy_path)
    message = str(caught.value)
    assert message == f"{policy_path}: merge_queue_threshold must be >= 1 (got 0)"
    assert "\n" not in message and "pydantic" not in message


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "invalid JSON"),
        ("", "invalid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ("null", "expected a JSON object, got null"),
        ('{"weights": {"priority": "high"}}', "weights.priority"),
        ('{"weights": {"cost": NaN}}', "finite number"),
        ('{"merge_queue_threshold": 2.5}', "merge_queue_threshold"),
    ],
)
def test_bad_files_are_one_line_config_errors(paths, content, fragment):
    policy_path, _ = paths
    write(policy_path, content)
    with pytest.raises(ConfigError) as caught:
        load_policy(policy_path)
    message = str(caught.value)
    assert message.startswith(f"{policy_path}: ")
    assert fragment in message
    assert "\n" not in message


# --------------------------------------------------------------------------
# Setting


def test_round_trip(paths):
    policy_path, lock_path = paths
    saved = set_policy(
        policy_path,
        lock_path,
        priority=2.0,
        fairness=0.1,
        merge_queue_threshold=5,
        merge_pressure_penalty=1.5,
        skip_on_merge_pressure=True,
    )
    assert load_policy(policy_path) == saved
    raw = json.loads(policy_path.read_text())
    assert raw["weights"] == {"priority": 2.0, "affinity": 0.5, "cost": 0.25, "fairness": 0.1,
                              "deadline": 0.0}
    assert raw["merge_queue_threshold"] == 5
    assert raw["merge_pressure_penalty"] == 1.5
    assert raw["skip_on_merge_pressure"] is True
    assert policy_path.read_text().endswith("}\n")


def test_file_is_private(paths):
    policy_path, lock_path = paths
    set_policy(policy_path, lock_path, cost=0.5)
    assert stat.S_IMODE(policy_path.stat().st_mode) == 0o600


def test_graph_override_semantics(paths):
    policy_path, lock_path = paths
    set_policy(policy_path, lock_path, priority=3.0, graph_id="hotfix")
    policy = set_policy(policy_path, lock_path, cost=0.0, graph_id="hotfix", merge_pressure_penalty=4.0)
    # weights went to the override only; the base is untouched
    assert policy.weights == PolicyWeights()
    assert policy.graph_overrides["hotfix"] == GraphOverride(priority=3.0, cost=0.0)
    # penalty is global even when a graph is named
    assert policy.merge_pressure_penalty == 4.0
    # an explicit 0.0 override is honoured, a null falls back
    assert policy.weights_for("hotfix") == Weights(priority=3.0, affinity=0.5, cost=0.0, fairness=0.0)


def test_graph_id_without_weights_creates_no_override(paths):
    policy_path, lock_path = paths
    policy = set_policy(policy_path, lock_path, graph_id="g", skip_on_merge_pressure=True)
    assert policy.graph_overrides == {}
    assert policy.skip_on_merge_pressure is True
    assert policy_path.exists()


def test_set_with_no_changes_still_writes_the_defaults(paths):
    policy_path, lock_path = paths
    assert set_policy(policy_path, lock_path) == Policy()
    assert json.loads(policy_path.read_text()) == Policy().model_dump(mode="json")


@pytest.mark.parametrize("threshold", [0, -3])
def test_threshold_below_one_is_refused_on_set_and_nothing_is_written(paths, threshold):
    policy_path, lock_path = paths
    set_policy(policy_path, lock_path, priority=2.0)
    before = policy_path.read_bytes()
    with pytest.raises(UsageError, match=rf"^merge_queue_threshold must be >= 1 \(got {threshold}\)"):
        set_policy(policy_path, lock_path, merge_queue_threshold=threshold, cost=9.0)
    assert policy_path.read_bytes() == before
    assert load_policy(policy_path).merge_queue_threshold == 3


def test_refused_set_on_a_missing_file_creates_nothing(paths):
    policy_path, lock_path = paths
    with pytest.raises(UsageError):
        set_policy(policy_path, lock_path, merge_queue_threshold=0)
    assert not policy_path.exists()


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"priority": math.nan}, "priority"),
        ({"affinity": math.inf}, "affinity"),
        ({"cost": -math.inf}, "cost"),
        ({"fairness": "0.5"}, "fairness"),
        ({"priority": True}, "priority"),
        ({"merge_pressure_penalty": math.nan}, "merge_pressure_penalty"),
        ({"merge_queue_threshold": 2.0}, "merge_queue_threshold"),
        ({"skip_on_merge_pressure": "false"}, "skip_on_merge_pressure"),
        ({"priority": 1.0, "graph_id": "  "}, "graph_id"),
    ],
)
def test_bad_values_are_refused_naming_the_parameter(paths, kwargs, parameter):
    """The library names the parameter as Python spells it; the CLI turns it into its flag."""
    policy_path, lock_path = paths
    with pytest.raises(UsageError, match=f"^{parameter} ") as refused:
        set_policy(policy_path, lock_path, **kwargs)
    assert parameter in refused.value.parameters
    assert not policy_path.exists()


def test_set_refuses_to_overwrite_a_corrupt_file(paths):
    policy_path, lock_path = paths
    write(policy_path, '{"merge_queue_threshold": 0}')
    with pytest.raises(ConfigError, match="merge_queue_threshold must be >= 1"):
        set_policy(policy_path, lock_path, priority=2.0)
    assert policy_path.read_text() == '{"merge_queue_threshold": 0}'


def test_atomic_write_leaves_no_temp_files(paths):
    policy_path, lock_path = paths
    for value in (1.0, 2.0, 3.0):
        set_policy(policy_path, lock_path, priority=value)
    assert sorted(p.name for p in policy_path.parent.iterdir()) == ["policy.json"]


def test_set_keeps_hand_written_overrides(paths):
    policy_path, lock_path = paths
    write(policy_path, {"graph_overrides": {"keep": {"fairness": 1.0}}, "unknown": 1})
    policy = set_policy(policy_path, lock_path, affinity=0.0)
    assert policy.graph_overrides["keep"].fairness == 1.0
    assert "unknown" not in json.loads(policy_path.read_text())


# --------------------------------------------------------------------------
# Concurrency


def _set_one_override(policy_path, lock_path, barrier, index):
    barrier.wait(timeout=30)
    set_policy(policy_path, lock_path, priority=float(index), graph_id=f"graph-{index}")


def test_concurrent_sets_lose_nothing(paths):
    policy_path, lock_path = paths
    workers = 8
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(workers)
    processes = [
        ctx.Process(target=_set_one_override, args=(policy_path, lock_path, barrier, index))
        for index in range(workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
    assert [p.exitcode for p in processes] == [0] * workers

    policy = load_policy(policy_path)
    assert sorted(policy.graph_overrides) == sorted(f"graph-{i}" for i in range(workers))
    for i in range(workers):
        assert policy.graph_overrides[f"graph-{i}"].priority == float(i)
    assert sorted(p.name for p in policy_path.parent.iterdir()) == ["policy.json"]
    assert os.access(policy_path, os.R_OK)


def test_a_policy_nested_too_deeply_to_parse_is_a_config_error_naming_the_file(tmp_path):
    policy_path = tmp_path / "policy.json"
    policy_path.write_text('{"weights": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ConfigError, match=r"policy\.json: invalid JSON"):
        load_policy(policy_path)


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "dangling link"])
def test_a_policy_that_is_not_a_regular_file_is_named_never_waited_on(tmp_path, kind):
    import os

    path = tmp_path / "policy.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero" if kind == "link to /dev/zero" else tmp_path / "nowhere.json")
    expected = {"fifo": "is a FIFO", "link to /dev/zero": "is a character device",
                "dangling link": "which does not exist"}[kind]
    with pytest.raises(ConfigError, match=expected):
        load_policy(path)
