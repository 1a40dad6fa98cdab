"""Making and retiring per-run workspaces: a fresh clone of a rig on a branch of its own.

sluice never writes to a rig's repository, so a workspace is a clone, not a
worktree (``git worktree add`` writes into the repository's ``.git``).  The
source is the rig's repository itself — a local path, whose objects git
hardlinks where the filesystem allows and copies otherwise, and which needs
no ``origin`` — or a URL (a Ray node clones the rig's remote).  Git runs
with an argv list, never through a shell, with the variables that would
point it at another repository removed (a git hook running sluice sets
``GIT_DIR``) and without a terminal to ask for credentials on.

A workspace is retired only when it holds no work that exists nowhere else:
no uncommitted change (untracked files included, ignored ones not), no stash,
and no commit reachable from its own refs that is not on a ref the source
had (``refs/remotes/…``, or one of the source's tags, kept at clone time
under ``refs/sluice/source-tags/``).  Anything else keeps the directory.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.recordclass import recordclass
from sluice.core.workspaces import CLONE, safe_component
from sluice.errors import ExecutorError, ExecutorUnavailable

if TYPE_CHECKING:
    from sluice.store.files.town import Town

CLONE_TIMEOUT = 600.0  # seconds; a URL that hangs is a failed clone, not a stuck cycle
GIT_TIMEOUT = 60.0
SOURCE_TAGS = "refs/sluice/source-tags/"
#: What `git rev-parse --local-env-vars` names: each would point git at another repository.
_LOCAL_GIT_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                   "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_PREFIX",
                   "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_GRAFT_FILE",
                   "GIT_IMPLICIT_WORK_TREE", "GIT_INTERNAL_SUPER_PREFIX", "GIT_NO_REPLACE_OBJECTS",
                   "GIT_REPLACE_REF_BASE", "GIT_SHALLOW_FILE")


@recordclass(frozen=True)
class Workspace:
    path: Path
    branch: str
    source: str


def uses_clone(town: Town, rig_name: str) -> bool:
    """Whether runs of ``rig_name`` get a workspace: the rig's own setting, else the town's."""
    own = town.rig(rig_name).workspace
    return (own or getattr(town.config.executor, "workspace", "repo")) == CLONE


def any_clone(town: Town) -> bool:
    return any(uses_clone(town, rig.name) for rig in town.rigs())


def root_dir(town: Town) -> Path:
    """Where this machine's workspaces are made (``executor.workspace_root``; relative: to the town)."""
    configured = getattr(town.config.executor, "workspace_root", "") or ""
    if not configured:
        return town.runtime / "workspaces" / safe_component(socket.gethostname())
    path = Path(configured).expanduser()
    return path if path.is_absolute() else town.root / path


def rig_root(town: Town, rig_name: str) -> Path:
    return root_dir(town) / safe_component(rig_name)


def git_env() -> dict[str, str]:
    """This process's environment without what would aim git elsewhere, and no credential prompt."""
    env = {k: v for k, v in os.environ.items() if k not in _LOCAL_GIT_VARS}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.setdefault("GIT_ASKPASS", "")  # an askpass program would wait for a person too
    return env


def _git(args: Sequence[str], cwd: Path | None = None, timeout: float = GIT_TIMEOUT, text: str = "") -> str:
    """Run git with ``text`` on its stdin; its stdout, or ExecutorError carrying its stderr."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, env=git_env(), input=text, capture_output=True,
                              text=True, errors="replace", timeout=timeout)
    except FileNotFoundError:
        raise ExecutorUnavailable("executor.workspace is clone but git is not installed") from None
    except subprocess.TimeoutExpired:
        raise ExecutorError(f"git {args[0]} did not finish within {timeout:g}s") from None
    except OSError as err:
        raise ExecutorError(f"cannot run git {args[0]}: {err.strerror or err}") from None
    if done.returncode != 0:
        said = " ".join(line.strip() for line in done.stderr.strip().splitlines()[-4:]) or "no message"
        raise ExecutorError(f"git {args[0]} failed (exit {done.returncode}): {said}")
    return done.stdout


def clone(source: str, directory: Path, branch: str, *, fresh_names: Iterable[str] = (),
          timeout: float = CLONE_TIMEOUT) -> Workspace:
    """Clone ``source`` into ``directory`` (which must not exist) and check out a new branch.

    The branch starts where the source's HEAD is (its default branch).  It is
    ``branch``, or, when the source already has a branch of that name, the
    first of ``fresh_names`` it does not have — so a retry never takes over a
    branch an earlier attempt pushed.  Any failure removes what was made of
    ``directory`` and raises ExecutorError with git's own words.  Nothing is
    written to the source.
    """
    directory = Path(directory)
    if directory.exists():
        raise ExecutorError(f"cannot make a workspace at {directory}: it already exists")
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        # No --local: git hardlinks a local source's objects where it can and copies them where it
        # cannot (another filesystem); no --shared, so the clone never depends on the source's objects.
        _git(["clone", "--quiet", "--", source, str(directory)], timeout=timeout)
        listing = _git(["for-each-ref", "--format=%(objectname) %(refname)", "refs/remotes/origin/",
                        "refs/tags/"], cwd=directory)
        refs = [tuple(line.split(" ", 1)) for line in listing.splitlines() if " " in line]
        chosen = _fresh_branch({ref for _oid, ref in refs}, [branch, *fresh_names])
        _git(["checkout", "--quiet", "-b", chosen], cwd=directory)
        _keep_source_tags(directory, [(oid, ref) for oid, ref in refs if ref.startswith("refs/tags/")])
    except BaseException as err:
        shutil.rmtree(directory, ignore_errors=True)
        if isinstance(err, ExecutorError) and str(err).startswith("git clone"):
            raise ExecutorError(f"cannot clone {source}: {err}") from None
        raise
    return Workspace(path=directory, branch=chosen, source=source)


def _fresh_branch(taken: set[str], names: list[str]) -> str:
    for name in names:
        if f"refs/remotes/origin/{name}" not in taken:
            return name
    raise ExecutorError(f"the source already has every branch tried for this workspace ({', '.join(names)})")


def _keep_source_tags(directory: Path, tags: list[tuple[str, str]]) -> None:
    """Note the tags the clone brought, so a tag the source already had never counts as unsaved work."""
    commands = "".join(f"create {SOURCE_TAGS}{ref[len('refs/tags/'):]} {oid}\n" for oid, ref in tags)
    if commands:
        _git(["update-ref", "--stdin"], cwd=directory, text=commands)


def unsaved_work(directory: Path) -> str | None:
    """Why removing ``directory`` would lose work (uncommitted changes, commits not on the source), or
    None when everything in it exists elsewhere.  Anything git cannot answer counts as work."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    try:
        status = _git(["status", "--porcelain", "--untracked-files=normal"], cwd=directory)
        if status.strip():
            count = len(status.splitlines())
            return f"{count} uncommitted change{'s' if count != 1 else ''}"
        ahead = _git(["rev-list", "--count", "--all", "--not", "--remotes", f"--glob={SOURCE_TAGS}*"],
                     cwd=directory).strip()
    except ExecutorError as err:
        return f"git cannot tell whether it holds work ({err})"
    if ahead != "0":
        return f"{ahead} commit{'s' if ahead != '1' else ''} not on its source"
    return None


def retire(directory: Path) -> str | None:
    """Remove ``directory`` unless it holds unsaved work; None when removed (or gone), else why kept."""
    why = unsaved_work(directory)
    if why is None:
        shutil.rmtree(directory, ignore_errors=True)
        if Path(directory).exists():
            return "it could not be removed completely"
    return why


def prune(directories: Iterable[Path], keep: int) -> list[Path]:
    """Remove the oldest of ``directories`` (by modification time) past the newest ``keep``, each only
    when it holds no unsaved work; returns those removed.  A workspace with work stays whatever ``keep``
    says: sluice never deletes work that exists nowhere else."""
    existing = []
    for path in directories:
        try:
            existing.append((Path(path).stat().st_mtime, str(path), Path(path)))
        except OSError:
            continue
    existing.sort(reverse=True)
    return [path for _mtime, _name, path in existing[keep:] if retire(path) is None]


def check_room(directory: Path, min_free: int | None) -> None:
    """Refuse to make a workspace on a filesystem below the host guard's disk limit (nobody's item's
    fault, so not counted against one)."""
    if min_free is None:
        return
    probe = Path(directory)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < min_free:
        raise ExecutorUnavailable(
            f"no workspace made at {directory}: its filesystem has {free} bytes free, below"
            f" scheduler.host.min_free_disk ({min_free} bytes)")
