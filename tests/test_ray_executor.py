"""The Ray Jobs executor against a real local Ray head (started by tests/helpers/ray_cluster.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.polecats import configure, gone, install_polecat, polecat_command, report, request, wait_for
from helpers.ray_cluster import AGENT_SLOTS, free_port
from helpers.scheduler import contexts, fields, item, write_items
from sluice.errors import ExecutorError, ExecutorUnavailable
from sluice.executors import get_executor
from sluice.executors.ray import NOT_INSTALLED, RayExecutor
from sluice.executors.ray_job import ENTRYPOINT, SPEC_VAR
from sluice.store.files.town import Town

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one Ray head for all of them


def use_ray(cli, address: str, command: list[str], resources: dict | None = None) -> None:
    configure(cli.town, {
        "executor.kind": "ray",
        "executor.ray.address": address,
        "executor.ray.resources": json.dumps(resources or {"agent_slot": 1}),
        "executor.command": json.dumps(command),
    })


@pytest.fixture
def ray_setup(cli, rig, tmp_path, ray_cluster) -> Iterator[tuple[Town, RayExecutor, Path, Path]]:
    """A town on the test cluster whose polecat sleeps 60 s; its jobs are stopped afterwards."""
    script, reports = install_polecat(tmp_path / "polecat")
    use_ray(cli, ray_cluster.address, polecat_command(script, reports, 60))
    town = Town(cli.town)
    executor = get_executor(town)
    yield town, executor, reports, script
    for polecat in RayExecutor(Town(cli.town)).active():
        executor.stop(polecat.id)


def test_launch_submits_one_job_that_runs_argv_in_the_repo_with_env(ray_setup):
    town, executor, reports, _ = ray_setup
    assert isinstance(executor, RayExecutor)
    title = "fix it; touch /tmp/never $(id) 'quoted' \"double\" `tick` \\ *"
    polecat = executor.launch(request(town, "alpha", "al-1", "al-wisp-r1", title=title))
    assert polecat.executor == "ray" and polecat.state in ("pending", "running")
    assert (polecat.item_id, polecat.rig, polecat.context_id) == ("al-1", "alpha", "al-wisp-r1")
    seen = report(reports, "al-wisp-r1", timeout=90)
    assert seen["argv"] == [title, "al-1"]  # the title arrived as one literal argument
    assert seen["cwd"] == str(town.rig("alpha").repo)
    assert seen["env"] == {
        "SLUICE_ITEM_ID": "al-1",
        "SLUICE_RIG": "alpha",
        "SLUICE_CONTEXT_ID": "al-wisp-r1",
        "SLUICE_TOWN": str(town.root),
    }
    assert [(p.id, p.state) for p in executor.active()] == [(polecat.id, "running")]
    job = executor.client.get_job_info(polecat.id)
    assert job.metadata["sluice_town"] == executor.key
    assert {k: job.metadata[k] for k in ("town", "rig", "item_id", "context_id")} == {
        "town": str(town.root), "rig": "alpha", "item_id": "al-1", "context_id": "al-wisp-r1",
    }
    assert job.entrypoint == ENTRYPOINT  # the shell Ray runs it with sees sluice's constant only
    spec = json.loads(job.runtime_env["env_vars"][SPEC_VAR])
    argv = request(town, "alpha", "al-1", "al-wisp-r1", title=title).argv
    assert spec == {"repo": str(town.rig("alpha").repo), "argv": list(argv)}


def test_the_same_context_submitted_twice_is_one_job(ray_setup):
    town, executor, _, _ = ray_setup
    first = executor.launch(request(town, "alpha", "al-2", "al-wisp-r2"))
    again = executor.launch(request(town, "alpha", "al-2", "al-wisp-r2"))  # Ray: "already exists"
    assert again.id == first.id
    assert [p.id for p in executor.listing()] == [first.id]
    assert executor.find("al-wisp-r2").id == first.id
    assert executor.find("al-wisp-none") is None


def test_a_head_with_no_job_agent_free_is_asked_again_and_the_launch_goes_through(ray_setup, monkeypatch):
    """Ray answers 500 "No available agent" while its job agent starts or is overloaded."""
    from sluice.executors import ray as ray_module

    town, executor, reports, _ = ray_setup
    monkeypatch.setattr(ray_module, "BUSY_RETRY_WAITS", (0.01, 0.01, 0.01))
    real, refusals = executor.client.submit_job, []

    def busy_twice(**kwargs):
        if len(refusals) < 2:
            refusals.append(kwargs["submission_id"])
            raise RuntimeError("Request failed with status code 500: No available agent to submit job,"
                               " please try again later..")
        return real(**kwargs)

    monkeypatch.setattr(executor.client, "submit_job", busy_twice)
    polecat = executor.launch(request(town, "alpha", "al-9", "al-wisp-r9"))
    assert refusals == [polecat.id, polecat.id]  # asked again with the same submission id
    assert report(reports, "al-wisp-r9", timeout=90)["argv"][-1] == "al-9"
    refusals.clear()

    def always_busy(**kwargs):
        refusals.append(kwargs["submission_id"])
        raise RuntimeError("Request failed with status code 500: No available agent to submit job")

    monkeypatch.setattr(executor.client, "submit_job", always_busy)
    # still busy after every wait: the head is unavailable, which counts no failure against the item
    with pytest.raises(ExecutorUnavailable, match=r"no job agent free after 0\.03s.*No available agent"):
        executor.launch(request(town, "alpha", "al-10", "al-wisp-r10"))
    assert len(refusals) == 4  # the first try and one after each of the three waits


def test_stop_ends_the_job_and_every_process_of_the_polecat(ray_setup):
    town, executor, reports, _ = ray_setup
    polecat = executor.launch(request(town, "alpha", "al-3", "al-wisp-r3"))
    seen = report(reports, "al-wisp-r3", timeout=90)
    assert not gone(seen["pid"]) and not gone(seen["child"])
    assert executor.stop(polecat.id) is True
    assert gone(seen["pid"]) and gone(seen["child"])
    assert executor.active() == []
    assert executor.find("al-wisp-r3").state == "stopped"
    assert executor.stop(polecat.id) is False  # already stopped
    assert executor.stop("sluice-no-such-job") is False


def test_logs_follow_until_the_job_ends_then_reap_keeps_them(ray_setup, cli):
    town, executor, reports, script = ray_setup
    configure(cli.town, {"executor.command": json.dumps(polecat_command(script, reports, 1))})
    town = Town(cli.town)
    executor = get_executor(town)
    polecat = executor.launch(request(town, "alpha", "al-4", "al-wisp-r4"))
    followed = list(executor.logs(polecat.id, follow=True))
    assert "polecat up for al-4" in followed and "polecat done" in followed
    wait_for(lambda: executor.find("al-wisp-r4").state == "exited", timeout=30, what="the job to finish")
    assert "polecat done" in list(executor.logs(polecat.id))
    reaped = executor.reap()
    assert [p.id for p in reaped] == [polecat.id]
    assert executor.listing() == []  # deleted from the cluster
    assert "polecat done" in list(executor.logs(polecat.id))  # the kept copy under runtime/workers/
    assert (town.workers_dir / f"{polecat.id}.log").exists()
    assert executor.find("al-wisp-r4").id == polecat.id  # still known to a reconciling dispatcher


def test_agent_slot_resources_cap_running_polecats_per_node(ray_setup):
    town, executor, reports, _ = ray_setup
    launched = [executor.launch(request(town, "alpha", f"al-{n}", f"al-wisp-s{n}")) for n in range(3)]
    for n in range(AGENT_SLOTS):
        report(reports, f"al-wisp-s{n}", timeout=90)
    states = sorted(p.state for p in executor.active())
    assert states == ["pending", "running", "running"]  # two slots on the node, one job waits
    assert not (reports / "al-wisp-s2.json").exists()
    executor.stop(launched[0].id)
    report(reports, "al-wisp-s2", timeout=90)  # a freed slot lets the waiting polecat start


def test_dispatcher_respects_max_polecats_with_ray_polecats(ray_setup, cli):
    _, executor, _, _ = ray_setup
    configure(cli.town, {"scheduler.max_polecats": "2", "scheduler.batch_size": "5"})
    write_items(cli.town, "alpha", [item(f"al-{n}", f"task {n}") for n in range(1, 5)])
    cli.run("sling", "al-1", "al-2", "al-3", "al-4", "alpha")
    first = cli.json("scheduler", "run")
    assert (first["dispatched"], first["reason"]) == (2, "capacity")
    assert len(executor.active()) == 2
    second = cli.json("scheduler", "run")
    assert (second["dispatched"], second["capacity"]) == (0, 0)
    assert len(executor.active()) == 2
    status = cli.json("scheduler", "status")
    assert (status["active_polecats"], status["queued_total"]) == (2, 2)


def test_an_unreachable_cluster_is_unavailable_and_costs_items_nothing(cli, rig, tmp_path):
    script, reports = install_polecat(tmp_path / "polecat")
    use_ray(cli, f"http://127.0.0.1:{free_port()}", polecat_command(script, reports, 1))
    town = Town(cli.town)
    with pytest.raises(ExecutorUnavailable, match="unreachable"):
        get_executor(town).active()
    with pytest.raises(ExecutorUnavailable, match="unreachable"):
        get_executor(town).launch(request(town, "alpha", "al-1", "al-wisp-u1"))
    configure(cli.town, {"scheduler.max_polecats": "2"})
    write_items(cli.town, "alpha", [item("al-1", "task")])
    cli.run("sling", "al-1", "alpha")
    done = cli.run("scheduler", "run", check=False)
    assert done.returncode == 1 and "unreachable" in done.stderr
    [context] = contexts(cli.town, "alpha")
    assert context["status"] == "open" and fields(context).get("dispatch_failures", 0) == 0


def test_a_clone_workspace_without_a_remote_is_a_launch_failure_before_any_job(cli, rig, tmp_path):
    script, reports = install_polecat(tmp_path / "polecat")
    use_ray(cli, f"http://127.0.0.1:{free_port()}", polecat_command(script, reports, 1))  # no cluster there
    configure(cli.town, {"executor.workspace": "clone", "rigs.alpha.remote": "none"})
    town = Town(cli.town)
    with pytest.raises(ExecutorError, match="rig 'alpha' has no remote") as caught:
        get_executor(town).launch(request(town, "alpha", "al-1", "al-wisp-n1"))
    assert not isinstance(caught.value, ExecutorUnavailable)  # the item's failure, counted as such


def test_a_missing_ray_install_says_how_to_install_it(cli, rig):
    configure(cli.town, {"executor.kind": "ray"})
    probe = (
        "import sys; sys.modules['ray'] = None\n"
        "from sluice.errors import ExecutorUnavailable\n"
        "from sluice.executors import get_executor\n"
        "from sluice.store.files.town import Town\n"
        "try:\n"
        "    get_executor(Town(sys.argv[1])).active()\n"
        "except ExecutorUnavailable as err:\n"
        "    print(err)\n"
    )
    argv = [sys.executable, "-c", probe, str(cli.town)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == NOT_INSTALLED
