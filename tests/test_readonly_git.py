"""sluice never writes inside a rig repository or its ``.git`` (only `hooks install` may).

Three rigs — a repo with live and prunable linked worktrees, a repo with a
committed beads export (auto-detected, read-only), and a rig registered at a
linked worktree's path — are snapshotted (every file name and content under
each repository and worktree) and compared after each command.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest

from helpers import Cli, git, make_repo

pytestmark = pytest.mark.slow


def snapshot(*roots: Path) -> dict[str, str]:
    """Relative path → sha256 of contents (directories and symlinks by name/target)."""
    out = {}
    for root in roots:
        if root.is_file():  # a linked worktree's `.git` file
            out[str(root)] = hashlib.sha256(root.read_bytes()).hexdigest()
            continue
        for path in sorted(root.rglob("*")):
            key = str(path)
            if path.is_symlink():
                out[key] = "link:" + str(path.readlink())
            elif path.is_dir():
                out[key] = "dir"
            else:
                out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def source_repos(tmp_path: Path, beads_data: Path) -> dict:
    """The repositories the commands read: alpha with a live and a prunable worktree, ralph with an export."""
    repos = tmp_path / "repos"
    for sub in ("alpha/src", "ralph/.beads"):  # make_repo writes files, not directories
        (repos / sub).mkdir(parents=True)
    alpha = make_repo(repos / "alpha", {"README.md": "alpha\n", "src/main.py": "print('hi')\n"})
    git("worktree", "add", "-q", str(repos / "alpha-feature"), "-b", "feature", cwd=alpha)
    git("worktree", "add", "-q", str(repos / "alpha-gone"), "-b", "gone", cwd=alpha)
    shutil.rmtree(repos / "alpha-gone")  # leaves a prunable worktree record in alpha/.git

    export = (beads_data / "asermax__ralph-tui.issues.jsonl").read_text()
    beads_repo = make_repo(repos / "ralph", {"README.md": "ralph\n", ".beads/issues.jsonl": export})
    roots = [alpha, repos / "alpha-feature", beads_repo]
    return {"alpha": alpha, "feature": repos / "alpha-feature", "ralph": beads_repo, "roots": roots}


def commands(rigs: dict, town: Path, source: Path) -> list[tuple[tuple[str, ...], bool]]:
    """(argv, must succeed) for every command that exists; later ones use ids made earlier."""
    return [
        (("init", str(town)), True),
        (("rig", "add", "alpha", str(rigs["alpha"]), "--prefix", "al"), True),
        (("rig", "add", "ralph", str(rigs["ralph"]), "--prefix", "ralph"), True),
        (("rig", "add", "feature", str(rigs["feature"]), "--prefix", "ft"), True),
        (("rig", "list", "--json"), True),
        (("config", "set", "scheduler.max_polecats", "2"), True),
        (("config", "set", "executor.command", f'["{sys.executable}", "-c", "pass"]'), True),
        (("config", "get", "scheduler.max_polecats"), True),
        (("item", "create", "alpha", "--title", "first", "--label", "x", "--tokens", "10", "--json"), True),
        (("item", "create", "alpha", "--title", "second", "--dep", "{first}", "--json"), True),
        (("item", "create", "feature", "--title", "in the worktree rig", "--json"), True),
        (("item", "show", "{first}", "--json"), True),
        (("item", "list", "--json"), True),
        (("item", "list", "ralph", "--status", "open", "--json"), True),
        (("item", "ready", "--limit", "0", "--json"), True),
        (("item", "blocked", "--json"), True),
        (("item", "ready", "ralph", "--json"), True),
        (("item", "update", "{first}", "--priority", "1", "--add-label", "y"), True),
        (("item", "dep", "add", "{second}", "{third}", "--type", "related"), True),
        (("item", "import", "alpha", str(source)), True),
        (("item", "create", "ralph", "--title", "refused: read-only"), False),
        (("sling", "{first}", "alpha", "--dry-run", "--json"), False),
        (("sling", "{first}", "alpha", "--json"), False),
        (("sling", "{third}", "feature", "--json"), False),
        (("scheduler", "status", "--json"), False),
        (("scheduler", "list", "--json"), False),
        (("scheduler", "run", "--dry-run", "--json"), False),
        (("scheduler", "pause"), False),
        (("scheduler", "resume"), False),
        (("scheduler", "run", "--json"), False),
        (("polecat", "list", "--json"), False),
        (("schedule", "next", "--preview", "--json"), False),
        (("schedule", "next", "--json"), False),
        (("schedule", "status", "--json"), False),
        (("schedule", "policy", "show", "--json"), False),
        (("patrol", "alpha", "--json"), False),
        (("patrol", "feature", "--fix", "--json"), False),
        (("hooks", "report", "--rig", "alpha"), False),
        (("daemon", "--once", "--interval", "1", "--timeout", "20"), False),
        (("scheduler", "clear", "--json"), False),
        (("item", "close", "{first}", "--reason", "done"), True),
        (("item", "close", "{third}"), True),
        (("item", "ready", "--json"), True),
    ]


def test_no_command_writes_inside_a_rig_repository(tmp_path, source_repos, beads_data):
    town = tmp_path / "town"
    town.mkdir()
    cli = Cli(town)
    before = snapshot(*source_repos["roots"])
    assert any("worktrees/alpha-gone" in key for key in before)  # the prunable record is there

    ids: dict[str, str] = {}
    source = beads_data / "artifact-keeper__artifact-keeper.issues.jsonl"
    for argv, must_succeed in commands(source_repos, town, source):
        args = [a.format(**ids) if "{" in a and a[1:-1] in ("first", "second", "third") else a for a in argv]
        done = cli.run(*args, check=must_succeed)
        if args[:2] == ["item", "create"] and done.returncode == 0:
            key = ("first", "second", "third")[len(ids)]
            ids[key] = __import__("json").loads(done.stdout)["id"]
        assert "Traceback" not in done.stderr, (args, done.stderr)
        after = snapshot(*source_repos["roots"])
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        assert not changed, f"sluice {' '.join(args)} wrote inside a rig repository: {changed[:5]}"
    assert len(ids) == 3
