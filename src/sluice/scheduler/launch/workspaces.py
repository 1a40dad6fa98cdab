"""Per-run workspaces as the scheduler uses them: made before a launch, retired after the run ends.

With ``executor.workspace = "clone"`` (or ``rigs.NAME.workspace``) each run
of a local or tmux polecat starts in a fresh clone of its rig under
``executor.workspace_root`` (default ``runtime/workspaces/<host>``), one
directory per rig, made by :func:`prepare` on the one launch path.  When the
run's end is recorded (:mod:`sluice.scheduler.launch.ends`), :func:`after_end`
removes an ``ok`` run's workspace unless it holds unsaved work, keeps every
other one, and then trims the rig's kept workspaces to
``executor.workspace_keep``, oldest first, never one with unsaved work
(:mod:`sluice.executors.workspace`).

A workspace between its clone and its run record belongs to no run yet, so
trimming could take it for a leftover: :func:`launching` holds the town's
workspace lock from the clone until the run record is written, and trimming
only happens when it can take that lock at once (else the next end does it).
The workspaces of running runs are never touched.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.gates import parse_size
from sluice.core.workspaces import branch_name, workspace_dirname
from sluice.errors import LockBusy
from sluice.executors import workspace as git_workspace
from sluice.store.database import runs as log
from sluice.store.files import fsutil

if TYPE_CHECKING:
    from sluice.executors.workspace import Workspace
    from sluice.store.files.fsutil import FileLock
    from sluice.store.files.town import Town

LOCK = "workspaces"
uses_clone = git_workspace.uses_clone
FRESH_NAMES = 20  # branch names tried past the attempt's own before a clone gives up


def launching(town: Town) -> FileLock:
    """The workspace lock, held from a clone until its run record is written (see the module text)."""
    return fsutil.file_lock(town.lock_path(LOCK))


def prepare(town: Town, rig_name: str, item_id: str, attempt: int) -> Workspace:
    """Clone rig ``rig_name`` for one attempt at ``item_id``; ExecutorError (with git's words) if not.

    The directory is ``<root>/<rig>/<item_id>[-N]`` and the branch the
    template's (``executor.workspace_branch``), ``-N`` from the second attempt on; a directory left by an
    earlier run, or a branch the rig already has, moves both to the next N.
    Nothing is made on a filesystem below the host guard's disk limit.
    """
    rig = town.rig(rig_name)
    parent = git_workspace.rig_root(town, rig_name)
    host = town.config.scheduler.host  # the model, or a dict in the config's plain copy
    disk = host.get("min_free_disk") if isinstance(host, Mapping) else host.min_free_disk
    git_workspace.check_room(parent, parse_size(disk) if disk is not None else None)
    number = max(attempt, 1)
    while (parent / workspace_dirname(item_id, number)).exists():
        number += 1
    template = getattr(town.config.executor, "workspace_branch", "sluice/{item_id}")
    names = [branch_name(template, item_id, rig_name, n) for n in range(number, number + FRESH_NAMES + 1)]
    return git_workspace.clone(str(rig.repo), parent / workspace_dirname(item_id, number), names[0],
                               fresh_names=names[1:])


def after_end(town: Town, record: dict) -> str | None:
    """Retire an ended run's workspace (only an ``ok`` run's, only without unsaved work), then trim its
    rig's kept ones; why the workspace was kept, or None when it is gone."""
    path = Path(record["workspace"])
    if record.get("outcome") == log.OK:
        why = git_workspace.retire(path)
    elif path.exists():
        work = git_workspace.unsaved_work(path)
        why = f"the run ended {record.get('outcome')}" + (f"; {work}" if work else "")
    else:
        why = None
    if why is not None:
        with contextlib.suppress(OSError):
            os.utime(path)  # kept ones are trimmed oldest first: by when their run ended
    trim(town, record.get("rig") or "")
    return why


def trim(town: Town, rig_name: str) -> list[Path]:
    """Keep at most ``executor.workspace_keep`` ended workspaces of the rig (oldest go first, never one
    with unsaved work); skipped when a launch holds the workspace lock."""
    parent = git_workspace.rig_root(town, rig_name)
    if not rig_name or not parent.is_dir():
        return []
    keep = int(getattr(town.config.executor, "workspace_keep", 5))
    try:
        with fsutil.file_lock(town.lock_path(LOCK), timeout=0):
            busy = {str(r["workspace"]) for r in log.running(town).values() if r.get("workspace")}
            ended = [p for p in parent.iterdir() if p.is_dir() and str(p) not in busy]
            return git_workspace.prune(ended, keep)
    except LockBusy:
        return []
