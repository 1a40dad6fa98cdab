"""What scoring needs to know about the town, read once per call.

:mod:`sluice.core.scoring` is pure; it is handed four facts about the rigs whose
work it ranks, and this module reads them:

* **warm rigs** (affinity): a rig is warm when its repository has a live
  linked worktree (:func:`sluice.store.git.gitview.is_warm`);
* **merge-queue depth** (backpressure): the rig's ``merge-request`` items that
  are ``open`` (queued) or ``in_progress`` (running), counted by the index;
* **decision counts** (fairness): past decisions per rig, from
  ``decisions.jsonl`` through an incremental cache (:mod:`sluice.store.database.decisions`);
* **graphs** (per-graph weights): the top-level epic above an item through
  ``parent-child`` edges.

A :class:`Signals` caches each answer for the life of one call, so ranking a
thousand contexts of one rig opens its repository once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.items import edges
from sluice.core.readiness import id_prefix
from sluice.errors import SluiceError
from sluice.logs import log

if TYPE_CHECKING:
    from sluice.store.files.town import Rig, Town
    from sluice.store.items.rigstore import Stores


EPIC = "epic"
PARENT_CHILD = "parent-child"
#: Parent chains deeper than this are treated as ending there (beads allows 3 levels).
MAX_PARENT_DEPTH = 64


def is_warm_rig(rig: Rig, town: Town | None = None) -> bool:
    """Affinity of one rig: True when its repository has a live linked worktree.

    git keeps one admin folder per linked worktree under
    ``<common git dir>/worktrees/``; a work tree whose ``.git`` directory has
    no such folder has none, and is answered without opening the repository
    (most rigs are cold, and pygit2 costs start-up time).  Everything else —
    bare repositories, ``.git`` files, worktrees that may be gone — is
    decided by pygit2 (:func:`sluice.store.git.gitview.has_live_worktree`), whose answer is kept in
    the town database (a derived row ``affinity:<rig>``) under a stamp of the git metadata it read
    (:func:`sluice.store.git.gitview.warmth_stamp`), so the next call asks pygit2
    only after that metadata changed.
    """
    git_dir = Path(rig.repo) / ".git"
    if git_dir.is_dir() and not (git_dir / "worktrees").exists():
        return False
    from sluice.store.git.gitview import warmth_stamp

    stamp = warmth_stamp(Path(rig.repo))
    database = town.db_if_made if town is not None and stamp is not None else None
    name = f"affinity:{rig.name}"
    if database is not None:
        try:
            kept = json.loads(database.kept(name) or "null")
        except (SluiceError, ValueError):
            kept = None
        if kept in ([stamp, True], [stamp, False]):
            return kept[1]
    from sluice.errors import NotARepository
    from sluice.store.git.gitview import has_live_worktree

    try:
        warm = has_live_worktree(Path(rig.repo))
    except NotARepository as err:  # said on every call until mended, so never kept
        log.warning("affinity 0 for %s: %s", rig.repo, err)
        return False
    if database is not None and warmth_stamp(Path(rig.repo)) == stamp:  # unchanged while pygit2 read it
        database.keep_if_free(name, json.dumps([stamp, warm]))
    return warm


def is_parent_edge(child_id: str, target: str) -> bool:
    """Whether a ``parent-child`` edge from ``child_id`` to ``target`` makes a parent.

    As in beads, only a target with the child's own id prefix does: beads
    stores a cross-prefix (or ``external:``) edge as external, and an external
    edge makes no one a child — not for blocking, not for an epic's sling, not
    for its graph.
    """
    return bool(target) and not target.startswith("external:") and id_prefix(target) == id_prefix(child_id)


def parent_of_deps(deps: str, child_id: str) -> str | None:
    """The first parent of ``child_id`` in an index ``deps`` column ('' or JSON of (type, target, gate))."""
    if not deps or PARENT_CHILD not in deps:
        return None
    for dep_type, target, _gate in json.loads(deps):
        if dep_type == PARENT_CHILD and target and is_parent_edge(child_id, str(target)):
            return str(target)
    return None


def parent_of_record(record: dict) -> str | None:
    """The first parent of an item record (same-prefix ``parent-child`` edges only)."""
    if not record.get("dependencies"):
        return None  # most items: no need to read their edges as beads keeps them
    for dep_type, target, _gate in edges(record):
        if dep_type == PARENT_CHILD and is_parent_edge(record["id"], target):
            return target
    return None


class Graphs:
    """Which graph an item belongs to: the highest epic above it, itself included.

    A graph is the tree under a top-level epic, so the walk follows each
    item's first ``parent-child`` edge upwards and remembers the last epic it
    passes; an item with no epic above it (and not one itself) has no graph.
    A parent has the child's own id prefix (beads: a cross-prefix edge is
    external and makes no one a child); it is found where its prefix routes,
    then in any rig, as the item commands find ids.  A missing parent ends
    the walk.
    Answers are memoised per ancestor, so ten thousand children of one epic
    cost one lookup of the epic.
    """

    def __init__(self, town: Town, stores: Stores):
        self.town = town
        self.stores = stores
        self._facts: dict[str, tuple[str, str | None] | None] = {}
        self._top: dict[str, str | None] = {}
        self._rigs: list[Rig] | None = None

    def _all_rigs(self) -> list[Rig]:
        if self._rigs is None:  # longest prefix first, as Town.rig_for_id routes
            self._rigs = sorted(self.town.rigs(), key=lambda rig: (-len(rig.prefix), rig.name))
        return self._rigs

    def _search_order(self, item_id: str) -> list[Rig]:
        """The rig the id's prefix routes to, then every other rig."""
        home = self.town.rig_for_id(item_id)
        return [home, *(r for r in self._all_rigs() if r is not home)] if home else self._all_rigs()

    def facts(self, item_id: str) -> tuple[str, str | None] | None:
        """(issue_type, parent id) of a durable item anywhere in the town, or None."""
        if item_id in self._facts:
            return self._facts[item_id]
        found = None
        if not item_id.startswith("external:"):
            for rig in self._search_order(item_id):
                row = self.stores.rig(rig.name).index.types_and_deps([item_id]).get(item_id)
                if row is not None:
                    found = (row[0], parent_of_deps(row[1], item_id))
                    break
        self._facts[item_id] = found
        return found

    def prefetch(self, ids: Iterable[str]) -> None:
        """Look up many parents (and, level by level, their parents) with a few batched queries."""
        wanted = {i for i in ids if i not in self._facts and not i.startswith("external:")}
        while wanted:
            by_rig: dict[str, list[str]] = {}
            for item_id in wanted:
                home = self.town.rig_for_id(item_id)
                if home is not None:
                    by_rig.setdefault(home.name, []).append(item_id)
            found: dict[str, tuple[str, str]] = {}
            for rig, members in by_rig.items():
                found.update(self.stores.rig(rig).index.types_and_deps(members))
            for item_id in wanted - found.keys():
                self.facts(item_id)  # not where its prefix routes: the slow search of every rig
            parents = set()
            for item_id, (issue_type, deps) in found.items():
                parent = parent_of_deps(deps, item_id)
                self._facts[item_id] = (issue_type, parent)
                if parent is not None:
                    parents.add(parent)
            wanted = {p for p in parents if p not in self._facts and not p.startswith("external:")}

    def top_from(self, item_id: str | None) -> str | None:
        """The highest epic on the chain that starts at ``item_id`` (inclusive), or None."""
        chain: list[str] = []
        seen: set[str] = set()
        current = item_id
        top: str | None = None
        while current is not None and current not in seen and len(chain) < MAX_PARENT_DEPTH:
            if current in self._top:
                top = self._top[current]
                break
            seen.add(current)
            facts = self.facts(current)
            if facts is None:
                break
            chain.append(current)
            current = facts[1]
        # Walk back down: each link's answer is its own epic-ness over what lies above it.
        for link in reversed(chain):
            facts = self.facts(link)
            if top is None and facts is not None and facts[0] == EPIC:
                top = link
            self._top[link] = top
        return top

    def of(self, item_id: str, issue_type: str, parent: str | None) -> str | None:
        """The graph of an item given its own type and first parent."""
        above = self.top_from(parent) if parent is not None and parent != item_id else None
        if above is not None:
            return above
        return item_id if issue_type == EPIC else None

    def of_record(self, record: dict) -> str | None:
        return self.of(record["id"], record.get("issue_type") or "task", parent_of_record(record))

    def check_graph(self, graph_id: str) -> None:
        """Refuse a ``--graph-id`` that names no top-level epic, saying what it is instead."""
        from sluice.errors import InvalidOperation, UnknownItem

        facts = self.facts(graph_id)
        if facts is None:
            raise UnknownItem(f"unknown graph {graph_id!r}: no item with that id in any rig")
        if facts[0] != EPIC:
            raise InvalidOperation(
                f"{graph_id} is a {facts[0]}, not an epic; a graph is named by its top-level epic"
            )
        top = self.top_from(graph_id)
        if top != graph_id:
            raise InvalidOperation(f"{graph_id} is inside graph {top}; name the top-level epic")


class Signals:
    """The scoring inputs of one call; each is read at most once."""

    def __init__(self, town: Town, stores: Stores):
        self.town = town
        self.stores = stores
        self.graphs = Graphs(town, stores)
        self._warm: dict[str, bool] = {}
        self._queues: dict[str, tuple[int, int]] = {}
        self._counts: dict[str, int] | None = None

    def warm_rigs(self, rigs: Iterable[str]) -> set[str]:
        rigs = set(rigs)
        for name in rigs - self._warm.keys():
            self._warm[name] = is_warm_rig(self.town.rig(name), self.town)
        return {name for name in rigs if self._warm[name]}

    def merge_queue(self, rig: str) -> tuple[int, int]:
        """(queued, running): the rig's ``merge-request`` items that are open and in progress."""
        if rig not in self._queues:
            counts = self.stores.rig(rig).merge_queue_counts()
            self._queues[rig] = (counts.get("open", 0), counts.get("in_progress", 0))
        return self._queues[rig]

    def scoring_inputs(self, rigs: Iterable[str]) -> dict:
        """The keyword arguments every scoring call takes for these rigs (``score_all`` and kin)."""
        rigs = set(rigs)
        return {"warm_rigs": self.warm_rigs(rigs), "merge_depths": self.merge_depths(rigs),
                "decision_counts": self.decision_counts}

    def merge_depths(self, rigs: Iterable[str]) -> dict[str, int]:
        """Merge-queue depth (queued + running) per rig."""
        return {name: sum(self.merge_queue(name)) for name in rigs}

    def decision_counts(self) -> dict[str, int]:
        """Past decisions per rig (skipped ones too), for fairness; read only when asked."""
        if self._counts is None:
            from sluice.store.database.decisions import decision_counts

            self._counts = decision_counts(self.town)
        return self._counts
