"""A rig's merge-queue depth, as the git hooks report it (``hooks report``).

The hooks (:mod:`sluice.surfaces.githooks` installs them) run this on every
commit, merge and push, so it reads only the index's counts and the policy's
threshold, and logs one ``MergeQueueDepth`` event.  The hook may run in a
linked worktree of a rig's repository; that worktree belongs to the rig.
"""

from __future__ import annotations

import os
from pathlib import Path

from sluice.core.recordclass import recordclass
from sluice.errors import NotARepository, UnknownRig, UsageError
from sluice.scheduler.queue.ranking import load_town_policy
from sluice.store.database.events import MERGE_QUEUE_DEPTH, emit_event
from sluice.store.files.town import Rig, Town
from sluice.store.git.gitview import common_dir
from sluice.store.items.rigstore import Stores


@recordclass(frozen=True)
class MergeQueue:
    """A rig's merge-request items: queued (open) and running (in progress), and the pressure threshold."""

    rig: str
    queued: int
    running: int
    threshold: int

    @property
    def depth(self) -> int:
        return self.queued + self.running

    def to_json(self) -> dict:
        """The ``hooks report --json`` document."""
        return {"rig": self.rig, "queued": self.queued, "running": self.running, "threshold": self.threshold}

    def line(self) -> str:
        return (
            f"sluice: merge queue {self.rig}: {self.queued} queued, {self.running} running"
            f" (threshold {self.threshold})"
        )


def rig_for_repo(town: Town, repo: Path) -> Rig:
    """The rig whose repository is ``repo``, or of which ``repo`` is a linked worktree.

    Hooks live in the shared git directory, so they also run for commits in
    linked worktrees (where polecats usually work); those belong to the rig too.
    """
    wanted = Path(os.path.realpath(repo))
    rigs = town.rigs()
    for rig in rigs:
        if Path(os.path.realpath(rig.repo)) == wanted:
            return rig
    try:
        shared = common_dir(wanted)
    except NotARepository:
        shared = None
    for rig in rigs if shared is not None else ():
        try:
            if common_dir(rig.repo) == shared:
                return rig
        except NotARepository:
            continue
    raise UnknownRig(f"no rig of this town uses the repository {repo}")


def merge_queue(town: Town, rig_name: str) -> MergeQueue:
    """Queued (open) and running (in_progress) ``merge-request`` items of a rig."""
    store = Stores(town).rig(rig_name)
    counts = store.merge_queue_counts()
    threshold = load_town_policy(town).merge_queue_threshold
    return MergeQueue(rig_name, counts.get("open", 0), counts.get("in_progress", 0), threshold)


def report(town: Town, rig_name: str | None = None, repo: Path | None = None, hook: str = "") -> MergeQueue:
    """What a hook runs: work out the depth and log a ``MergeQueueDepth`` event."""
    if (rig_name is None) == (repo is None):  # a usage error (exit 2), like any other missing flag
        raise UsageError("name the rig (--rig) or its repository (--repo), not both" if rig_name
                         else "name the rig (--rig) or its repository (--repo)")
    if rig_name is None:
        rig_name = rig_for_repo(town, repo).name
    queue = merge_queue(town, rig_name)
    payload = {"rig": queue.rig, "queued": queue.queued, "running": queue.running,
               "threshold": queue.threshold, "hook": hook or None}
    emit_event(town, MERGE_QUEUE_DEPTH, payload)
    return queue
