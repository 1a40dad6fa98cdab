"""Advisory scheduling: which ready item should an agent take next (metagit RFC-0012 shape).

``schedule next`` scores every ready item of every rig with the town's policy
and answers with *decisions*: the item, its score, the reasons, and hints for
dispatching it.  It never changes an item and claims nothing: asking twice
gives the same answer until the work changes.  Unless previewing, each
decision is appended to ``decisions.jsonl`` (which is what fairness counts)
and announced as a ``ScheduleDecision`` or ``ScheduleSkipped`` event.

Each function here is one surface's whole job, so the CLI and the MCP server
return the same JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.core.defaults import NEXT_LIMIT
from sluice.errors import UsageError

if TYPE_CHECKING:
    from sluice.core.scoring import Selection
    from sluice.scheduler.session import Session
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import Stores

POLICY_FIELDS = frozenset({
    "priority", "affinity", "cost", "fairness", "deadline", "merge_queue_threshold", "merge_pressure_penalty",
    "skip_on_merge_pressure", "graph_id", "aging", "aging_max",
})


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be an integer (got {value!r})", parameters=(name,))
    if value < minimum:
        raise UsageError(f"{name} must be >= {minimum} (got {value})", parameters=(name,))
    return value


def next_decisions(
    where: Town | Session, graph_id: str | None = None, limit: int = NEXT_LIMIT, preview: bool = False,
    now: float | None = None,
) -> list[dict]:
    """Up to ``limit`` decisions over the ready items (of graph ``graph_id`` when given).

    In skip mode a pressured item inside the top ``limit`` becomes a skipped
    decision and still takes its slot (metagit's skip rule).  ``preview`` writes
    nothing: no decision, no event.  A session over stores kept open between
    calls (``Session(files, stores=stores)``) answers without re-opening them.
    """
    _check_count("limit", limit, 1)
    if graph_id is not None and (not isinstance(graph_id, str) or not graph_id.strip()):
        raise UsageError(f"graph_id must be a non-empty string (got {graph_id!r})", parameters=("graph_id",))

    from sluice.core.clock import iso_epoch
    from sluice.core.scoring import select
    from sluice.scheduler.queue.ranking import load_town_policy, rank_ready
    from sluice.scheduler.queue.signals import Signals
    from sluice.scheduler.session import Session

    session = Session.of(where, now=now)
    town, stores, now = session.files, session.stores, session.now
    policy = load_town_policy(town)
    signals = Signals(town, stores)
    if graph_id is not None:
        graph_id = graph_id.strip()
        signals.graphs.check_graph(graph_id)
    top = rank_ready(town, stores, signals, policy, limit, graph_id=graph_id, now=now)
    if not top:
        return []
    at = iso_epoch(now)
    decisions = [_decision(town, stores, selection, at) for selection in select(top, limit,
                                                                                 policy.skip_on_merge_pressure)]
    if not preview:  # the decisions in one write, then their events in another
        from sluice.store.database.decisions import append_decisions
        from sluice.store.database.events import SCHEDULE_DECISION, SCHEDULE_SKIPPED, emit_events

        append_decisions(town, decisions)
        keys = ("decision_id", "graph_id", "node_id", "score", "skipped", "reasons")
        emit_events(town, [(SCHEDULE_SKIPPED if d["skipped"] else SCHEDULE_DECISION, {k: d[k] for k in keys})
                           for d in decisions])
    return decisions


def _decision(town: Town, stores: Stores, selection: Selection, at: str) -> dict:
    from sluice.store.database.decisions import make_decision

    candidate = selection.scored.candidate
    rig = town.rig(candidate.rig)
    item = stores.rig(rig.name).get(candidate.item_id) or {"id": candidate.item_id}
    return make_decision(item, rig, graph_id=candidate.graph_id, score=selection.scored.score,
                         reasons=selection.reasons, at=at, skipped=selection.skipped)


def status(where: Town | Session, recent: int = 10, now: float | None = None) -> dict:
    """The policy, how many items are ready, the newest decisions, and the rigs with a merge queue."""
    _check_count("recent", recent, 0)
    from sluice.scheduler.queue.ranking import load_town_policy
    from sluice.scheduler.queue.signals import Signals
    from sluice.scheduler.session import Session
    from sluice.store.database.decisions import recent_decisions

    session = Session.of(where, now=now)
    town, stores, now = session.files, session.stores, session.now
    policy = load_town_policy(town)
    signals = Signals(town, stores)
    ready = 0
    pressure = {}
    for store in stores.all():
        ready += store.index.ready_count(now)
        depth = sum(signals.merge_queue(store.rig.name))
        if depth >= 1:
            pressure[store.rig.name] = depth
    return {
        "policy": policy.model_dump(mode="json"),
        "ready_count": ready,
        "recent_decisions": recent_decisions(town, recent),
        "merge_pressure": pressure,
    }


def policy_show(town: Town) -> dict:
    """The policy in force (the defaults when there is no policy file)."""
    from sluice.scheduler.queue.ranking import load_town_policy

    return load_town_policy(town).model_dump(mode="json")


def policy_set(town: Town, **fields: Any) -> dict:
    """Change policy fields (see :func:`sluice.store.files.policy.set_policy`) and return the whole policy."""
    from sluice.store.files.policy import set_policy

    unknown = sorted(set(fields) - POLICY_FIELDS)
    if unknown:
        known = ", ".join(sorted(POLICY_FIELDS))
        raise UsageError(f"unknown policy field(s): {', '.join(unknown)} (known: {known})")
    graph_id = fields.get("graph_id")
    if isinstance(graph_id, str) and graph_id.strip():
        # An override for an id that is no top-level epic would never apply: refuse it as `next` does.
        from sluice.scheduler.queue.signals import Signals
        from sluice.scheduler.session import Session

        fields["graph_id"] = graph_id.strip()
        Signals(town, Session.of(town).stores).graphs.check_graph(fields["graph_id"])
    return set_policy(town.policy_path, town.lock_path("policy"), **fields).model_dump(mode="json")


def policy_unset(town: Town, graph_id: str) -> dict:
    """Remove one graph's weight overrides and return the whole policy."""
    from sluice.store.files.policy import unset_graph_override

    return unset_graph_override(town.policy_path, town.lock_path("policy"), graph_id).model_dump(mode="json")
