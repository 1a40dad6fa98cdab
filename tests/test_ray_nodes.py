"""Ray polecats on a real two-node cluster where the second node cannot see the town.

The session's Ray head (tests/conftest.py) is joined, for this module only,
by a second node started with ``ray start --address …`` inside a mount
namespace where the session's whole temporary directory — every town and
every rig repository of the tests — is covered by an empty tmpfs
(:func:`helpers.ray_cluster.add_node`).  What both nodes share is what real
machines share: the network, here loopback, and what is outside that
directory (the agent program, a git remote).  The head offers two
``agent_slot`` resources, the second node one, and ``far`` that only it has.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.polecats import configure, gone, wait_for
from helpers.ray_cluster import AGENT_SLOTS, add_node, alive_nodes, stop_node
from helpers.scheduler import events, fields, item, open_contexts, tree_hash, write_items
from sluice.executors import get_executor
from sluice.executors.ray_job import WORKSPACE_FAILED
from sluice.scheduler.launch.dispatch import run_cycle
from sluice.scheduler.launch.ends import settle
from sluice.scheduler.launch.sling import SlingOptions, sling
from sluice.store.database import runs as runlog
from sluice.store.files.town import Town

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one Ray head for all of them

FAR_SLOTS = 1

#: The agent: reports where it runs and what it sees, waits for ``release`` (or ``release-<item>``),
#: then exits with the number its title ends with.
AGENT = r'''
import json, os, re, subprocess, sys, time
reports, town, title = sys.argv[1], sys.argv[2], sys.argv[3]
item = os.environ["SLUICE_ITEM_ID"]
head = subprocess.run(["git", "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True, text=True)
info = {"cwd": os.getcwd(), "argv": sys.argv[3:], "branch": head.stdout.strip(),
        "sees_town": os.path.exists(town), "pid": os.getpid(),
        "env": {k: v for k, v in os.environ.items() if k.startswith("SLUICE_")}}
path = os.path.join(reports, item + ".json")
with open(path + ".tmp", "w") as fh:
    json.dump(info, fh)
os.replace(path + ".tmp", path)
while not any(os.path.exists(os.path.join(reports, name)) for name in ("release", "release-" + item)):
    time.sleep(0.05)
sys.exit(int(re.findall(r"exit (\d+)", title)[-1]))
'''


@pytest.fixture(scope="module")
def shared():
    """What every node sees: the agent, its reports, the remotes and the workspaces' root."""
    root = Path(tempfile.mkdtemp(prefix="sluice-shared-", dir="/tmp"))
    (root / "agent.py").write_text(AGENT)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def far_node(ray_cluster, tmp_path_factory, shared):
    """The second node, blind to every town and rig of the session; ended with this module."""
    node = add_node(ray_cluster, {"agent_slot": FAR_SLOTS, "far": 1}, [tmp_path_factory.getbasetemp()])
    yield node
    stop_node(node)


def run_job(cluster, entrypoint: str, resources: dict) -> tuple[str, str, str]:
    """Run a bare Ray job to its end: (status, node id, log)."""
    client = cluster.client()
    job = client.submit_job(entrypoint=entrypoint, entrypoint_resources=resources)
    wait_for(lambda: str(client.get_job_status(job)) in ("SUCCEEDED", "FAILED", "STOPPED"), timeout=120,
             what=f"job {job} to end")
    info = client.get_job_info(job)
    log = client.get_job_logs(job)
    client.delete_job(job)
    return str(info.status), info.driver_node_id, log


def test_the_second_node_joins_with_its_own_slots_and_cannot_see_the_tests_directory(
        ray_cluster, far_node, tmp_path, shared):
    (tmp_path / "here").write_text("the town's side")
    nodes = {node["node_id"]: node for node in alive_nodes(ray_cluster)}
    assert nodes[far_node.node_id]["resources"]["agent_slot"] == FAR_SLOTS
    [head] = [node for node in nodes.values() if node["head"]]
    assert head["resources"]["agent_slot"] == AGENT_SLOTS
    probe = f"test -e {tmp_path}/here && echo seen; test -d {shared} && echo shared; echo done"
    status, node, log = run_job(ray_cluster, probe, {"far": 1})
    assert (status, node) == ("SUCCEEDED", far_node.node_id)
    printed = log.splitlines()  # (the log also quotes the entrypoint)
    assert "shared" in printed and "done" in printed and "seen" not in printed
    status, node, log = run_job(ray_cluster, probe, {"agent_slot": AGENT_SLOTS})  # only the head has two
    assert (status, node) == ("SUCCEEDED", head["node_id"]) and "seen" in log.splitlines()


@pytest.fixture
def ray_paths(cli, rig, tmp_path, shared, ray_cluster, far_node) -> Iterator[tuple[Path, Path, Path]]:
    """Rig ``alpha`` with a bare remote every node can reach, clone workspaces: (town, reports, remote)."""
    reports = shared / tmp_path.name
    reports.mkdir()
    remote = shared / f"{tmp_path.name}-alpha.git"
    repo = Town(cli.town).rig("alpha").repo
    subprocess.run(["git", "clone", "--quiet", "--bare", str(repo), str(remote)], check=True)
    command = [sys.executable, str(shared / "agent.py"), str(reports), str(cli.town), "{title}",
               "{workspace}", "{branch}"]
    configure(cli.town, {
        "executor.kind": "ray",
        "executor.ray.address": ray_cluster.address,
        "executor.ray.resources": json.dumps({"agent_slot": 1}),
        "executor.command": json.dumps(command),
        "executor.workspace": "clone",
        "executor.workspace_root": str(shared / f"{tmp_path.name}-ws"),
        "rigs.alpha.remote": str(remote),
        "scheduler.max_polecats": "4",  # deferred: the tests' cycles launch
        "scheduler.batch_size": "5",
    })
    ray = get_executor(Town(cli.town))
    yield cli.town, reports, remote
    for polecat in ray.active():
        ray.stop(polecat.id)


def queue(town_dir: Path, *records) -> None:
    write_items(town_dir, "alpha", list(records))
    result = sling(Town(town_dir), [*(r["id"] for r in records), "alpha"], SlingOptions())
    assert result.ok, result.errors


def report(reports: Path, item_id: str, timeout: float = 120) -> dict:
    path = reports / f"{item_id}.json"
    wait_for(path.exists, timeout, what=f"the agent's report {path}")
    return json.loads(path.read_text())


def runs(town_dir: Path) -> dict[str, dict]:
    """Each item's run record (one run per item in these tests)."""
    return {r["item_id"]: r for r in runlog.read_runs(Town(town_dir)).values()}


def ended(town_dir: Path, item_id: str, attempt: int = 1) -> dict | None:
    """The item's run (that attempt) once its end is recorded (settling only: nothing is launched)."""
    town = Town(town_dir)
    settle(town, get_executor(town))
    found = [r for r in runlog.read_runs(town).values() if (r["item_id"], r["attempt"]) == (item_id, attempt)]
    return found[0] if found and found[0]["outcome"] != runlog.RUNNING else None


def running_by_node(town_dir: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for polecat in get_executor(Town(town_dir)).active():
        if polecat.state == "running":
            counts[polecat.detail["node_id"]] = counts.get(polecat.detail["node_id"], 0) + 1
    return counts


def test_polecats_on_both_nodes_clone_the_remote_run_and_report_exit_code_and_node(ray_paths, far_node,
                                                                                   ray_cluster):
    town_dir, reports, remote = ray_paths
    nasty = "exit 0; touch /tmp/never $(id) `tick` 'q' \"d\" {workspace}"
    queue(town_dir, item("al-1", nasty), item("al-2", "exit 3"), item("al-3", "exit 0"),
          item("al-4", "exit 5"), item("al-5", "exit 0"))
    rig_repo = Town(town_dir).rig("alpha").repo
    before = tree_hash(rig_repo)

    first = run_cycle(Town(town_dir))
    assert (first.dispatched, first.reason) == (4, "capacity")  # max_polecats holds the fifth back
    slots = AGENT_SLOTS + FAR_SLOTS
    wait_for(lambda: sum(running_by_node(town_dir).values()) == slots, timeout=120,
             what="every slot of both nodes to hold a polecat")
    by_node = running_by_node(town_dir)
    assert by_node[far_node.node_id] == FAR_SLOTS and sorted(by_node.values()) == sorted([AGENT_SLOTS,
                                                                                           FAR_SLOTS])
    settle(Town(town_dir), get_executor(Town(town_dir)))
    placed = sorted(r["host"] for r in runs(town_dir).values() if r["outcome"] == runlog.RUNNING)
    nodes = [node for node, count in by_node.items() for _ in range(count)]
    assert placed == sorted([*nodes, ray_cluster.address])  # running runs name their node once placed
    states = sorted(p.state for p in get_executor(Town(town_dir)).active())
    assert states == ["pending", "running", "running", "running"]  # no node had a fourth slot
    wait_for(lambda: len(list(reports.glob("al-*.json"))) == slots, timeout=60, what="three reports")
    started = {path.stem: json.loads(path.read_text()) for path in reports.glob("al-*.json")}
    assert sum(not info["sees_town"] for info in started.values()) == FAR_SLOTS  # the second node's
    workspaces = Path(f"{remote}".removesuffix("-alpha.git") + "-ws") / "sluice-workspaces" / "alpha"
    for item_id, info in started.items():
        workspace = info["env"]["SLUICE_WORKSPACE"]
        assert info["cwd"] == workspace and Path(workspace).parent == workspaces
        assert info["branch"] == info["env"]["SLUICE_BRANCH"] == f"sluice/{item_id}"
        assert info["argv"][1:] == [workspace, f"sluice/{item_id}"]  # filled in on the node
    if "al-1" in started:
        assert started["al-1"]["argv"][0] == nasty  # one literal argument: no shell, no second pass

    (reports / "release").touch()

    def all_ended() -> bool:
        run_cycle(Town(town_dir))  # records ends and launches the fifth once a slot frees up
        records = runs(town_dir)
        return len(records) == 5 and all(r["outcome"] != runlog.RUNNING for r in records.values())

    wait_for(all_ended, timeout=180, what="all five runs to end")
    records = runs(town_dir)
    outcomes = {i: (r["outcome"], r["exit_code"]) for i, r in records.items()}
    assert outcomes == {"al-1": ("ok", 0), "al-2": ("failed", 3), "al-3": ("ok", 0), "al-4": ("failed", 5),
                        "al-5": ("ok", 0)}
    hosts = {r["host"] for r in records.values()}
    assert far_node.node_id in hosts and len(hosts) == 2  # each record names the node that ran it
    kept = {path.name for path in workspaces.iterdir() if path.is_dir()}
    assert kept == {r["polecat_id"] for r in records.values() if r["outcome"] != "ok"}  # ok ones removed
    assert tree_hash(rig_repo) == before  # the rig's repository was only ever read


def test_a_clone_that_fails_on_the_node_ends_the_run_failed_with_gits_words(ray_paths, cli):
    town_dir, reports, remote = ray_paths
    shutil.rmtree(remote)  # the remote is gone: the clone on the node fails
    configure(town_dir, {"executor.ray.resources": json.dumps({"agent_slot": 1, "far": 1}),
                         "scheduler.retry_failed_runs": "1"})
    queue(town_dir, item("al-1", "exit 0"))
    assert run_cycle(Town(town_dir)).dispatched == 1  # the launch itself succeeds: the job is accepted
    record = wait_for(lambda: ended(town_dir, "al-1"), timeout=120, what="the run to end")
    assert (record["outcome"], record["exit_code"]) == ("failed", WORKSPACE_FAILED)
    assert record["reason"].startswith(f"cannot clone {remote}: git clone failed")
    assert "fatal:" in record["reason"]  # git's own words
    assert not (reports / "al-1.json").exists()  # the agent never started
    assert f"reason: {record['reason']}" in cli.run("runs").stdout  # and `sluice runs` says it
    [again] = open_contexts(town_dir, "alpha")
    assert fields(again)["run_failures"] == 1 and record["reason"] in fields(again)["last_failure"]

    repo = Town(town_dir).rig("alpha").repo
    subprocess.run(["git", "clone", "--quiet", "--bare", str(repo), str(remote)], check=True)
    (reports / "release-al-1").touch()
    assert run_cycle(Town(town_dir), ignore_backoff=True).dispatched == 1  # the retry, with the remote back
    assert report(reports, "al-1")["branch"] == "sluice/al-1-2"  # a retry's branch is a fresh one
    retried = wait_for(lambda: ended(town_dir, "al-1", attempt=2), timeout=120, what="the retry to end")
    assert (retried["outcome"], retried["reason"]) == ("ok", None)


def test_a_node_killed_mid_run_makes_a_vanished_run_retried_only_as_configured(ray_paths, far_node,
                                                                               ray_cluster):
    """Last in the module: it takes the second node away for good."""
    town_dir, reports, _ = ray_paths
    configure(town_dir, {"executor.ray.resources": json.dumps({"agent_slot": 1, "far": 1}),
                         "scheduler.retry_failed_runs": "1"})
    queue(town_dir, item("al-1", "exit 0"))
    assert run_cycle(Town(town_dir)).dispatched == 1
    assert not report(reports, "al-1")["sees_town"]
    pids = stop_node(far_node, kill=True)  # the machine disappears: all its processes SIGKILLed at once
    assert len(pids) > 3  # ray start, its raylet, the node's agents and workers, the polecat
    record = wait_for(lambda: ended(town_dir, "al-1"), timeout=120, what="the run to end")
    assert (record["outcome"], record["exit_code"], record["host"]) == ("vanished", None, far_node.node_id)
    [exited] = [e for e in events(town_dir, "PolecatExited") if e["payload"]["item_id"] == "al-1"]
    assert exited["payload"]["outcome"] == "vanished"  # said, not silent
    [again] = open_contexts(town_dir, "alpha")  # retried because scheduler.retry_failed_runs = 1
    assert fields(again)["run_failures"] == 1 and "vanished" in fields(again)["last_failure"]
    assert far_node.node_id not in {node["node_id"] for node in alive_nodes(ray_cluster)}
    wait_for(lambda: all(gone(pid) for pid in pids), timeout=30, what="the node's processes to end")
