"""What a Ray polecat job runs on its node (sluice.executors.ray_job), run here as a plain process.

The two-node tests (test_ray_nodes.py) show it under Ray; these show each of
its rules on real git without a cluster: placeholders filled on the node in
one pass, a branch the remote already has never taken over, the workspace
removed after an ok run only when it holds nothing unsaved, a failed clone
named on the last line, the agent's status passed through.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import ROOT, git, make_repo
from sluice.executors.ray_job import DIRECTORY, MARK, SPEC_VAR, WORKSPACE_FAILED, reason_of

#: The agent: writes argv, cwd and SLUICE_* to the report file, optionally leaves a file behind
#: (unsaved work), and exits with the given status.
AGENT = r'''
import json, os, sys
report, code, litter = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "litter"
json.dump({"argv": sys.argv[4:], "cwd": os.getcwd(), "pythonpath": os.environ.get("PYTHONPATH"),
           "env": {k: v for k, v in os.environ.items() if k.startswith("SLUICE_")}}, open(report, "w"))
if litter:
    open("notes.txt", "w").write("work that exists nowhere else")
sys.exit(code)
'''


def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "alpha.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(make_repo(tmp_path / "alpha")), str(bare)],
                   check=True)
    return bare


def job(tmp_path: Path, source: Path, *, code: int = 0, litter: bool = False, title: str = "a title",
        branch: str = "sluice/al-1", filled: bool = False, name: str = "sluice-abc-al-wisp-1",
        keep: int = 5) -> tuple[subprocess.CompletedProcess, dict | None, Path]:
    """Run the job module as Ray would on a node; (process, the agent's report, the rig's workspaces)."""
    report = tmp_path / "report.json"
    report.unlink(missing_ok=True)
    root = tmp_path / "root"
    spec = {
        "rig": "alpha",
        "workspace": {"source": str(source), "branch": branch, "fresh": [f"{branch}-2", f"{branch}-3"],
                      "root": str(root), "name": name, "keep": keep},
        "template": [sys.executable, "-c", AGENT, str(report), str(code), "litter" if litter else "-",
                     "{title}", "{workspace}", "{branch}"],
        "values": {"item_id": "al-1", "rig": "alpha", "title": title, "context_id": "al-wisp-1", "repo": ""},
    }
    if filled:  # a request that came with its argv only: run as it is
        spec["argv"] = [*spec["template"][:6], title, "{workspace}", "{branch}"]
        spec["template"] = []
    env = {**os.environ, SPEC_VAR: json.dumps(spec), "SLUICE_ITEM_ID": "al-1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path / "node-own")])}
    done = subprocess.run([sys.executable, "-m", "sluice.executors.ray_job"], env=env, capture_output=True,
                          text=True, timeout=120)
    seen = json.loads(report.read_text()) if report.exists() else None
    return done, seen, root / DIRECTORY / "alpha"


def test_the_agent_runs_in_a_fresh_clone_with_its_placeholders_filled_on_the_node_in_one_pass(tmp_path):
    title = "fix {workspace} $(id); `tick`"
    done, seen, root = job(tmp_path, remote(tmp_path), title=title)
    assert done.returncode == 0, done.stderr
    workspace = str(root / "sluice-abc-al-wisp-1")  # <root>/sluice-workspaces/<rig>/<job id>
    assert seen["argv"] == [title, workspace, "sluice/al-1"]  # the title's {workspace} stays as written
    assert seen["cwd"] == workspace
    assert seen["pythonpath"] == str(tmp_path / "node-own")  # the shipped package is not the agent's
    assert seen["env"] == {"SLUICE_ITEM_ID": "al-1", "SLUICE_WORKSPACE": workspace,
                           "SLUICE_BRANCH": "sluice/al-1"}  # and the job's own spec is gone
    assert f"{MARK}removed {workspace}" in done.stdout.splitlines()  # ok and nothing unsaved: removed
    assert not Path(workspace).exists()


def test_an_argv_without_its_template_runs_as_it_is(tmp_path):
    done, seen, _ = job(tmp_path, remote(tmp_path), title="{item_id}", filled=True)
    assert done.returncode == 0, done.stderr
    assert seen["argv"] == ["{item_id}", "{workspace}", "{branch}"]  # nothing substituted a second time
    assert seen["env"]["SLUICE_WORKSPACE"] == seen["cwd"]


def test_a_branch_the_remote_has_is_never_taken_over_and_a_failed_run_keeps_its_workspace(tmp_path):
    source = remote(tmp_path)
    git("branch", "sluice/al-1", cwd=source)  # an earlier attempt pushed this one
    done, seen, root = job(tmp_path, source, code=3)
    assert done.returncode == 3  # the agent's status is the job's
    assert seen["env"]["SLUICE_BRANCH"] == "sluice/al-1-2"
    assert (root / "sluice-abc-al-wisp-1" / ".git").is_dir()  # kept: the run failed


def test_unsaved_work_keeps_the_workspace_even_after_an_ok_run(tmp_path):
    done, _, root = job(tmp_path, remote(tmp_path), litter=True)
    assert done.returncode == 0
    workspace = root / "sluice-abc-al-wisp-1"
    assert (workspace / "notes.txt").exists()
    assert f"{MARK}kept {workspace}: 1 uncommitted change" in done.stdout.splitlines()


def test_a_clone_that_fails_names_git_s_error_on_the_last_line_and_never_starts_the_agent(tmp_path):
    missing = tmp_path / "gone.git"
    done, seen, root = job(tmp_path, missing)
    assert done.returncode == WORKSPACE_FAILED and seen is None
    message = f"Job entrypoint command failed with exit code 70, last available logs:\n{done.stderr}"  # Ray's
    reason = reason_of(message)
    assert reason is not None and reason.startswith(f"cannot clone {missing}: git clone failed")
    assert "fatal:" in reason
    assert not (root / "sluice-abc-al-wisp-1").exists()  # nothing half-made is left behind


def test_reason_of_reads_only_a_last_line_that_is_sluice_s():
    assert reason_of(None) is None and reason_of("") is None
    assert reason_of(f"{MARK}cannot clone x: boom\n\n") == "cannot clone x: boom"
    assert reason_of(f"{MARK}cloned x into y on branch b\nagent: exit 3") is None  # the agent's own failure


def test_in_the_rig_s_checkout_the_agent_becomes_the_job_and_a_missing_one_is_named(tmp_path):
    def run(argv: list[str], repo: Path) -> tuple[int, int, str, str]:
        env = {**os.environ, SPEC_VAR: json.dumps({"repo": str(repo), "argv": argv}),
               "PYTHONPATH": str(ROOT / "src")}
        job = subprocess.Popen([sys.executable, "-m", "sluice.executors.ray_job"], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = job.communicate(timeout=60)
        return job.pid, job.returncode, out, err

    code = f"import os; print(os.getcwd(), os.getpid(), os.environ.get({SPEC_VAR!r}))"
    pid, status, out, _ = run([sys.executable, "-c", code], tmp_path)
    assert status == 0 and out.split() == [str(tmp_path), str(pid), "None"]  # exec'd in the checkout, no spec
    _, status, _, err = run(["/no/such/agent"], tmp_path)
    assert status == 127 and "cannot launch '/no/such/agent'" in err
    _, status, _, err = run([sys.executable, "-c", "pass"], tmp_path / "not-here")
    assert status == 127 and str(tmp_path / "not-here") in err  # this node has no such checkout


def test_a_node_keeps_at_most_workspace_keep_ended_workspaces_of_a_rig_never_losing_work(tmp_path):
    source = remote(tmp_path)
    for n, litter in ((1, True), (2, False), (3, False)):  # three failed runs, the first with unsaved work
        done, _, rig_dir = job(tmp_path, source, code=3, litter=litter, name=f"job-{n}", keep=1)
        assert done.returncode == 3
        os.utime(rig_dir / f"job-{n}", (n, n))  # oldest first, whatever the clock's resolution
    done, _, rig_dir = job(tmp_path, source, name="job-4", keep=1)
    assert done.returncode == 0
    assert sorted(p.name for p in rig_dir.iterdir() if p.is_dir()) == ["job-1", "job-3"]  # job-1: its work
    assert f"{MARK}removed {rig_dir / 'job-2'} (more than 1 kept)" in done.stdout.splitlines()
    assert not (rig_dir / ".job-2.lock").exists() and not (rig_dir / ".job-4.lock").exists()


def test_a_running_job_s_workspace_is_never_trimmed(tmp_path):
    source = remote(tmp_path)
    rig_dir = tmp_path / "root" / DIRECTORY / "alpha"
    rig_dir.mkdir(parents=True)
    busy = rig_dir / "job-running"
    git("clone", "-q", str(source), str(busy), cwd=tmp_path)
    os.utime(busy, (1, 1))
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR);"
        " fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"),
        str(rig_dir / ".job-running.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        done, _, _ = job(tmp_path, source, code=3, name="job-new", keep=0)
        assert done.returncode == 3 and busy.is_dir()  # keep 0, oldest, nothing unsaved: but it runs
    finally:
        holder.kill()
        holder.wait()
