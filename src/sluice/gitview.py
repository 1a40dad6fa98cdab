"""A read-only look into rig repositories (pygit2).

Nothing here writes: no checkout, ref, index, config or object writes.  A
missing or broken repository is reported as such (or as "not warm") rather
than crashing a scheduling decision.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from .errors import NotARepository

log = logging.getLogger("sluice")


@dataclass(frozen=True)
class Worktree:
    name: str
    path: str
    branch: str | None


def _pygit2():
    import pygit2  # imported lazily: it costs start-up time every command would pay

    return pygit2


def open_repo(path: Path):
    """The repository at ``path`` (a work tree or a bare repo), or NotARepository."""
    pygit2 = _pygit2()
    path = Path(path)
    if not path.exists():
        raise NotARepository(f"{path}: no such directory")
    try:
        repo = pygit2.Repository(str(path))
    except (pygit2.GitError, KeyError, ValueError) as err:
        raise NotARepository(f"{path}: not a git repository ({err})") from None
    workdir = Path(repo.workdir).resolve() if repo.workdir else Path(repo.path).resolve()
    if workdir != path.resolve() and Path(repo.path).resolve() != path.resolve():
        # pygit2 searches upwards; a rig must be the repository itself, not a folder inside one.
        raise NotARepository(f"{path}: not the top of a git repository (it is inside {workdir})")
    return repo


def head_branch(path: Path) -> str | None:
    """The checked-out branch name, None when HEAD is detached or unborn."""
    repo = open_repo(path)
    if repo.head_is_unborn or repo.head_is_detached:
        return None
    return repo.head.shorthand


def head_commit(path: Path) -> str | None:
    repo = open_repo(path)
    if repo.head_is_unborn:
        return None
    return str(repo.head.target)


def linked_worktrees(path: Path) -> list[Worktree]:
    """Live linked worktrees (prunable ones, whose directory is gone, are skipped)."""
    repo = open_repo(path)
    out = []
    for name in repo.list_worktrees():
        try:
            wt = repo.lookup_worktree(name)
        except Exception:  # pygit2 raises several types for a half-removed worktree
            continue
        if wt.is_prunable or not Path(wt.path).exists():
            continue
        branch = None
        try:
            branch = _pygit2().Repository(wt.path).head.shorthand
        except Exception:
            branch = None
        out.append(Worktree(name=name, path=wt.path, branch=branch))
    return out


def is_warm(path: Path) -> bool:
    """Affinity: a rig is warm when it has at least one live linked worktree."""
    try:
        return bool(linked_worktrees(path))
    except NotARepository as err:
        log.warning("affinity 0 for %s: %s", path, err)
        return False
