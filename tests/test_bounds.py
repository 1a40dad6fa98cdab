"""Nothing accepted may break a later command: values are bounded where they are set and where they are read.

A duration is added to the present somewhere (a throttle's end, a budget
window's start, a sleep between launches), and a weight multiplies a factor
of a score; a value accepted without bounds would pass `config set` and then
fail every dispatch cycle.  Each surface (CLI, Python API, a hand-edited
file) refuses the same values with a message naming the key.
"""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.core import scoring
from sluice.core.clock import MAX_DURATION, DurationTooLong, parse_duration
from sluice.errors import UsageError
from sluice.store.database.admission_state import utc

DURATION_KEYS = [
    "scheduler.spawn_delay", "scheduler.polecat_timeout", "scheduler.retry_base",
    "scheduler.retry_max", "scheduler.missing_grace", "scheduler.notify_timeout",
    "scheduler.budget_window", "scheduler.throttle_for", "scheduler.breaker_cooldown",
    "scheduler.compact_retention",
]  # fmt: skip


def _config(town_dir):
    return town_dir / ".sluice" / "config.json"


@pytest.mark.parametrize("key", DURATION_KEYS)
def test_config_set_refuses_a_duration_longer_than_sluice_can_compute_with(cli, town_dir, key):
    before = _config(town_dir).read_bytes()
    done = cli.run("config", "set", key, "99999999999h", check=False)
    assert done.returncode == 2, done.stderr
    assert key in done.stderr and "876000h" in done.stderr and "Traceback" not in done.stderr
    assert _config(town_dir).read_bytes() == before


def test_the_longest_durations_keep_every_command_working(cli, rig):
    for key in ("scheduler.throttle_for", "scheduler.budget_window", "scheduler.compact_retention",
                "scheduler.breaker_cooldown", "scheduler.spawn_delay"):
        cli.run("config", "set", key, "876000h")
    cli.run("config", "set", "scheduler.max_polecats", "2")
    cli.run("config", "set", "scheduler.token_budget", "1000")
    cli.json("item", "create", rig, "--title", "one")
    assert cli.json("scheduler", "throttle", "--until", "876000h")["until"].startswith("2")
    assert cli.json("scheduler", "status")["throttles"]
    assert cli.json("scheduler", "run", "--dry-run")["dispatched"] == 0
    # The end of the longest throttle a polecat's exit can set is a time a timestamp can spell.
    assert utc(time.time() + MAX_DURATION)


@pytest.mark.parametrize("value", ['"99999999999h"', "1e300", '"1e300s"'])
def test_a_hand_edited_config_with_too_long_a_duration_names_the_key_on_every_command(cli, town_dir, value):
    config = _config(town_dir)
    data = json.loads(config.read_text())
    data["scheduler"]["throttle_for"] = json.loads(value)
    config.write_text(json.dumps(data))
    for argv in (("scheduler", "status"), ("scheduler", "run"), ("config", "get", "scheduler.throttle_for")):
        done = cli.run(*argv, check=False)
        assert done.returncode == 1, (argv, done.stderr)
        assert "scheduler.throttle_for" in done.stderr and str(config.resolve()) in done.stderr
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr


@pytest.mark.parametrize("until", ["999999999h", "99999999999h", "9999-12-31T00:00:00Z"])
def test_throttle_until_beyond_the_longest_duration_is_refused(cli, api_town, until):
    done = cli.run("scheduler", "throttle", "--until", until, check=False)
    assert done.returncode == 2, done.stderr
    assert "--until" in done.stderr and "876000h" in done.stderr and "internal error" not in done.stderr
    assert cli.json("scheduler", "status")["throttles"] == []
    with pytest.raises(UsageError, match="876000h"):
        api_town.throttle(until=until)


def test_the_python_api_refuses_what_the_cli_refuses(api_town):
    with pytest.raises(UsageError, match=r"scheduler\.spawn_delay"):
        api_town.config_set("scheduler.spawn_delay", "99999999999h")
    with pytest.raises(UsageError, match=r"scheduler\.throttle_for"):
        api_town.config_set("scheduler.throttle_for", 1e300)
    with pytest.raises(UsageError, match="priority"):
        api_town.set_policy(priority=1e308, cost=1e308)


def test_policy_set_refuses_weights_that_could_overflow_a_score(cli, town_dir, rig):
    cli.json("item", "create", rig, "--title", "one")
    policy = town_dir / ".sluice" / "schedule" / "policy.json"
    before = policy.read_bytes() if policy.exists() else None
    done = cli.run("schedule", "policy", "set", "--priority", "1e308", "--cost", "1e308", check=False)
    assert done.returncode == 2 and "priority" in done.stderr and "overflow" in done.stderr
    assert (policy.read_bytes() if policy.exists() else None) == before
    for flag in ("--merge-pressure-penalty", "--aging", "--aging-max", "--fairness"):
        assert cli.run("schedule", "policy", "set", flag, "1e7", check=False).returncode == 2, flag
    cli.json("schedule", "policy", "set", "--priority", "1e6", "--cost", "-1e6")
    assert cli.json("scheduler", "status")["queued_total"] == 0
    # priority 2 and 1000 tokens: 2 * 1e6 - 0.5 * 1e6
    assert cli.json("schedule", "next", "--preview")[0]["score"] == pytest.approx(1.5e6)


@pytest.mark.parametrize("where", [("weights", "priority"), ("graph_overrides", "g", "cost"),
                                   ("merge_pressure_penalty",), ("aging_max",)])
def test_a_hand_edited_policy_with_an_overflowing_weight_names_the_key(cli, town_dir, rig, where):
    cli.json("item", "create", rig, "--title", "one")
    policy = town_dir / ".sluice" / "schedule" / "policy.json"
    data = {"weights": {"priority": 1.0}, "graph_overrides": {"g": {"cost": 1.0}}}
    node = data
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = 1e308
    policy.write_text(json.dumps(data))
    for argv in (("schedule", "next", "--preview"), ("schedule", "status")):
        done = cli.run(*argv, check=False)
        assert done.returncode == 1, (argv, done.stderr)
        assert ".".join(where) in done.stderr and "policy.json" in done.stderr, done.stderr
        assert "scores inf" not in done.stderr and "internal error" not in done.stderr


def test_parse_duration_bounds():
    assert parse_duration("876000h") == MAX_DURATION
    with pytest.raises(DurationTooLong):
        parse_duration("876000h1ms")
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("forever")


bounded = st.floats(min_value=-scoring.MAX_WEIGHT, max_value=scoring.MAX_WEIGHT)


@given(w=st.tuples(bounded, bounded, bounded, bounded), penalty=bounded, priority=st.integers(0, 4),
       tokens=st.integers(0, 10**18), aging=st.floats(0, scoring.MAX_WEIGHT), age=st.floats(0, 1e12))
def test_any_policy_inside_the_bounds_scores_every_item_finitely(w, penalty, priority, tokens, aging, age):
    candidate = scoring.Candidate("al-1", priority, tokens, "alpha", "~", age_hours=age)
    scored = scoring.score_candidate(candidate, scoring.Weights(*w), warm=True, underrepresented=True,
                                     merge_depth=5, threshold=1, penalty=penalty, aging=(aging, aging))
    assert abs(scored.score) < 1e7


@pytest.mark.parametrize("value", ['{"agent_slot": Infinity}', '{"agent_slot": NaN}', '{"agent_slot": -1}'])
def test_ray_resources_must_be_finite_amounts(cli, town_dir, value):
    before = _config(town_dir).read_bytes()
    done = cli.run("config", "set", "executor.ray.resources", value, check=False)
    assert done.returncode == 2 and "executor.ray.resources" in done.stderr, done.stderr
    assert _config(town_dir).read_bytes() == before


@given(now=st.floats(min_value=1.5e9, max_value=4e9, allow_nan=False))
def test_the_longest_throttle_is_accepted_whatever_the_moment(now):
    """(now + d) - now rounds at epoch magnitudes: the bound is judged on the duration itself."""
    from sluice.scheduler.launch.throttles import parse_until

    assert parse_until("876000h", now) == now + MAX_DURATION
