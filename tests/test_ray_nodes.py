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

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from helpers.polecats import gone, wait_for
from helpers.ray_cluster import AGENT_SLOTS, add_node, alive_nodes, stop_node

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one Ray head for all of them

FAR_SLOTS = 1


@pytest.fixture(scope="module")
def shared():
    """What every node sees: the agent, its reports, the remotes and the workspaces' root."""
    root = Path(tempfile.mkdtemp(prefix="sluice-shared-", dir="/tmp"))
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


def test_a_killed_node_is_gone_from_the_cluster_and_leaves_no_process(ray_cluster, far_node):
    """Last in the module: it takes the second node away for good."""
    ended = stop_node(far_node, kill=True)  # the machine disappears: all its processes SIGKILLed at once
    assert len(ended) > 3  # ray start, its raylet, the node's agents and workers
    wait_for(lambda: all(gone(pid) for pid in ended), timeout=30, what="the node's processes to end")
    deadline = time.monotonic() + 60
    while far_node.node_id in {n["node_id"] for n in alive_nodes(ray_cluster)}:
        assert time.monotonic() < deadline, "the head still lists the killed node after 60 s"
        time.sleep(0.5)
