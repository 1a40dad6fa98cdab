"""Git hooks that tell a rig's committers how deep its merge queue is.

``install`` is the one write sluice ever makes to a repository, and only on
explicit request: it links ``post-commit``, ``post-merge`` and ``pre-push``
into the rig repo's hooks directory (``uninstall`` takes exactly those links
back out).  The links point at copies kept in
``<town>/.sluice/hooks/``, which is how an installed hook finds its town.
``report`` is what the hooks run: one line on stderr and one
``MergeQueueDepth`` event.  The shell side guarantees a hook never fails or
slows git; this side only has to be quick.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sluice.errors import InvalidOperation
from sluice.store.files.town import Rig, Town

HOOK_NAMES = ("post-commit", "post-merge", "pre-push")
_SUPPORT = ("sluice-hook-report",)
BACKUP_SUFFIX = ".sluice-orig"


def town_hooks_dir(town: Town) -> Path:
    return town.dir / "hooks"


def _package_hooks() -> Path:
    from importlib import resources  # install and uninstall only: a report must start fast

    return Path(str(resources.files("sluice") / "hooks"))


def refresh_town_copies(town: Town) -> Path:
    """Copy the hook scripts into the town and record which Python runs sluice."""
    import shutil  # install only: a report must start fast

    target = town_hooks_dir(town)
    target.mkdir(parents=True, exist_ok=True)
    source = _package_hooks()
    for name in (*HOOK_NAMES, *_SUPPORT):
        dest = target / name
        shutil.copyfile(source / name, dest)
        os.chmod(dest, 0o755)
    (target / "sluice-python").write_text(sys.executable + "\n")
    return target


def repo_hooks_dir(rig: Rig) -> Path:
    """Where git looks for this repository's hooks (``core.hooksPath`` honoured)."""
    from sluice.store.git.gitview import open_repo

    repo = open_repo(rig.repo)
    try:
        configured = repo.config["core.hooksPath"]
    except KeyError:
        configured = None
    if configured:
        path = Path(os.path.expanduser(configured))
        return path if path.is_absolute() else Path(rig.repo) / path
    return Path(repo.path) / "hooks"


def install(town: Town, rig_name: str, force: bool = False) -> dict:
    """Link the hooks into the rig's repository; ``replaced`` lists foreign hooks moved aside (``force``)."""
    rig = town.rig(rig_name)
    hooks_dir = repo_hooks_dir(rig)
    copies = refresh_town_copies(town)
    foreign = [name for name in HOOK_NAMES if ((hooks_dir / name).exists() or (hooks_dir / name).is_symlink())
               and not _is_ours(hooks_dir / name, copies / name)]
    if foreign and not force:
        raise InvalidOperation(
            f"{hooks_dir} already has hook(s) not installed by sluice: {', '.join(foreign)};"
            " nothing was changed (use --force to move them aside as <name>" + BACKUP_SUFFIX + ")"
        )
    hooks_dir.mkdir(parents=True, exist_ok=True)
    installed, unchanged, replaced = [], [], []
    for name in HOOK_NAMES:
        path = hooks_dir / name
        if name in foreign:
            os.replace(path, path.with_name(name + BACKUP_SUFFIX))
            replaced.append(name)
        elif path.is_symlink() and _is_ours(path, copies / name):
            unchanged.append(name)
            continue
        path.symlink_to(copies / name)
        installed.append(name)
    return {"rig": rig.name, "hooks_dir": str(hooks_dir), "installed": installed, "unchanged": unchanged,
            "replaced": replaced}


def uninstall(town: Town, rig_name: str) -> dict:
    """Undo :func:`install`: remove only our links (``removed``), and put back what ``install --force``
    moved aside (``restored``).

    A hook that is not a link to this town's copy (someone else's, or replaced
    since) stays where it is (``kept``), and so does its ``.sluice-orig`` twin if any.
    """
    rig = town.rig(rig_name)
    hooks_dir = repo_hooks_dir(rig)
    copies = town_hooks_dir(town)
    removed, restored, kept = [], [], []
    for name in HOOK_NAMES:
        path = hooks_dir / name
        if _is_ours(path, copies / name):
            path.unlink()
            removed.append(name)
        elif path.exists() or path.is_symlink():
            kept.append(name)
            continue
        backup = path.with_name(name + BACKUP_SUFFIX)
        if backup.exists() or backup.is_symlink():
            os.replace(backup, path)
            restored.append(name)
    return {"rig": rig.name, "hooks_dir": str(hooks_dir), "removed": removed, "restored": restored,
            "kept": kept}


def _is_ours(path: Path, copy: Path) -> bool:
    return path.is_symlink() and Path(os.path.realpath(path)) == Path(os.path.realpath(copy))
