"""`sluice schedule …` through the real CLI on towns of real git rigs.

metagit's own scheduler tests, translated to beads priorities (P = 4 - priority)
and rigs, plus what metagit never tested: fairness over repeated calls, graphs
spread over rigs, the graph filter, and agreement with the dispatcher's order.
With the default policy (weights 1.0 / 0.5 / 0.25 / 0.0) a cold P2 item with the
default 1000 tokens scores 2 + 0.25 * 0.5 = 2.125.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from helpers import Cli
from helpers.advisor import add_worktree, decisions, events, ids, item, merge_request, write_items


def next_json(cli, *args: str) -> list[dict]:
    return cli.json("schedule", "next", *args)


# -- metagit's catalogue --------------------------------------------------------------


def test_the_most_urgent_item_is_promoted(cli, rigs):
    write_items(cli.town, "alpha", [item("al-low", priority=3), item("al-high", priority=0)])
    [decision] = next_json(cli, "--limit", "1")
    assert decision["node_id"] == "al-high"
    assert decision["score"] == 4.125
    assert decision["reasons"] == ["priority=0", "affinity=0", "cost=0.5000(tokens=1000)"]
    assert [d["score"] for d in next_json(cli, "--limit", "2", "--preview")] == [4.125, 1.125]


def test_cheaper_work_wins_between_equals_then_time_then_id(cli, rigs):
    write_items(
        cli.town,
        "alpha",
        [
            item("al-dear", tokens=4000, minute=0),  # 2 + 0.25 * 0.2
            item("al-cheap", tokens=250, minute=9),  # 2 + 0.25 * 0.8
            item("al-budget", metadata={"context_budget": 1500}, minute=1),  # 2 + 0.25 * 0.4
            item("al-free", tokens=0, minute=5),  # 2 + 0.25 * 1
        ],
    )
    got = next_json(cli, "--limit", "4", "--preview")
    assert [(d["node_id"], d["score"]) for d in got] == [
        ("al-free", 2.25),
        ("al-cheap", 2.2),
        ("al-budget", 2.1),
        ("al-dear", 2.05),
    ]
    assert got[2]["reasons"][2] == "cost=0.4000(tokens=1500)"
    # Without the cost weight all four tie at 2.0: fewer tokens first.
    cli.run("schedule", "policy", "set", "--cost", "0")
    assert ids(next_json(cli, "--limit", "4", "--preview")) == ["al-free", "al-cheap", "al-budget", "al-dear"]


def test_equal_score_and_tokens_fall_to_creation_time_then_id(cli, rigs):
    write_items(
        cli.town, "alpha", [item("al-late", minute=30), item("al-b", minute=10), item("al-a", minute=10)]
    )
    assert ids(next_json(cli, "--limit", "3", "--preview")) == ["al-a", "al-b", "al-late"]


def test_affinity_follows_a_real_worktree(cli, rigs, tmp_path):
    write_items(cli.town, "alpha", [item("al-one", minute=0)])
    write_items(cli.town, "beta", [item("be-one", minute=1)])
    assert ids(next_json(cli, "--limit", "2", "--preview")) == ["al-one", "be-one"]
    worktree = add_worktree(tmp_path / "repos" / "beta", tmp_path / "wt-beta")
    got = next_json(cli, "--limit", "2", "--preview")
    assert [(d["node_id"], d["score"]) for d in got] == [("be-one", 2.625), ("al-one", 2.125)]
    assert got[0]["reasons"] == ["priority=2", "affinity=1", "cost=0.5000(tokens=1000)"]
    shutil.rmtree(worktree)  # a deleted worktree no longer warms the rig
    assert ids(next_json(cli, "--limit", "2", "--preview")) == ["al-one", "be-one"]


def test_merge_pressure_penalises_a_rig_at_the_threshold(cli, rigs):
    write_items(
        cli.town,
        "alpha",
        [
            item("al-hot", priority=0),
            merge_request("al-m1", "open"),
            merge_request("al-m2", "open"),
            merge_request("al-m3", "in_progress"),
            merge_request("al-m4", "closed"),
        ],
    )
    write_items(cli.town, "beta", [item("be-calm", priority=1)])
    got = next_json(cli, "--limit", "2")
    assert [(d["node_id"], d["score"], d["skipped"]) for d in got] == [
        ("be-calm", 3.125, False),
        ("al-hot", 2.125, False),
    ]
    assert got[1]["reasons"] == [
        "priority=0",
        "affinity=0",
        "cost=0.5000(tokens=1000)",
        "merge_pressure depth=3 threshold=3 penalty=2.0",
    ]
    # One merge fewer than the threshold: no pressure.
    cli.run("schedule", "policy", "set", "--merge-queue-threshold", "4")
    assert [d["score"] for d in next_json(cli, "--limit", "2", "--preview")] == [4.125, 3.125]


def test_skip_mode_reports_a_pressured_leader_as_skipped(cli, rigs):
    write_items(
        cli.town,
        "alpha",
        [item("al-hot", priority=0), *(merge_request(f"al-m{n}", "open") for n in range(3))],
    )
    write_items(cli.town, "beta", [item("be-calm", priority=1)])
    cli.run("schedule", "policy", "set", "--skip-on-merge-pressure", "--merge-pressure-penalty", "0")
    [only] = next_json(cli, "--limit", "1")
    assert (only["node_id"], only["score"], only["skipped"]) == ("al-hot", 4.125, True)
    assert only["reasons"][-2:] == [
        "merge_pressure depth=3 threshold=3 penalty=0.0",
        "skipped_due_to_merge_pressure",
    ]
    got = next_json(cli, "--limit", "2")
    assert [(d["node_id"], d["skipped"]) for d in got] == [("al-hot", True), ("be-calm", False)]
    assert [e["type"] for e in events(cli.town, "ScheduleDecision", "ScheduleSkipped")] == [
        "ScheduleSkipped",
        "ScheduleSkipped",
        "ScheduleDecision",
    ]
    # With the default penalty the pressured item falls below the limit: no skip record at all.
    cli.run("schedule", "policy", "set", "--merge-pressure-penalty", "2")
    assert [(d["node_id"], d["skipped"]) for d in next_json(cli, "--limit", "1", "--preview")] == [
        ("be-calm", False)
    ]


def test_graph_overrides_change_only_their_graph(cli, rigs):
    write_items(
        cli.town,
        "alpha",
        [
            item("al-e1", issue_type="epic", priority=4),
            item("al-a", priority=2, parent="al-e1", minute=2),
        ],
    )
    write_items(
        cli.town,
        "beta",
        [
            item("be-e2", issue_type="epic", priority=4),
            item("be-b", priority=1, parent="be-e2", minute=1),
        ],
    )
    assert ids(next_json(cli, "--limit", "2", "--preview")) == ["be-b", "al-a"]
    policy = cli.json("schedule", "policy", "set", "--graph-id", "al-e1", "--priority", "3")
    assert policy["graph_overrides"] == {
        "al-e1": {"priority": 3.0, "affinity": None, "cost": None, "fairness": None, "deadline": None}
    }
    assert policy["weights"]["priority"] == 1.0  # the base weight is untouched
    got = next_json(cli, "--limit", "4", "--preview")
    assert [(d["node_id"], d["score"], d["graph_id"]) for d in got] == [
        ("al-a", 6.125, "al-e1"),  # 3 * 2 + 0.125
        ("be-b", 3.125, "be-e2"),
        ("al-e1", 0.125, "al-e1"),  # an epic is its own graph: 3 * 0 + 0.125
        ("be-e2", 0.125, "be-e2"),
    ]


def test_limit(cli, rigs):
    write_items(cli.town, "alpha", [item(f"al-{n}", priority=n % 5, minute=n) for n in range(6)])
    assert ids(next_json(cli, "--limit", "3")) == ["al-0", "al-5", "al-1"]
    assert len(next_json(cli)) == 1  # the default is one decision
    assert len(next_json(cli, "--limit", "50")) == 6
    for bad in ("0", "-2"):
        done = cli.run("schedule", "next", "--limit", bad, "--json", check=False)
        assert done.returncode == 2
        assert "--limit must be >= 1" in done.stderr
    assert cli.run("schedule", "next", "--limit", "x", check=False).returncode == 2


def test_preview_persists_nothing(cli, rigs):
    write_items(cli.town, "alpha", [item("al-1")])
    assert ids(next_json(cli, "--preview")) == ["al-1"]
    assert decisions(cli.town) == []
    assert events(cli.town) == []
    assert ids(next_json(cli)) == ["al-1"]
    assert len(decisions(cli.town)) == 1


def test_decisions_are_persisted_with_their_events(cli, rigs, tmp_path):
    write_items(
        cli.town,
        "alpha",
        [
            item("al-1", priority=1, title="Fix the parser", assignee="ann"),
            item("al-2", priority=3, minute=1),
        ],
    )
    got = next_json(cli, "--limit", "2")
    assert list(got[0]) == [
        "decision_id",
        "at",
        "graph_id",
        "node_id",
        "score",
        "reasons",
        "dispatch_hints",
        "sling_command",
        "skipped",
    ]
    assert got[0]["dispatch_hints"] == {
        "title": "Fix the parser",
        "project": "alpha",
        "repository": str(tmp_path / "repos" / "alpha"),
        "agent_id": "ann",
        "priority": 1,
    }
    assert got[1]["dispatch_hints"]["agent_id"] is None
    assert got[0]["sling_command"] == "sluice sling al-1 alpha"
    assert len(got[0]["decision_id"]) == 32 and got[0]["decision_id"] != got[1]["decision_id"]
    assert got[0]["at"] == got[1]["at"] and got[0]["at"].endswith("Z")
    assert decisions(cli.town) == got
    logged = events(cli.town, "ScheduleDecision", "ScheduleSkipped")
    assert [(e["type"], e["payload"]) for e in logged] == [
        (
            "ScheduleDecision",
            {k: d[k] for k in ("decision_id", "graph_id", "node_id", "score", "skipped", "reasons")},
        )
        for d in got
    ]
    # Advisory only: the items are untouched and asking again gives the same answer.
    assert cli.json("item", "show", "al-1")["status"] == "open"
    assert ids(next_json(cli, "--limit", "2")) == ["al-1", "al-2"]


def test_nothing_ready_is_an_empty_answer(cli, rigs):
    write_items(
        cli.town,
        "alpha",
        [
            item("al-done", status="closed"),
            item("al-wait", blocked_by=["al-x"]),
            item("al-x", status="in_progress"),
        ],
    )
    assert next_json(cli) == []
    assert cli.run("schedule", "next").stdout.strip() == "No ready items."
    assert decisions(cli.town) == []


def test_text_output_is_one_line_per_decision(cli, rigs):
    write_items(cli.town, "alpha", [item("al-1", priority=0, title="First"), item("al-2", minute=1)])
    lines = cli.run("schedule", "next", "--limit", "2", "--preview").stdout.splitlines()
    assert lines == ["DECISION  ITEM  SCORE  GRAPH  RIG    TITLE",  # a header over aligned columns
                     "next      al-1   4.12  -      alpha  First",
                     "next      al-2   2.12  -      alpha  work al-2"]


# -- fairness (metagit never tested it) ---------------------------------------------------


def test_fairness_prefers_the_rig_scheduled_least(cli, rigs):
    write_items(cli.town, "alpha", [item("al-1", minute=0)])
    write_items(cli.town, "beta", [item("be-1", minute=1)])
    cli.run("schedule", "policy", "set", "--fairness", "1")
    first = next_json(cli)  # nobody scheduled yet: every rig is least scheduled, a uniform shift
    assert [(d["node_id"], d["score"], d["reasons"][-1]) for d in first] == [("al-1", 3.125, "fairness=1")]
    second = next_json(cli, "--limit", "2")  # alpha has one decision now, beta none
    assert [(d["node_id"], d["score"], d["reasons"][-1]) for d in second] == [
        ("be-1", 3.125, "fairness=1"),
        ("al-1", 2.125, "fairness=0"),
    ]
    # That call gave each rig one more: alpha 2, beta 1, so beta still leads.
    assert ids(next_json(cli, "--preview")) == ["be-1"]
    from sluice.store.database.decisions import decision_counts
    from sluice.store.files.town import Town

    assert decision_counts(Town(cli.town)) == {"alpha": 2, "beta": 1}


def test_fairness_counts_dispatches_logged_by_the_dispatcher_too(cli, rigs):
    write_items(cli.town, "alpha", [item("al-1", minute=0)])
    write_items(cli.town, "beta", [item("be-1", minute=1)])
    hints = {"title": "x", "project": "alpha", "repository": "/r", "agent_id": None, "priority": 2}
    from sluice.store.database.decisions import append_decisions
    from sluice.store.files.town import Town

    append_decisions(Town(cli.town), [{"decision_id": "d", "node_id": "al-0", "dispatch_hints": hints,
                                       "source": "dispatch"}])
    cli.run("schedule", "policy", "set", "--fairness", "0.5")
    assert ids(next_json(cli, "--preview")) == ["be-1"]


# -- graphs across rigs (metagit never tested them) ----------------------------------------


@pytest.fixture
def graphs_cli(cli, rigs) -> Cli:
    """The CLI over rigs alpha and beta holding two epics, a sub-epic and a child across prefixes."""
    write_items(
        cli.town,
        "alpha",
        [
            item("al-release", issue_type="epic", priority=4),
            item("al-sub", issue_type="epic", priority=4, parent="al-release"),
            item("al-api", priority=1, parent="al-sub", minute=1),
            item("al-misc", priority=0, minute=2),
            item("al-hotfix", issue_type="epic", priority=4),
            item("al-patch", priority=2, parent="al-hotfix", minute=3),
        ],
    )
    write_items(
        cli.town,
        "beta",
        [
            item("be-web", priority=1, parent="al-release", tokens=0, minute=4),
            item("be-docs", priority=3, parent="al-release", minute=5),
        ],
    )
    return cli


def test_graph_ids_are_top_level_epics_of_the_items_own_prefix(graphs_cli):
    """beads: a cross-prefix parent-child edge is external and makes no one a child (items.md)."""
    got = next_json(graphs_cli, "--limit", "5", "--preview")
    assert [(d["node_id"], d["graph_id"]) for d in got] == [
        ("al-misc", None),
        ("be-web", None),  # its parent al-release has another prefix
        ("al-api", "al-release"),
        ("al-patch", "al-hotfix"),
        ("be-docs", None),
    ]


def test_graph_filter_keeps_one_graph(graphs_cli):
    got = next_json(graphs_cli, "--graph-id", "al-release", "--limit", "10", "--preview")
    assert [(d["node_id"], d["score"]) for d in got] == [
        ("al-api", 3.125),
        ("al-release", 0.125),
        ("al-sub", 0.125),
    ]
    assert {d["graph_id"] for d in got} == {"al-release"}
    assert ids(next_json(graphs_cli, "--graph-id", "al-hotfix", "--limit", "10")) == [
        "al-patch",
        "al-hotfix",
    ]


def test_fairness_under_a_graph_filter_compares_only_that_graphs_rigs(graphs_cli):
    cli = graphs_cli
    cli.run("schedule", "policy", "set", "--fairness", "1")
    next_json(cli, "--graph-id", "al-hotfix")  # alpha: 1 decision
    got = next_json(cli, "--graph-id", "al-hotfix", "--preview")
    # Only alpha has hotfix work, so alpha is the least scheduled of the ready rigs.
    assert got[0]["reasons"][-1] == "fairness=1"
    # Unfiltered, beta is the least scheduled; under al-release only alpha has work, so alpha is.
    got = next_json(cli, "--limit", "2", "--preview")
    assert [(d["node_id"], d["reasons"][-1]) for d in got] == [
        ("be-web", "fairness=1"),
        ("al-misc", "fairness=0"),
    ]
    got = next_json(cli, "--graph-id", "al-release", "--limit", "1", "--preview")
    assert [(d["node_id"], d["reasons"][-1]) for d in got] == [("al-api", "fairness=1")]


def test_a_graph_override_on_one_graph_in_several_rigs(graphs_cli):
    cli = graphs_cli
    cli.run("schedule", "policy", "set", "--graph-id", "al-hotfix", "--priority", "4", "--cost", "0")
    got = next_json(cli, "--limit", "2", "--preview")
    assert [(d["node_id"], d["score"]) for d in got] == [("al-patch", 8.0), ("al-misc", 4.125)]


def test_an_unknown_or_wrong_graph_is_an_error(graphs_cli):
    for graph, message in (
        ("al-nothing", "unknown graph 'al-nothing'"),
        ("al-api", "al-api is a task, not an epic"),
        ("al-sub", "al-sub is inside graph al-release"),
    ):
        done = graphs_cli.run("schedule", "next", "--graph-id", graph, "--json", check=False)
        assert done.returncode == 1, done.stderr
        assert message in done.stderr
        assert done.stdout == ""


# -- status ---------------------------------------------------------------------------------


def test_status_reports_policy_ready_count_recent_decisions_and_merge_pressure(cli, rigs):
    write_items(
        cli.town, "alpha", [item("al-1", priority=0), item("al-2", minute=1), merge_request("al-m", "open")]
    )
    write_items(cli.town, "beta", [item("be-1", priority=1), merge_request("be-m", "closed")])
    empty = cli.json("schedule", "status")
    assert empty == {
        "policy": cli.json("schedule", "policy", "show"),
        "ready_count": 3,
        "recent_decisions": [],
        "merge_pressure": {"alpha": 1},
    }
    first = next_json(cli)
    second = next_json(cli, "--limit", "2")
    status = cli.json("schedule", "status", "--recent", "2")
    assert status["recent_decisions"] == [second[1], second[0]]  # newest first
    assert cli.json("schedule", "status", "--recent", "10")["recent_decisions"][-1] == first[0]
    assert cli.json("schedule", "status", "--recent", "0")["recent_decisions"] == []
    assert cli.run("schedule", "status", "--recent", "-1", check=False).returncode == 2
    text = cli.run("schedule", "status").stdout.splitlines()
    assert text[:5] == ["Schedule status", "", "  Ready items:       3",
                        "  Recent decisions:  3 shown (newest first)",
                        "  Merge pressure:    alpha (1 in its merge queue)"]
    assert text[7].split() == ["AT", "DECISION", "ITEM", "SCORE", "BY"]


def test_status_reads_only_the_end_of_a_long_log(cli, rigs):
    path = cli.town / ".sluice" / "schedule" / "decisions.jsonl"
    path.write_text("this line is not JSON\n" + "{}\n" * 50_000)
    write_items(cli.town, "alpha", [item("al-1")])
    next_json(cli)
    assert [
        d.get("node_id") for d in cli.json("schedule", "status", "--recent", "2")["recent_decisions"]
    ] == ["al-1", None]
    # A bad line inside the tail is an error naming the file and its line.
    with open(path, "a") as fh:
        fh.write("{oops\n")
    done = cli.run("schedule", "status", "--json", check=False)
    assert done.returncode == 1
    assert f"{path}:50003: malformed decision" in done.stderr


def test_a_torn_last_line_never_fuses_with_the_next_decision_or_event(cli, rigs):
    """A crash mid-append leaves a fragment; the next append must not glue itself onto it."""
    write_items(cli.town, "alpha", [item("al-1")])
    first = next_json(cli)
    town = cli.town / ".sluice"
    for path in (town / "schedule" / "decisions.jsonl", town / "events" / "scheduler.jsonl"):
        with open(path, "ab") as fh:
            fh.write(b'{"decision_id": "interrup')
    done = cli.run("schedule", "next", "--json")
    assert "dropping a torn last line" in done.stderr
    second = json.loads(done.stdout)
    assert decisions(cli.town) == [*first, *second]
    assert [e["payload"]["decision_id"] for e in events(cli.town, "ScheduleDecision")] == [
        first[0]["decision_id"], second[0]["decision_id"],
    ]  # fmt: skip
    status = cli.json("schedule", "status")
    assert [d["decision_id"] for d in status["recent_decisions"]] == [second[0]["decision_id"],
                                                                      first[0]["decision_id"]]


# -- policy -----------------------------------------------------------------------------------


def test_policy_show_defaults_and_set_round_trip(cli, rigs):
    defaults = cli.json("schedule", "policy", "show")
    assert defaults == {
        "weights": {"priority": 1.0, "affinity": 0.5, "cost": 0.25, "fairness": 0.0, "deadline": 0.0},
        "merge_queue_threshold": 3,
        "merge_pressure_penalty": 2.0,
        "skip_on_merge_pressure": False,
        "graph_overrides": {},
        "aging": 0.0,
        "aging_max": 2.0,
    }
    after = cli.json(
        "schedule",
        "policy",
        "set",
        "--priority",
        "2",
        "--fairness",
        "0.1",
        "--merge-queue-threshold",
        "5",
        "--merge-pressure-penalty",
        "1.5",
        "--skip-on-merge-pressure",
    )
    assert after["weights"] == {"priority": 2.0, "affinity": 0.5, "cost": 0.25, "fairness": 0.1,
                                 "deadline": 0.0}
    assert (
        after["merge_queue_threshold"],
        after["merge_pressure_penalty"],
        after["skip_on_merge_pressure"],
    ) == (5, 1.5, True)
    assert cli.json("schedule", "policy", "show") == after
    on_disk = json.loads((cli.town / ".sluice" / "schedule" / "policy.json").read_text())
    assert on_disk == after
    assert (
        cli.json("schedule", "policy", "set", "--no-skip-on-merge-pressure")["skip_on_merge_pressure"]
        is False
    )
    text = cli.run("schedule", "policy", "show").stdout
    rows = {line.split()[0]: line.split()[1] for line in text.splitlines()[3:] if line.strip()}
    assert text.startswith("Scoring policy\n\n  SETTING")
    weights = (rows["priority"], rows["affinity"], rows["cost"], rows["fairness"])
    assert weights == ("2.0", "0.5", "0.25", "0.1")
    assert (rows["merge_queue_threshold"], rows["merge_pressure_penalty"]) == ("5", "1.5")


def test_a_threshold_below_one_is_refused_on_set_and_on_load(cli, rigs):
    policy_file = cli.town / ".sluice" / "schedule" / "policy.json"
    done = cli.run("schedule", "policy", "set", "--merge-queue-threshold", "0", check=False)
    assert done.returncode == 2
    assert "--merge-queue-threshold must be >= 1" in done.stderr
    assert not policy_file.exists()
    policy_file.write_text(json.dumps({"merge_queue_threshold": 0}))
    write_items(cli.town, "alpha", [item("al-1")])
    for command in (("schedule", "next"), ("schedule", "status"), ("schedule", "policy", "show")):
        done = cli.run(*command, check=False)
        assert done.returncode == 1, command
        assert str(policy_file) in done.stderr and "merge_queue_threshold must be >= 1" in done.stderr
        assert "Traceback" not in done.stderr


# -- one ranking: the dispatcher orders queued work exactly as `schedule next` does -----------


def test_scheduler_list_status_and_dry_run_follow_the_schedule_next_order(cli, rigs, tmp_path):
    write_items(
        cli.town,
        "alpha",
        [
            item("al-epic", issue_type="epic", status="in_progress"),
            item("al-e1", priority=2, parent="al-epic", tokens=500, minute=1),
            item("al-e2", priority=3, parent="al-epic", minute=2),
            item("al-p0", priority=0, tokens=8000, minute=3),
            item("al-t1", priority=1, minute=4),
            item("al-t2", priority=1, minute=4),
            *(merge_request(f"al-m{n}", "open") for n in range(3)),
        ],
    )
    write_items(
        cli.town,
        "beta",
        [
            item("be-a", priority=1, tokens=0, minute=5),
            item("be-b", priority=2, minute=6),
            item("be-c", priority=2, minute=7),
            item("be-d", priority=4, tokens=250, minute=8),
        ],
    )
    add_worktree(tmp_path / "repos" / "beta", tmp_path / "wt-beta")
    cli.run("schedule", "policy", "set", "--fairness", "0.3")
    cli.run("schedule", "policy", "set", "--graph-id", "al-epic", "--priority", "2.5")
    hints = {"title": "x", "project": "beta", "repository": "/r", "agent_id": None, "priority": 2}
    (cli.town / ".sluice" / "schedule" / "decisions.jsonl").write_text(
        json.dumps({"decision_id": "d", "node_id": "be-x", "dispatch_hints": hints}) + "\n"
    )
    advice = next_json(cli, "--limit", "20", "--preview")
    # Queue every ready item, in creation order so both tie-break timestamps agree.
    by_creation = ["al-e1", "al-e2", "al-p0", "al-t1", "al-t2", "be-a", "be-b", "be-c", "be-d"]
    assert sorted(d["node_id"] for d in advice) == by_creation
    cli.run("config", "set", "scheduler.max_polecats", "4")
    cli.run("sling", *by_creation)
    expected = [(d["node_id"], d["score"]) for d in advice]
    listed = cli.json("scheduler", "list")
    assert [(row["id"], row["score"]) for row in listed if not row["blocked"]] == expected
    status = cli.json("scheduler", "status")
    assert [(row["id"], row["score"]) for row in status["items"] if not row["blocked"]] == expected
    planned = cli.json("scheduler", "run", "--dry-run", "--batch", "3")["planned"]
    assert [(row["item_id"], row["score"]) for row in planned] == expected[:3]
    # The pressured rig's work is penalised, not skipped: 4 + 0.25 / 9 + 0.3 (alpha is least scheduled) - 2.
    [p0] = [d for d in advice if d["node_id"] == "al-p0"]
    assert p0["score"] == 2.327778
    assert p0["reasons"] == [
        "priority=0",
        "affinity=0",
        "cost=0.1111(tokens=8000)",
        "fairness=1",
        "merge_pressure depth=3 threshold=3 penalty=2.0",
    ]
    assert {row["id"] for row in listed} == set(by_creation)


def test_every_schedule_command_and_flag_is_documented(cli):
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[1] / "docs" / "scoring.md").read_text()
    for command in (("next",), ("status",), ("policy", "show"), ("policy", "set")):
        assert f"schedule {' '.join(command)}" in docs
        help_text = cli.run("schedule", *command, "--help", env={"COLUMNS": "250"}).stdout
        for flag in re.findall(r"(--[a-z][a-z-]+)", help_text):
            if flag != "--help":
                assert flag in docs, f"{flag} of `schedule {' '.join(command)}` is not in docs/scoring.md"


def test_policy_set_refuses_a_graph_that_is_no_top_level_epic(graphs_cli):
    before = graphs_cli.json("schedule", "policy", "show")
    for graph, message in (
        ("al-nothing", "unknown graph 'al-nothing'"),
        ("al-api", "al-api is a task, not an epic"),
        ("al-sub", "al-sub is inside graph al-release"),
    ):
        done = graphs_cli.run("schedule", "policy", "set", "--graph-id", graph, "--priority", "3",
                               check=False)
        assert done.returncode == 1, done.stderr
        assert message in done.stderr and done.stdout == ""
    assert graphs_cli.json("schedule", "policy", "show") == before  # nothing written


def test_policy_unset_removes_one_graphs_overrides(graphs_cli):
    cli = graphs_cli
    cli.run("schedule", "policy", "set", "--graph-id", "al-hotfix", "--priority", "4", "--cost", "0")
    cli.run("schedule", "policy", "set", "--graph-id", "al-release", "--affinity", "1")
    assert [d["node_id"] for d in next_json(cli, "--limit", "1", "--preview")] == ["al-patch"]
    policy = cli.json("schedule", "policy", "unset", "--graph-id", "al-hotfix")
    assert list(policy["graph_overrides"]) == ["al-release"]
    assert cli.json("schedule", "policy", "show") == policy
    assert [d["node_id"] for d in next_json(cli, "--limit", "1", "--preview")] == ["al-misc"]  # base weights
    again = cli.run("schedule", "policy", "unset", "--graph-id", "al-hotfix", check=False)
    assert again.returncode == 1
    assert "graph 'al-hotfix' has no policy override (overridden: al-release)" in again.stderr
    missing = cli.run("schedule", "policy", "unset", check=False)
    assert missing.returncode == 2 and "--graph-id" in missing.stderr


def test_policy_unset_works_for_a_graph_that_is_gone(graphs_cli):
    """An override outlives its epic (closed, deleted, its rig removed); unset still removes it."""
    cli = graphs_cli
    cli.run("schedule", "policy", "set", "--graph-id", "al-hotfix", "--priority", "4")
    cli.run("item", "close", "al-patch")
    cli.run("item", "close", "al-hotfix")
    assert cli.json("schedule", "policy", "unset", "--graph-id", "al-hotfix")["graph_overrides"] == {}


def test_the_sling_command_of_a_foreign_prefix_item_works_as_printed(cli, rigs, tmp_path):
    """An export may hold another project's ids; the advice must still be a command that queues it."""
    import shlex

    export = tmp_path / "foreign.jsonl"
    export.write_text(json.dumps(item("zz-1", priority=0)) + "\n")
    cli.run("item", "import", "alpha", str(export))
    write_items(cli.town, "alpha", [item("al-1", priority=1)])
    cli.run("config", "set", "scheduler.max_polecats", "2")  # deferred: slinging queues
    got = {d["node_id"]: d["sling_command"] for d in next_json(cli, "--limit", "2", "--preview")}
    assert got == {"zz-1": "sluice sling zz-1 alpha --force", "al-1": "sluice sling al-1 alpha"}
    for command in got.values():
        cli.run(*shlex.split(command)[1:])
    assert {row["id"] for row in cli.json("scheduler", "list")} == {"zz-1", "al-1"}
