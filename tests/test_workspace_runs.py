"""Per-run workspaces end to end: real git, real polecat processes (local and tmux), real dispatch cycles.

The polecat reports where it started, its branch and its ``SLUICE_*``
variables, waits for the test's go-ahead, then does what its item's title
says: ``ok`` (nothing), ``fail`` (exit 3), ``commit`` (a commit it does not
push), ``commit-fail`` (the same, then exit 3), ``push`` (a commit pushed to
the source), ``dirty`` (an untracked file).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import GIT_ENV, git
from helpers.scheduler import configure, contexts, events, fields, item, wait_for, write_items
from sluice.errors import ExecutorUnavailable
from sluice.executors import workspace as git_workspace
from sluice.executors.base import substitute
from sluice.scheduler.launch import gates
from sluice.scheduler.launch.launching import make_request
from sluice.store.files.town import Town

pytestmark = pytest.mark.slow

POLECAT = r'''
import json, os, subprocess, sys, time
reports, mode = sys.argv[1], sys.argv[2]
head = subprocess.run(["git", "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True, text=True).stdout
info = {"cwd": os.getcwd(), "argv": sys.argv[3:], "head": head.strip(),
        "env": {k: v for k, v in os.environ.items() if k.startswith("SLUICE_")}}
name = os.path.join(reports, os.environ["SLUICE_ITEM_ID"])
with open(name + ".tmp", "w") as fh:
    json.dump(info, fh)
os.replace(name + ".tmp", name + ".json")
while not os.path.exists(os.path.join(reports, "go")):
    time.sleep(0.02)
def git(*args):
    subprocess.run(["git", *args], check=True, capture_output=True)
if mode in ("commit", "push", "commit-fail"):
    with open("work.txt", "w") as fh:
        fh.write(mode)
    git("add", "work.txt")
    git("commit", "-q", "-m", "the work")
    if mode == "push":
        git("push", "-q", "origin", "HEAD")
elif mode == "dirty":
    with open("draft.txt", "w") as fh:
        fh.write("draft")
sys.exit(3 if mode in ("fail", "commit-fail") else 0)
'''


def tree_bytes(root: Path) -> dict[str, str]:
    """Every path under ``root``, ``.git`` included, with its mode and the sha256 of its bytes."""
    import hashlib

    out = {}
    for path in sorted(root.rglob("*")):
        mode = f"{path.lstat().st_mode:o}"
        if path.is_symlink():
            out[str(path)] = "link " + str(path.readlink())
        elif path.is_dir():
            out[str(path)] = "dir " + mode
        else:
            out[str(path)] = mode + " " + hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def clone_paths(town_dir, rig, capacity, tmp_path, monkeypatch) -> Iterator[dict[str, Path]]:
    """Rig ``alpha`` running each polecat in a workspace of its own, three at once: town, repo and reports."""
    for key, value in GIT_ENV.items():  # the polecats commit
        monkeypatch.setenv(key, value)
    polecat = tmp_path / "polecat.py"
    polecat.write_text(POLECAT)
    reports = tmp_path / "reports"
    reports.mkdir()
    command = [sys.executable, str(polecat), str(reports), "{title}", "{workspace}", "{branch}", "{repo}"]
    capacity(3, batch_size=3)
    configure(town_dir, "executor.command", json.dumps(command))
    configure(town_dir, "executor.workspace", "clone")
    yield {"town": town_dir, "repo": tmp_path / "repos" / rig, "reports": reports}
    (reports / "go").touch()  # nothing left waiting


def seen(reports: Path, item_id: str) -> dict:
    path = reports / f"{item_id}.json"
    wait_for(path.exists, timeout=60)
    return json.loads(path.read_text())


def ended_runs(cli, count: int) -> list[dict]:
    """The run records once ``count`` runs have ended (asking settles them)."""
    def done():
        rows = cli.json("runs", "--limit", "0")
        ended = [r for r in rows if r["outcome"] != "running"]
        return ended if len(ended) >= count else None
    return wait_for(done, timeout=60)


def launch(cli, setup, *items: tuple[str, str]) -> list[dict]:
    write_items(setup["town"], "alpha", [item(i, title=mode) for i, mode in items])
    cli.run("sling", *(i for i, _ in items), "alpha")
    report = cli.json("scheduler", "run")
    assert report["dispatched"] == len(items), report
    return [seen(setup["reports"], i) for i, _ in items]


def test_two_polecats_of_one_rig_run_at_once_in_their_own_workspaces_and_leave_the_rig_untouched(
        cli, clone_paths):
    before = tree_bytes(clone_paths["repo"])
    ok, failed = launch(cli, clone_paths, ("al-1", "ok"), ("al-2", "fail"))
    root = Town(clone_paths["town"]).runtime / "workspaces"
    assert ok["cwd"] != failed["cwd"] and Path(ok["cwd"]).parent == Path(failed["cwd"]).parent
    assert Path(ok["cwd"]).is_relative_to(root) and Path(ok["cwd"]).parent.name == "alpha"
    assert (ok["head"], failed["head"]) == ("sluice/al-1", "sluice/al-2")
    assert ok["argv"] == [ok["cwd"], "sluice/al-1", str(clone_paths["repo"])]  # {workspace} {branch} {repo}
    assert (ok["env"]["SLUICE_WORKSPACE"], ok["env"]["SLUICE_BRANCH"]) == (ok["cwd"], "sluice/al-1")
    both_running = [p for p in cli.json("polecat", "list") if p["state"] == "running"]
    assert len(both_running) == 2  # at once: each is still waiting for the go-ahead
    (clone_paths["reports"] / "go").touch()
    runs = {r["item_id"]: r for r in ended_runs(cli, 2)}
    assert (runs["al-1"]["outcome"], runs["al-2"]["outcome"]) == ("ok", "failed")
    assert runs["al-1"]["workspace"] == ok["cwd"] and runs["al-1"]["branch"] == "sluice/al-1"
    assert not Path(ok["cwd"]).exists() and runs["al-1"]["workspace_kept"] is None
    assert Path(failed["cwd"]).is_dir() and runs["al-2"]["workspace_kept"] == "the run ended failed"
    assert tree_bytes(clone_paths["repo"]) == before


def test_a_run_with_unsaved_work_keeps_its_workspace_and_a_pushed_one_does_not(cli, clone_paths):
    before_branches = git("branch", "--list", cwd=clone_paths["repo"])
    committed, dirty, pushed = launch(cli, clone_paths,
                                      ("al-1", "commit"), ("al-2", "dirty"), ("al-3", "push"))
    (clone_paths["reports"] / "go").touch()
    runs = {r["item_id"]: r for r in ended_runs(cli, 3)}
    assert {r["outcome"] for r in runs.values()} == {"ok"}
    assert runs["al-1"]["workspace_kept"] == "1 commit not on its source" and Path(committed["cwd"]).is_dir()
    assert runs["al-2"]["workspace_kept"] == "1 uncommitted change" and Path(dirty["cwd"]).is_dir()
    assert runs["al-3"]["workspace_kept"] is None and not Path(pushed["cwd"]).exists()
    text = cli.run("runs").stdout
    assert f"workspace kept: {committed['cwd']} (1 commit not on its source)" in text
    assert pushed["cwd"] not in text
    # the agent's own push is the only write to the rig: sluice made none
    assert git("branch", "--list", cwd=clone_paths["repo"]) != before_branches
    assert "sluice/al-3" in git("branch", "--list", cwd=clone_paths["repo"])


def test_kept_workspaces_are_trimmed_to_the_limit_but_never_one_with_unsaved_work(cli, clone_paths):
    configure(clone_paths["town"], "executor.workspace_keep", "0")
    first, second, committed = launch(cli, clone_paths,
                                      ("al-1", "fail"), ("al-2", "fail"), ("al-3", "commit-fail"))
    (clone_paths["reports"] / "go").touch()
    ended_runs(cli, 3)
    [kept_run] = [r for r in cli.json("runs") if r["item_id"] == "al-3"]
    assert kept_run["workspace_kept"] == "the run ended failed; 1 commit not on its source"
    kept = sorted(p.name for p in Path(first["cwd"]).parent.iterdir())
    assert kept == [Path(committed["cwd"]).name]
    assert not Path(first["cwd"]).exists() and not Path(second["cwd"]).exists()


def test_a_kept_limit_of_one_keeps_the_newest(cli, clone_paths):
    configure(clone_paths["town"], "executor.workspace_keep", "1")
    older, = launch(cli, clone_paths, ("al-1", "fail"))
    (clone_paths["reports"] / "go").touch()
    ended_runs(cli, 1)
    assert Path(older["cwd"]).is_dir()
    (clone_paths["reports"] / "go").unlink()
    newer, = launch(cli, clone_paths, ("al-2", "fail"))
    (clone_paths["reports"] / "go").touch()
    ended_runs(cli, 2)
    assert Path(newer["cwd"]).is_dir() and not Path(older["cwd"]).exists()


def test_a_retry_gets_a_fresh_workspace_and_branch(cli, clone_paths):
    configure(clone_paths["town"], "scheduler.retry_failed_runs", "1")
    configure(clone_paths["town"], "scheduler.retry_base", "0s")
    first, = launch(cli, clone_paths, ("al-1", "fail"))
    (clone_paths["reports"] / "go").touch()
    ended_runs(cli, 1)
    (clone_paths["reports"] / "al-1.json").unlink()
    (clone_paths["reports"] / "go").unlink()
    assert cli.json("scheduler", "run", "--ignore-backoff")["dispatched"] == 1
    second = seen(clone_paths["reports"], "al-1")
    assert second["head"] == "sluice/al-1-2" and second["cwd"] != first["cwd"]
    assert Path(first["cwd"]).is_dir()  # the failed attempt's workspace is kept


def test_a_source_that_cannot_be_cloned_is_a_counted_launch_failure_naming_gits_error(cli, clone_paths):
    write_items(clone_paths["town"], "alpha", [item("al-1", title="ok")])
    cli.run("sling", "al-1", "alpha")
    shutil.move(clone_paths["repo"], clone_paths["repo"].with_name("elsewhere"))
    report = cli.json("scheduler", "run")
    assert (report["dispatched"], report["failed"]) == (0, 1)
    [context] = contexts(clone_paths["town"], "alpha")
    f = fields(context)
    assert f["dispatch_failures"] == 1 and f["last_failure_at"]
    assert "cannot clone" in f["last_failure"] and "does not exist" in f["last_failure"]
    assert events(clone_paths["town"], "DispatchFailed")[0]["payload"]["error"] == f["last_failure"]
    held = cli.json("scheduler", "run")
    assert held["backing_off"] == 1  # backed off like any other launch failure
    assert not any(git_workspace.rig_root(Town(clone_paths["town"]), "alpha").glob("*"))


def test_tmux_polecats_get_their_workspace_too(cli, clone_paths):
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed; the tmux executor tests need it (apt-get install tmux)")
    configure(clone_paths["town"], "executor.kind", "tmux")
    try:
        got, = launch(cli, clone_paths, ("al-1", "ok"))
        assert got["head"] == "sluice/al-1" and got["cwd"] == got["env"]["SLUICE_WORKSPACE"]
        assert Path(got["cwd"]).parent == git_workspace.rig_root(Town(clone_paths["town"]), "alpha")
        (clone_paths["reports"] / "go").touch()
        [run] = ended_runs(cli, 1)
        assert run["outcome"] == "ok" and not Path(got["cwd"]).exists()
    finally:
        from sluice.executors.tmux import TmuxExecutor

        socket = TmuxExecutor(Town(clone_paths["town"])).socket
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def test_with_workspace_repo_nothing_changes(cli, rig):
    town = Town(cli.town)
    template = ("agent", "{item_id}", "{workspace}", "{branch}", "{repo}")
    request = make_request(town, template, {"id": "al-1", "title": "t"}, "alpha", "c1")
    assert request.argv == ("agent", "al-1", "{workspace}", "{branch}", str(town.rig("alpha").repo))
    assert (request.workspace, request.branch, request.cwd) == ("", "", str(town.rig("alpha").repo))
    assert "SLUICE_WORKSPACE" not in request.env
    assert substitute(["{workspace}"], {"workspace": "/w"}) == ("/w",)


def test_the_host_guard_watches_the_workspace_filesystem_and_no_workspace_is_made_below_it(cli, rig,
                                                                                           tmp_path):
    elsewhere = tmp_path / "spaces" / "deeper"
    configure(cli.town, "executor.workspace_root", str(elsewhere))
    assert str(tmp_path / "spaces") not in gates.disk_paths(Town(cli.town))
    configure(cli.town, "rigs.alpha.workspace", "clone")
    (tmp_path / "spaces").mkdir()
    assert str(tmp_path / "spaces") in gates.disk_paths(Town(cli.town))  # its nearest existing directory
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(ExecutorUnavailable, match="min_free_disk"):
        git_workspace.check_room(elsewhere, free * 4)
    git_workspace.check_room(elsewhere, 1)


def test_a_polecat_found_after_an_interrupted_launch_keeps_its_workspace_while_it_runs(cli, clone_paths):
    from types import SimpleNamespace

    from sluice.executors.local import LocalExecutor
    from sluice.scheduler.launch import runs, workspaces
    from sluice.store.items.rigstore import Stores

    files = Town(clone_paths["town"])
    configure(clone_paths["town"], "executor.workspace_keep", "0")
    made = workspaces.prepare(files, "alpha", "al-1", 1)
    request = make_request(files, tuple(files.load_config().executor.command), {"id": "al-1", "title": "ok"},
                           "alpha", "al-wisp-1", workspace=made)
    executor = LocalExecutor(files, stop_grace=1)
    polecat = executor.launch(request)  # the launcher "died" here: no run record was written
    try:
        seen(clone_paths["reports"], "al-1")
        context = SimpleNamespace(rig="alpha", work_id="al-1", fields=None)
        [record] = runs.record_reconciled(files, Stores(files), [(context, polecat)])
        assert record["workspace"] == str(made.path)
        assert workspaces.trim(files, "alpha") == [] and made.path.is_dir()  # the running polecat's own
    finally:
        executor.stop(polecat.id)


def test_trimming_waits_while_a_launch_holds_the_workspace_lock(cli, clone_paths):
    from sluice.scheduler.launch import workspaces

    files = Town(clone_paths["town"])
    configure(clone_paths["town"], "executor.workspace_keep", "0")
    made = workspaces.prepare(files, "alpha", "al-1", 1)  # cloned, its run record not yet written
    with workspaces.launching(files):
        assert workspaces.trim(files, "alpha") == [] and made.path.is_dir()
    assert workspaces.trim(files, "alpha") == [made.path] and not made.path.exists()


def test_a_direct_sling_launches_in_a_workspace_too(cli, clone_paths):
    configure(clone_paths["town"], "scheduler.max_polecats", "-1")
    write_items(clone_paths["town"], "alpha", [item("al-1", title="ok")])
    cli.run("sling", "al-1", "alpha")
    got = seen(clone_paths["reports"], "al-1")
    assert got["head"] == "sluice/al-1" and got["env"]["SLUICE_CONTEXT_ID"] == ""
    assert Path(got["cwd"]).parent == git_workspace.rig_root(Town(clone_paths["town"]), "alpha")
