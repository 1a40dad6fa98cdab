"""A read-only look into rig repositories (pygit2).

Nothing here writes: no checkout, ref, index, config or object writes.  A
missing or broken repository is reported as such (or as "not warm") rather
than crashing a scheduling decision.
"""

from __future__ import annotations

import os
from pathlib import Path

from sluice.core.digest import sha256
from sluice.core.recordclass import frozen
from sluice.errors import NotARepository
from sluice.logs import log
from sluice.store.files import fsutil
from sluice.store.files.fsutil import file_signature


@frozen
class Worktree:
    name: str
    path: str
    branch: str | None


def _pygit2():
    import pygit2  # imported lazily: it costs start-up time every command would pay

    return pygit2


def _small_text(path: Path) -> str:
    """A pointer file of git's (``HEAD``, ``commondir``, a worktree's ``gitdir``), stripped.

    Read bounded and never waited on: a FIFO or a link to a device there is an OSError, as a
    missing file is.
    """
    return fsutil.read_regular(path, fsutil.MAX_SMALL_BYTES).decode("utf-8").strip()


#: The files of a git directory that opening a repository (or a worktree) reads, checked first:
#: a FIFO there would block pygit2 for ever, where no signal reaches it.
_OPENED = ("HEAD", "config", "commondir", "packed-refs", "gitdir")


def _check_git_files(git_dir: Path) -> None:
    """NotARepository naming the first of :data:`_OPENED` in ``git_dir`` that is there and is not a
    regular file (anything else wrong with them pygit2 says)."""
    for name in _OPENED:
        try:
            fsutil.check_regular(git_dir / name, fsutil.MAX_SOURCE_BYTES)
        except fsutil.NotRegularFile as err:
            raise NotARepository(f"{err}; git cannot read it") from None
        except OSError:
            continue


def _git_dir_of(path: Path) -> Path | None:
    """The git directory of a plain work tree or a bare repository; None for any other layout."""
    if (path / ".git").is_dir():
        return path / ".git"
    return path if (path / "objects").is_dir() else None


def open_repo(path: Path):
    """The repository at ``path`` (a work tree or a bare repo), or NotARepository."""
    pygit2 = _pygit2()
    path = Path(path)
    if not path.exists():
        raise NotARepository(f"{path}: no such directory")
    git_dir = _git_dir_of(path)
    if git_dir is not None:
        _check_git_files(git_dir)
    try:
        repo = pygit2.Repository(str(path))
    except (pygit2.GitError, KeyError, ValueError) as err:
        raise NotARepository(f"{path}: not a git repository ({err})") from None
    workdir = Path(repo.workdir).resolve() if repo.workdir else Path(repo.path).resolve()
    if workdir != path.resolve() and Path(repo.path).resolve() != path.resolve():
        # pygit2 searches upwards; a rig must be the repository itself, not a folder inside one.
        raise NotARepository(f"{path}: not the top of a git repository (it is inside {workdir})")
    return repo


def common_dir(path: Path) -> Path:
    """The git directory a repository shares with all its linked worktrees.

    For a linked worktree that is the main repository's git directory (git
    records it in ``<worktree git dir>/commondir``); for anything else it is
    the repository's own git directory.
    """
    git_dir = Path(open_repo(path).path)
    try:
        pointer = _small_text(git_dir / "commondir")
    except (OSError, UnicodeDecodeError):
        pointer = ""
    return (git_dir / pointer).resolve() if pointer else git_dir.resolve()


def origin_url(path: Path) -> str | None:
    """The URL of the repository's ``origin`` remote, None when it has none (read from its config)."""
    pygit2 = _pygit2()
    repo = open_repo(path)
    try:
        url = repo.remotes["origin"].url
    except (KeyError, ValueError, pygit2.GitError):
        return None
    return url or None


def linked_worktrees(path: Path) -> list[Worktree]:
    """Live linked worktrees (prunable ones, whose directory is gone, are skipped)."""
    repo = open_repo(path)
    try:
        names = repo.list_worktrees()
    except _pygit2().GitError as err:
        raise NotARepository(f"{path}: broken repository, cannot list worktrees ({err})") from None
    out = []
    for name in names:
        try:
            _check_git_files(Path(repo.path) / "worktrees" / name)  # libgit2 reads them next
            wt = repo.lookup_worktree(name)
            if wt.is_prunable or not Path(wt.path).exists():
                continue
            wt_path = wt.path
        except Exception:  # pygit2 raises several types for a half-removed worktree
            continue
        out.append(Worktree(name=name, path=wt_path, branch=_branch_of(wt_path)))
    return out


def _branch_of(worktree_path: str) -> str | None:
    """The branch a worktree has checked out; None when detached, unborn or unreadable."""
    try:
        repo = _pygit2().Repository(worktree_path)
        if repo.head_is_unborn or repo.head_is_detached:
            return None
        return repo.head.shorthand
    except Exception:
        return None


def is_warm(path: Path) -> bool:
    """Affinity: a rig is warm when it has at least one live linked worktree.

    A missing or broken repository (unreadable HEAD included) is cold, with a
    warning, so one bad rig never stops a scheduling decision.
    """
    try:
        return has_live_worktree(path)
    except NotARepository as err:
        log.warning("affinity 0 for %s: %s", path, err)
        return False


def has_live_worktree(path: Path) -> bool:
    """Whether the repository at ``path`` has a live linked worktree; NotARepository when broken."""
    repo = open_repo(path)
    try:
        if not repo.head_is_unborn:
            repo.head  # resolving HEAD is what fails on a corrupt ref  # noqa: B018
    except (_pygit2().GitError, KeyError, ValueError) as err:
        raise NotARepository(f"{path}: broken repository, cannot read HEAD ({err})") from None
    return bool(linked_worktrees(path))


def _stat(path: Path) -> str:
    try:
        return file_signature(path) or "-"
    except OSError:  # e.g. a path through a file that is not a directory: as good as absent
        return "-"


def warmth_stamp(path: Path) -> str | None:
    """A stamp of the git metadata :func:`is_warm` reads, taken without opening the repository.

    It changes whenever the answer could: HEAD and the ref it names (a
    broken HEAD makes a rig cold), the worktree admin folders, each one's
    ``gitdir`` pointer and lock, and whether the work tree it points at still
    exists (a deleted one is prunable).  None when the layout is not the
    plain one (a ``.git`` file, say): then only pygit2 can tell.
    """
    path = Path(path)
    if (path / ".git").is_dir():
        git_dir = path / ".git"
    elif (path / "HEAD").is_file() and (path / "objects").is_dir():
        git_dir = path  # a bare repository
    else:
        return None
    parts = [str(git_dir.resolve()), _stat(git_dir / "HEAD"), _stat(git_dir / "packed-refs")]
    try:
        head = _small_text(git_dir / "HEAD")
    except (OSError, UnicodeDecodeError):
        head = ""
    if head.startswith("ref: "):
        parts.append(_stat(git_dir / head[5:]))
    admin = git_dir / "worktrees"
    parts.append(_stat(admin))
    try:
        names = sorted(os.listdir(admin))
    except OSError:
        names = []
    for name in names:
        pointer = admin / name / "gitdir"
        try:
            work_tree = Path(_small_text(pointer)).parent
        except (OSError, UnicodeDecodeError, ValueError):
            work_tree = None
        alive = work_tree is not None and work_tree.exists()
        parts += [name, _stat(pointer), _stat(admin / name / "locked"), str(alive)]
    return sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()
