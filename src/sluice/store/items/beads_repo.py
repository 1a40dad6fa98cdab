"""What a rig repository's ``.beads/`` holds, as far as reading its items goes.

Since beads 1.0.4 the store is Dolt (``.beads/embeddeddolt/``, or a
``dolt sql-server`` described by ``.beads/metadata.json``) and
``.beads/issues.jsonl`` is an export a user turns on.  A repository with a
store and no export would give a rig no items at all, so ``rig add`` refuses
it and says the ways on (:func:`refusal`).  An export that a store has since
outgrown (export turned off again, or a failing hook) is flagged by
:func:`export_lag` in ``rig list`` and ``patrol``.

Everything here only looks at file names and times: nothing is opened,
nothing in the repository is written.
"""

from __future__ import annotations

import os
from pathlib import Path

from sluice.core.clock import iso_epoch

#: The parts of ``.beads/`` that are the store itself, newest beads first.
STORE_PARTS = ("embeddeddolt", "dolt", "metadata.json", "beads.db")
EXPORT_NAME = "issues.jsonl"
#: beads rewrites an auto-export at most every 60 s; a store newer than its export by more is behind.
EXPORT_SLACK = 120.0
#: A watched tree is looked at this many entries deep at most, so a huge store costs a bounded stat walk.
WALK_LIMIT = 5000


def beads_dir(repo: Path) -> Path:
    return Path(repo) / ".beads"


def export_path(repo: Path) -> Path:
    return beads_dir(repo) / EXPORT_NAME


def store_parts(repo: Path) -> list[str]:
    """The store parts present under ``repo/.beads`` (empty: no beads store there)."""
    where = beads_dir(repo)
    return [part for part in STORE_PARTS if (where / part).exists()]


def refusal(name: str, repo: Path, parts: list[str]) -> str:
    """Why ``rig add`` will not give this rig an empty store, and the three ways on."""
    import shlex

    found = ", ".join(part + "/" if (beads_dir(repo) / part).is_dir() else part for part in parts)
    quoted_repo, quoted_name = shlex.quote(str(repo)), shlex.quote(name)
    return (
        f"{beads_dir(repo)} holds a beads store ({found}) but no export ({EXPORT_NAME}), so rig {name!r}"
        " would see none of its items. Choose one:\n"
        f"  * turn on beads' export, write it once, then add the rig again:\n"
        f"      cd {quoted_repo} && bd config set export.auto true && bd export -o .beads/{EXPORT_NAME}\n"
        f"  * read the store through a command:\n"
        f"      sluice rig add {quoted_name} {quoted_repo} --items-command 'bd export'\n"
        f"  * give the rig sluice's own item store on purpose:\n"
        f"      sluice rig add {quoted_name} {quoted_repo} --own-store"
    )


def _walk(path: Path, limit: int = WALK_LIMIT):
    """(mtime_ns, size) of ``path`` and, for a directory, of what it holds, at most ``limit`` entries."""
    try:
        stat = os.stat(path)
    except OSError:
        return
    yield stat.st_mtime_ns, stat.st_size
    if not os.path.isdir(path):
        return
    pending, seen = [str(path)], 0
    while pending and seen < limit:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    seen += 1
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    yield info.st_mtime_ns, info.st_size
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
        except OSError:
            continue


def tree_signature(paths) -> str:
    """One text that changes when anything under ``paths`` is written, added or removed."""
    parts = []
    for path in paths:
        stats = list(_walk(Path(path)))
        newest = max((mtime for mtime, _size in stats), default=0)
        parts.append(f"{len(stats)}:{sum(size for _m, size in stats)}:{newest}")
    return "|".join(parts)


def store_changed_at(repo: Path) -> float | None:
    """When the beads store under ``repo`` was last written (seconds), or None without a store."""
    where = beads_dir(repo)
    newest = [mtime for part in STORE_PARTS if part != "metadata.json" for mtime, _ in _walk(where / part)]
    return max(newest) / 1e9 if newest else None


def export_lag(repo: Path, export: Path) -> dict | None:
    """``source_stale`` of a rig reading ``export``: the store under it was written well after it.

    None when the export is current, or when there is no store beside it to
    compare with (a file given with ``--items`` from elsewhere, a server store).
    """
    if beads_dir(repo) not in Path(export).parents:
        return None
    try:
        exported = os.stat(export).st_mtime
    except OSError:
        return None  # a vanished export is an error of its own when the rig is read
    changed = store_changed_at(repo)
    if changed is None or changed <= exported + EXPORT_SLACK:
        return None
    return {
        "kind": "export-behind",
        "detail": f"the beads store in {beads_dir(repo)} changed after {export} was last written;"
                  " is `bd config get export.auto` still true?",
        "source_at": iso_epoch(exported),
        "store_at": iso_epoch(changed),
    }
