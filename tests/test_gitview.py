"""The read-only git layer on real repositories: worktrees, HEAD, broken repos."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from helpers import git, make_repo
from sluice.errors import NotARepository
from sluice.store.git import gitview


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def test_unborn_branch(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    git("init", "-q", "-b", "main", str(empty), cwd=tmp_path)
    assert gitview.linked_worktrees(empty) == []
    assert gitview.is_warm(empty) is False


def test_no_worktrees_means_cold(repo):
    assert gitview.linked_worktrees(repo) == []
    assert gitview.is_warm(repo) is False


def test_live_worktrees_listed_and_prunable_ones_skipped(repo, tmp_path):
    git("worktree", "add", "-q", str(tmp_path / "wt-feature"), "-b", "feature", cwd=repo)
    git("worktree", "add", "-q", "--detach", str(tmp_path / "wt-detached"), cwd=repo)
    git("worktree", "add", "-q", str(tmp_path / "wt-gone"), "-b", "gone", cwd=repo)
    shutil.rmtree(tmp_path / "wt-gone")  # still registered in .git/worktrees, now prunable

    found = {wt.name: wt for wt in gitview.linked_worktrees(repo)}
    assert set(found) == {"wt-feature", "wt-detached"}
    assert found["wt-feature"].branch == "feature"
    assert found["wt-detached"].branch is None
    assert Path(found["wt-feature"].path).resolve() == (tmp_path / "wt-feature").resolve()
    assert gitview.is_warm(repo) is True


def test_only_prunable_worktrees_means_cold(repo, tmp_path):
    git("worktree", "add", "-q", str(tmp_path / "wt-gone"), "-b", "gone", cwd=repo)
    shutil.rmtree(tmp_path / "wt-gone")
    assert gitview.linked_worktrees(repo) == []
    assert gitview.is_warm(repo) is False


def test_a_linked_worktree_opens_as_its_own_repository(repo, tmp_path):
    git("worktree", "add", "-q", str(tmp_path / "wt"), "-b", "side", cwd=repo)
    assert gitview.open_repo(tmp_path / "wt").head.shorthand == "side"
    assert gitview.is_warm(tmp_path / "wt") is True


@pytest.mark.parametrize("kind", ["missing", "plain dir", "empty .git", "dangling gitdir file", "subdir"])
def test_not_a_repository(tmp_path, repo, kind):
    path = tmp_path / "target"
    if kind == "plain dir":
        path.mkdir()
    elif kind == "empty .git":
        (path / ".git").mkdir(parents=True)
    elif kind == "dangling gitdir file":
        path.mkdir()
        (path / ".git").write_text(f"gitdir: {tmp_path / 'nowhere'}\n")
    elif kind == "subdir":
        path = repo / "sub"
        path.mkdir()
    with pytest.raises(NotARepository) as err:
        gitview.open_repo(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("damage", ["corrupt HEAD", "corrupt config", "objects removed"])
def test_a_broken_repository_is_cold_with_a_warning_naming_it(repo, damage, caplog):
    dot_git = repo / ".git"
    if damage == "corrupt HEAD":
        (dot_git / "HEAD").write_text("garbage\n")
    elif damage == "corrupt config":
        (dot_git / "config").write_text("[core\n")
    else:
        shutil.rmtree(dot_git / "objects")
    with caplog.at_level(logging.WARNING, logger="sluice"):
        assert gitview.is_warm(repo) is False
    assert any("affinity 0" in r.getMessage() and str(repo) in r.getMessage() for r in caplog.records)


def test_missing_repository_is_cold_with_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="sluice"):
        assert gitview.is_warm(tmp_path / "nope") is False
    assert any("no such directory" in r.getMessage() for r in caplog.records)
