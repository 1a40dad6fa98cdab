"""Git hooks fire on real commits, merges and pushes, and never fail git."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import GIT_ENV, Cli, git, make_repo


def _events(town: Path) -> list[dict]:
    path = town / ".sluice" / "events" / "scheduler.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _git_run(
    *args: str, cwd: Path, env: dict | None = None, budget: str | None = "30"
) -> subprocess.CompletedProcess:
    """Run git; its hooks' report gets ``budget`` seconds (None: the hook's own 0.9 s limit).

    The reporting tests allow more than the hook's limit so that a loaded machine cannot cut
    the report they look for; the tests of the limit itself run with the hook's default.
    """
    full = {**os.environ, **GIT_ENV, "HOME": str(cwd), **(env or {})}
    full.pop("SLUICE_HOOK_TIMEOUT", None)
    if budget is not None:
        full["SLUICE_HOOK_TIMEOUT"] = budget
    return subprocess.run(["git", *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=60)


@pytest.fixture
def hooked(cli: Cli, rig: str, tmp_path: Path) -> Path:
    """The ``alpha`` rig with two queued and one running merge request, hooks installed."""
    for status in ("open", "open", "in_progress"):
        made = cli.json("item", "create", rig, "--title", f"merge {status}", "--type", "merge-request")
        if status != "open":
            cli.run("item", "update", made["id"], "--status", status)
    cli.run("hooks", "install", rig)
    return tmp_path / "repos" / "alpha"


def test_install_links_all_three_hooks(cli: Cli, hooked: Path):
    for name in ("post-commit", "post-merge", "pre-push"):
        link = hooked / ".git" / "hooks" / name
        assert link.is_symlink()
        assert Path(os.path.realpath(link)).parent == cli.town / ".sluice" / "hooks"


def test_commit_reports_depth_and_logs_event(cli: Cli, hooked: Path):
    (hooked / "change.txt").write_text("x\n")
    git("add", "change.txt", cwd=hooked)
    done = _git_run("commit", "-m", "change", cwd=hooked)
    assert done.returncode == 0
    assert "sluice: merge queue alpha: 2 queued, 1 running (threshold 3)" in done.stderr
    events = [e for e in _events(cli.town) if e["type"] == "MergeQueueDepth"]
    assert events[-1]["payload"] == {
        "rig": "alpha", "queued": 2, "running": 1, "threshold": 3, "hook": "post-commit"
    }


def test_commit_in_a_linked_worktree_reports_for_its_rig(cli: Cli, hooked: Path, tmp_path: Path):
    """Polecats commit in linked worktrees; the shared hooks run there too and belong to the rig."""
    worktree = tmp_path / "alpha-wt"
    git("worktree", "add", "-q", str(worktree), "-b", "agent", cwd=hooked)
    (worktree / "agent.txt").write_text("a\n")
    git("add", "agent.txt", cwd=worktree)
    done = _git_run("commit", "-m", "agent work", cwd=worktree)
    assert done.returncode == 0
    assert "error" not in done.stderr
    assert "sluice: merge queue alpha: 2 queued, 1 running (threshold 3)" in done.stderr
    assert [e for e in _events(cli.town) if e["type"] == "MergeQueueDepth"][-1]["payload"]["rig"] == "alpha"
    assert cli.json("hooks", "report", "--repo", str(worktree))["rig"] == "alpha"


def test_merge_reports(cli: Cli, hooked: Path):
    git("checkout", "-q", "-b", "feature", cwd=hooked)
    (hooked / "feature.txt").write_text("f\n")
    git("add", "feature.txt", cwd=hooked)
    git("commit", "-q", "-m", "feature", cwd=hooked)
    git("checkout", "-q", "main", cwd=hooked)
    (hooked / "main.txt").write_text("m\n")
    git("add", "main.txt", cwd=hooked)
    git("commit", "-q", "-m", "main", cwd=hooked)
    done = _git_run("merge", "--no-edit", "feature", cwd=hooked)
    assert done.returncode == 0, done.stderr
    assert "sluice: merge queue alpha: 2 queued, 1 running" in done.stderr
    hooks = [e["payload"]["hook"] for e in _events(cli.town) if e["type"] == "MergeQueueDepth"]
    assert "post-merge" in hooks


def test_push_to_local_bare_remote_reports(cli: Cli, hooked: Path, tmp_path: Path):
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    git("remote", "add", "origin", str(remote), cwd=hooked)
    done = _git_run("push", "-q", "origin", "main", cwd=hooked)
    assert done.returncode == 0, done.stderr
    assert "sluice: merge queue alpha: 2 queued, 1 running" in done.stderr
    assert git("rev-parse", "main", cwd=remote).strip() == git("rev-parse", "main", cwd=hooked).strip()
    depths = [e for e in _events(cli.town) if e["type"] == "MergeQueueDepth"]
    assert any(e["payload"].get("hook") == "pre-push" for e in depths)


def test_broken_sluice_never_fails_git(cli: Cli, hooked: Path, tmp_path: Path):
    (cli.town / ".sluice" / "config.json").write_text("{ not json")
    (hooked / "a.txt").write_text("a\n")
    git("add", "a.txt", cwd=hooked)
    assert _git_run("commit", "-m", "while broken", cwd=hooked).returncode == 0

    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    git("remote", "add", "origin", str(remote), cwd=hooked)
    assert _git_run("push", "-q", "origin", "main", cwd=hooked).returncode == 0


def test_missing_sluice_never_fails_or_slows_git(cli: Cli, hooked: Path):
    (cli.town / ".sluice" / "hooks" / "sluice-python").write_text("/nonexistent/python\n")
    (hooked / "b.txt").write_text("b\n")
    git("add", "b.txt", cwd=hooked)
    started = time.monotonic()
    done = _git_run("commit", "-m", "no sluice", cwd=hooked, budget=None)
    assert done.returncode == 0
    assert "merge queue" not in done.stderr
    assert time.monotonic() - started < 5  # generous bound: the hook returns at once


def test_hung_sluice_is_cut_off(cli: Cli, hooked: Path, tmp_path: Path):
    """A sluice that hangs is stopped by the hook's one-second limit; git goes on."""
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    (cli.town / ".sluice" / "hooks" / "sluice-python").write_text(f"{slow}\n")
    (hooked / "c.txt").write_text("c\n")
    git("add", "c.txt", cwd=hooked)
    started = time.monotonic()
    assert _git_run("commit", "-m", "hung", cwd=hooked, budget=None).returncode == 0
    assert time.monotonic() - started < 10


def test_foreign_hook_refused_without_force(cli: Cli, rig: str, tmp_path: Path):
    repo = tmp_path / "repos" / "alpha"
    foreign = repo / ".git" / "hooks" / "pre-push"
    foreign.write_text("#!/bin/sh\necho mine\n")
    foreign.chmod(0o755)
    done = cli.run("hooks", "install", rig, check=False)
    assert done.returncode == 1
    assert "pre-push" in done.stderr and "--force" in done.stderr
    assert foreign.read_text() == "#!/bin/sh\necho mine\n"
    assert not (repo / ".git" / "hooks" / "post-commit").exists()  # nothing half-installed

    result = cli.json("hooks", "install", rig, "--force")
    assert result["replaced"] == ["pre-push"]
    assert (repo / ".git" / "hooks" / "pre-push.sluice-orig").read_text() == "#!/bin/sh\necho mine\n"
    assert (repo / ".git" / "hooks" / "pre-push").is_symlink()


def test_reinstall_is_idempotent(cli: Cli, hooked: Path):
    again = cli.json("hooks", "install", "alpha")
    assert again["installed"] == []
    assert sorted(again["unchanged"]) == ["post-commit", "post-merge", "pre-push"]


def test_report_for_unknown_repo_is_a_clear_error(cli: Cli, rig: str, tmp_path: Path):
    other = make_repo(tmp_path / "elsewhere")
    done = cli.run("hooks", "report", "--repo", str(other), check=False)
    assert done.returncode == 1
    assert "no rig" in done.stderr and "Traceback" not in done.stderr


def test_report_json_and_threshold_from_policy(cli: Cli, hooked: Path):
    policy = cli.town / ".sluice" / "schedule" / "policy.json"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(json.dumps({"merge_queue_threshold": 5}))
    done = cli.run("hooks", "report", "--rig", "alpha", "--json")
    assert json.loads(done.stdout) == {"rig": "alpha", "queued": 2, "running": 1, "threshold": 5}
    assert "(threshold 5)" in done.stderr


def test_uninstall_removes_our_links_and_nothing_else(cli: Cli, rig: str, tmp_path: Path):
    repo = tmp_path / "repos" / "alpha"
    hooks = repo / ".git" / "hooks"
    samples = {p.name: p.read_bytes() for p in hooks.iterdir()}  # git's *.sample files
    (hooks / "pre-push").write_text("#!/bin/sh\necho mine\n")
    (hooks / "commit-msg").write_text("#!/bin/sh\necho also mine\n")
    cli.run("hooks", "install", rig, "--force")  # pre-push moved aside as pre-push.sluice-orig
    result = cli.json("hooks", "uninstall", rig)
    assert result["removed"] == ["post-commit", "post-merge", "pre-push"]
    assert result["restored"] == ["pre-push"] and result["kept"] == []
    assert not (hooks / "pre-push").is_symlink()
    assert (hooks / "pre-push").read_text() == "#!/bin/sh\necho mine\n"
    assert (hooks / "commit-msg").read_text() == "#!/bin/sh\necho also mine\n"
    assert not (hooks / "post-commit").exists() and not (hooks / "post-merge").exists()
    assert not (hooks / "pre-push.sluice-orig").exists()
    assert {p.name: p.read_bytes() for p in hooks.iterdir() if p.name.endswith(".sample")} == {
        n: b for n, b in samples.items() if n.endswith(".sample")}
    # Commits are quiet again: no hook of ours runs.
    (repo / "after.txt").write_text("a\n")
    git("add", "after.txt", cwd=repo)
    done = _git_run("commit", "-m", "after", cwd=repo)
    assert done.returncode == 0 and "sluice" not in done.stderr


def test_uninstall_leaves_a_hook_that_is_not_ours(cli: Cli, hooked: Path):
    hooks = hooked / ".git" / "hooks"
    (hooks / "post-merge").unlink()
    (hooks / "post-merge").write_text("#!/bin/sh\necho replaced by someone\n")
    result = cli.json("hooks", "uninstall", "alpha")
    assert result["removed"] == ["post-commit", "pre-push"] and result["kept"] == ["post-merge"]
    assert (hooks / "post-merge").read_text() == "#!/bin/sh\necho replaced by someone\n"
    again = cli.json("hooks", "uninstall", "alpha")  # nothing of ours left: a no-op
    assert again["removed"] == [] and again["restored"] == [] and again["kept"] == ["post-merge"]
    assert "post-merge is not sluice's; left alone" in cli.run("hooks", "uninstall", "alpha").stdout


def test_uninstall_leaves_another_towns_links(cli: Cli, hooked: Path, tmp_path: Path):
    other = tmp_path / "other-town"
    subprocess.run([sys.executable, "-m", "sluice", "init", str(other)], check=True, capture_output=True)
    other_cli = Cli(other)
    other_cli.run("rig", "add", "alpha", str(hooked), "--prefix", "al")
    hooks = hooked / ".git" / "hooks"
    for name in ("post-commit", "post-merge", "pre-push"):
        (hooks / name).unlink()
    other_cli.run("hooks", "install", "alpha")
    result = cli.json("hooks", "uninstall", "alpha")
    assert result["removed"] == [] and result["kept"] == ["post-commit", "post-merge", "pre-push"]
    assert all((hooks / n).is_symlink() for n in ("post-commit", "post-merge", "pre-push"))


def test_report_without_or_with_both_of_rig_and_repo_is_a_usage_error(cli: Cli, hooked: Path):
    for extra in ((), ("--rig", "alpha", "--repo", str(hooked))):
        done = cli.run("hooks", "report", *extra, check=False)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: name the rig (--rig) or its repository (--repo)")
        assert done.stderr.splitlines()[-1] == "try 'sluice hooks report --help'"
