"""Two towns of one user with the same repository are told so, at `rig add` and at every patrol.

Both would dispatch the repository's items.  The per-user registry lives
under ``$XDG_STATE_HOME/sluice/`` (the suite points that at a temporary
directory), never in a repository.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers import Cli, make_repo
from helpers.scheduler import tree_hash
from sluice.store.items import registry


def _town(tmp_path: Path, name: str) -> Cli:
    root = tmp_path / name
    root.mkdir()
    cli = Cli(root)
    cli.run("init", str(root))
    return cli


def test_a_repository_a_second_town_registers_is_warned_about_at_rig_add_and_in_patrol(tmp_path):
    repo = make_repo(tmp_path / "repos" / "shared")
    before = tree_hash(repo)
    first, second = _town(tmp_path, "first"), _town(tmp_path, "second")
    done = first.run("rig", "add", "alpha", str(repo), "--prefix", "al")
    assert "warning" not in done.stderr
    done = second.run("rig", "add", "beta", str(repo) + "/", "--prefix", "be")  # the same repository
    assert done.returncode == 0
    assert f"warning: repository {repo.resolve()} is also a rig of town {first.town.resolve()}" in done.stderr
    assert "both towns would dispatch its items" in done.stderr
    assert first.json("patrol", "alpha")["other_towns"] == [str(second.town.resolve())]
    assert "shared: this rig's repository is also a rig of town" in first.run("patrol", "alpha").stdout
    assert tree_hash(repo) == before  # nothing written into the repository
    # A town whose rig is gone, or that is gone itself, stops counting (and is pruned).
    second.run("rig", "remove", "beta")
    assert first.json("patrol", "alpha")["other_towns"] == []
    second.run("rig", "add", "beta", str(repo), "--prefix", "be")
    assert first.json("patrol", "alpha")["other_towns"] == [str(second.town.resolve())]
    shutil.rmtree(second.town / ".sluice")
    assert first.json("patrol", "alpha")["other_towns"] == []
    towns = json.loads(registry.registry_path().read_text())["towns"]
    assert str(second.town.resolve()) not in towns and towns[str(first.town.resolve())]["repos"] == [
        str(repo.resolve())]


def test_different_repositories_are_not_warned_about(tmp_path):
    first, second = _town(tmp_path, "first"), _town(tmp_path, "second")
    first.run("rig", "add", "alpha", str(make_repo(tmp_path / "repos" / "a")), "--prefix", "al")
    done = second.run("rig", "add", "beta", str(make_repo(tmp_path / "repos" / "b")), "--prefix", "be")
    assert "warning" not in done.stderr
    assert first.json("patrol", "alpha")["other_towns"] == []


def test_an_unwritable_registry_never_stops_a_command(tmp_path):
    repo = make_repo(tmp_path / "repos" / "alpha")
    cli = _town(tmp_path, "town")
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the state directory should be")
    done = cli.run("rig", "add", "alpha", str(repo), "--prefix", "al",
                   env={"SLUICE_REGISTRY": str(blocked / "towns.json")})
    assert done.returncode == 0 and done.stderr == ""


def test_where_the_registry_lives():
    assert registry.registry_path({"SLUICE_REGISTRY": "/r/towns.json"}) == Path("/r/towns.json")
    assert registry.registry_path({"XDG_STATE_HOME": "/state", "HOME": "/home/u"}) == Path(
        "/state/sluice/towns.json")
    assert registry.registry_path({"XDG_STATE_HOME": "relative", "HOME": "/home/u"}) == Path(
        "/home/u/.local/state/sluice/towns.json")
    assert registry.registry_path({"HOME": "/home/u"}) == Path("/home/u/.local/state/sluice/towns.json")
