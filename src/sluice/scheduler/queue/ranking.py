"""One ranking for everything that orders work: run, dry-run, list, status, next.

The dispatcher hands its queued contexts to :func:`rank_work`; the advisor
(``schedule next``) asks :func:`rank_ready` for the best of every ready item
in the town.  Both score with :mod:`sluice.core.scoring` under the town's policy
and the same :class:`~sluice.scheduler.queue.signals.Signals`, and both order by the same key
(score desc, effective tokens asc, timestamp asc, id asc), so a queued
context and a ready item are never ordered by two different rules.  The
tie-break timestamp is a context's ``enqueued_at`` and a bare item's
``created_at``, both as microsecond UTC ISO text so that strings compare as
times.

Pressured work (a rig whose merge queue is at the threshold) stays in the
ranking with its penalty: skipping it is advice that ``schedule next`` gives
in skip mode, not something the dispatcher does.

**Why ready items are ranked by groups.**  Inside one rig every ready item
with the same priority, token estimate and graph gets exactly the same score
and reasons (affinity, fairness and merge pressure are properties of the
rig).  So :func:`rank_ready` scores one representative per group — a few
hundred instead of 100,000 — orders the groups by (score, tokens), and reads
item ids only from the groups that reach the requested top, oldest first.
:func:`best_of_groups` is exactly ``score_all`` followed by a cut at
``limit``; the tests check that equivalence property-based.
"""

from __future__ import annotations

import heapq
import json
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from itertools import groupby
from operator import itemgetter
from typing import TYPE_CHECKING

from sluice.core.clock import order_of_ts, order_text
from sluice.core.items import due_in_hours, effective_tokens, normalise, parse_ts, priority_of
from sluice.core.recordclass import field, frozen, recordclass, replace
from sluice.core.scoring import (
    WEIGHT_NAMES,
    Candidate,
    PolicyLike,
    Scored,
    deadline_enabled,
    rank_order,
    score_all,
)
from sluice.errors import StoreCorrupt
from sluice.logs import log

if TYPE_CHECKING:
    from sluice.scheduler.queue.signals import Signals
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import RigStore, Stores

@recordclass
class Work:
    """One candidate: a ready item, possibly queued through a sling context."""

    item: dict
    rig: str  # the rig the work goes to (a context's target rig, else the item's rig)
    order: str  # enqueued_at for a context, created_at for a bare item
    context_id: str | None = None
    payload: object = None  # whatever the caller needs back (e.g. the parsed context)
    score: float | None = None
    reasons: tuple[str, ...] = field(default_factory=tuple)
    pressured: bool = False
    graph_id: str | None = None  # the item's top-level epic, filled in by rank_work
    tokens: int | None = None  # the effective token estimate: given, or filled in by rank_work
    promoted_at: str = ""  # a promoted context goes ahead of score order, oldest promotion first


def load_town_policy(town: Town):
    """The town's policy: the plain copy of this exact file when it was validated before."""
    from sluice.store.files import configcache

    plain = configcache.plain_policy(town)
    if plain is not None:
        return plain
    from sluice.store.files.policy import read_policy

    text, policy = read_policy(town.policy_path)
    configcache.remember(town, text, policy.model_dump(mode="json"), kind=configcache.POLICY)
    return policy


def rank_work(
    town: Town,
    stores: Stores,
    work: Sequence[Work],
    *,
    policy: PolicyLike | None = None,
    now: float | None = None,
) -> list[Work]:
    """``work`` in dispatch order, each with its score, reasons, graph and tokens filled in.

    ``Work.order`` may be any ISO timestamp; it is compared as UTC time.  With
    policy ``aging`` on, a queued context (``context_id`` set) gains points for
    the hours since ``Work.order`` (its ``enqueued_at``) at ``now``.
    """
    if not work:
        return []
    from sluice.scheduler.queue.signals import Signals, parent_of_record

    policy = policy if policy is not None else load_town_policy(town)
    signals = Signals(town, stores)
    aging = float(getattr(policy, "aging", 0.0) or 0.0) > 0
    deadlines = deadline_enabled(policy)
    now = time.time() if now is None else now
    # Every item's parent chain in a few batched queries, not one query per parent.
    parents = [parent_of_record(w.item) for w in work]
    signals.graphs.prefetch(p for p in parents if p is not None)
    # Work alike in rig, graph, priority, tokens and age scores alike (see the module docstring):
    # one candidate per kind is scored, and every item is then ordered by the same rank key.
    kinds: dict[tuple, Candidate] = {}
    members: list[tuple[tuple, str, Work]] = []
    for position, w in enumerate(work):
        # Graphs.of_record, with the parent already found
        w.graph_id = signals.graphs.of(w.item["id"], w.item.get("issue_type") or "task", parents[position])
        if w.tokens is None:  # the index keeps it for the items it holds
            w.tokens = effective_tokens(w.item)
        priority, order = priority_of(w.item), order_text(w.order)
        age = _age_hours(order, now) if aging and w.context_id else 0.0
        due = due_in_hours(w.item, now) if deadlines else None
        kind = (w.rig, w.graph_id, priority, w.tokens, age, due)
        if kind not in kinds:
            kinds[kind] = Candidate(w.item["id"], priority, w.tokens, w.rig, order, w.graph_id, kind,
                                    age_hours=age, due_in_hours=due)
        members.append((kind, order, w))
    scored = {s.candidate.payload: s
              for s in score_all(kinds.values(), policy, **signals.scoring_inputs(kind[0] for kind in kinds))}
    keyed = []
    for kind, order, w in members:
        s = scored[kind]
        w.score, w.reasons, w.pressured = s.score, s.reasons, s.pressured
        # Promoted work first, in the order it was promoted (`scheduler promote`), then score order:
        # one flat key, (not promoted, promoted_at) + rank_order, which orders as the pair of them.
        rank = rank_order(s.score, w.tokens, order, w.item["id"])
        keyed.append(((not w.promoted_at, w.promoted_at, *rank), w))
    keyed.sort(key=itemgetter(0))
    return [w for _key, w in keyed]


def _age_hours(order: str, now: float) -> float:
    """Hours from a normalised timestamp to ``now`` (0 for an unreadable or future one)."""
    stamp = parse_ts(order)
    return max(0.0, (now - stamp) / 3600.0) if stamp is not None else 0.0


# -- the best of a whole ready set ------------------------------------------------


@frozen
class ReadyGroup:
    """Ready items of one rig that share graph, priority and tokens, hence score.

    ``rows(n)`` gives the first ``n`` of them as (order, item id), ordered by
    (order, id).
    """

    rig: str
    graph_id: str | None
    priority: int
    tokens: int
    count: int
    rows: Callable[[int], list[tuple[str, str]]] = field(compare=False)
    due_in_hours: float | None = None  # only set when the policy scores deadlines


def best_of_groups(
    groups: Sequence[ReadyGroup],
    policy: PolicyLike,
    *,
    warm_rigs: Collection[str],
    merge_depths: Mapping[str, int],
    decision_counts: Mapping[str, int] | Callable[[], Mapping[str, int]],
    limit: int,
) -> list[Scored]:
    """The first ``limit`` entries of the ranking of every item in ``groups``.

    Equal to ``score_all(<one candidate per item>, ...)[:limit]``: groups are
    scored as representatives (the ready rigs, which fairness compares, are
    the same), then walked in tiers of equal (score, tokens), inside which
    items interleave by (order, id).
    """
    representatives = [
        Candidate(str(n), g.priority, g.tokens, g.rig, "", g.graph_id, g, due_in_hours=g.due_in_hours)
        for n, g in enumerate(groups)
    ]
    top = max(limit, 256)
    while True:
        # Explaining every group costs more than ranking them; explain only a prefix of the
        # ranking, long enough to hold ``limit`` items and the whole tier the last one is in.
        ranked = score_all(
            representatives,
            policy,
            warm_rigs=warm_rigs,
            merge_depths=merge_depths,
            decision_counts=decision_counts,
            top=top,
        )
        if len(ranked) == len(representatives) or _prefix_suffices(ranked, limit):
            break
        top *= 4
    out: list[Scored] = []
    for tier in in_tiers(ranked):
        if len(out) >= limit:
            break
        need = limit - len(out)
        for order, item_id, s in tier_rows(tier, need)[:need]:
            candidate = replace(s.candidate, item_id=item_id, order=order, payload=None)
            out.append(replace(s, candidate=candidate))
    return out


def in_tiers(ranked: Iterable[Scored]) -> list[list[Scored]]:
    """Ranked groups in tiers of equal (score, tokens): every item of a tier ranks alike."""
    return [list(tier) for _key, tier in groupby(ranked, key=lambda s: (s.score, s.candidate.tokens))]


def tier_rows(tier: list[Scored], n: int) -> list[tuple[str, str, Scored]]:
    """Up to ``n`` items of each group of a tier (its payload, which gives ``rows(n)`` and ``count``) as
    (order, item id, the group's score), in that order: a tier's items interleave by age."""
    rows = [(order, item_id, s) for s in tier
            for order, item_id in s.candidate.payload.rows(min(n, s.candidate.payload.count))]
    rows.sort(key=itemgetter(0, 1))
    return rows


def _prefix_suffices(ranked: list[Scored], limit: int) -> bool:
    """Whether a ranked prefix of groups holds ``limit`` items and every group tied with the last one needed.

    Groups tied on (score, tokens) are ranked next to each other, so the tier
    is complete once the prefix reaches a group with a different key.
    """
    total = 0
    for position, s in enumerate(ranked):
        total += s.candidate.payload.count  # type: ignore[union-attr]
        if total >= limit:
            key = (s.score, s.candidate.tokens)
            return any((t.score, t.candidate.tokens) != key for t in ranked[position + 1 :])
    return False


def has_graph_weights(policy) -> bool:
    """True when some graph override sets a weight, so scores depend on each item's graph."""
    return any(
        any(getattr(o, name, None) is not None for name in WEIGHT_NAMES)
        for o in policy.graph_overrides.values()
    )


def rank_ready(
    town: Town,
    stores: Stores,
    signals: Signals,
    policy,
    limit: int,
    graph_id: str | None = None,
    now: float | None = None,
) -> list[Scored]:
    """The top ``limit`` of every ready item in the town (of one graph, when given), best first.

    Each returned candidate carries its real graph id.
    """
    now = time.time() if now is None else now
    by_graph = graph_id is not None or has_graph_weights(policy)
    deadlines = deadline_enabled(policy)
    groups: list[ReadyGroup] = []
    readable = 0
    first_error: Exception | None = None
    for store in stores.all():
        try:
            groups.extend(_rig_groups(store, signals, now, by_graph, graph_id, deadlines))
            readable += 1
        except (StoreCorrupt, OSError) as err:  # a rig that cannot be read is held; the others are scored
            stores.hold_unreadable(store.rig.name, err)
            # Said, never dropped in silence: the answer leaves that rig's items out.
            log.warning("rig %s left out (rig-unreadable): %s", store.rig.name, err)
            first_error = first_error or err
    if first_error is not None and not readable:
        raise first_error  # no rig could be read: there is no answer to give, only the error
    if not groups:
        return []
    top = best_of_groups(groups, policy, limit=limit, **signals.scoring_inputs(g.rig for g in groups))
    if by_graph:
        return top
    out = []
    for s in top:
        store = stores.rig(s.candidate.rig)
        record = store.get(s.candidate.item_id) or {"id": s.candidate.item_id}
        out.append(replace(s, candidate=replace(s.candidate, graph_id=signals.graphs.of_record(record))))
    return out


def _rig_groups(
    store: RigStore, signals: Signals, now: float, by_graph: bool, graph_id: str | None,
    deadlines: bool = False,
) -> list[ReadyGroup]:
    rig = store.rig.name
    if not by_graph and not deadlines:
        index = store.index

        def from_index(priority: int, tokens: int) -> Callable[[int], list[tuple[str, str]]]:
            def rows(n: int) -> list[tuple[str, str]]:
                found = index.ready_in_group(now, priority, tokens, n)
                return [(order_of_ts(ts), item_id) for item_id, ts in found]

            return rows

        return [ReadyGroup(rig, None, p, t, n, from_index(p, t)) for p, t, n in index.ready_groups(now)]

    from sluice.scheduler.queue.signals import parent_of_deps, parent_of_record

    # (id, issue_type, priority, created_ts, tokens, parent, due in hours) of every ready item
    if deadlines:  # the index does not keep due dates: the ready records are read whole
        records = [(item_id, priority, created_ts, normalise(json.loads(raw)))
                   for priority, created_ts, item_id, raw in store.ready_raw(now, 0)]
        rows = [(item_id, record.get("issue_type") or "task", priority, created_ts, effective_tokens(record),
                 parent_of_record(record), due_in_hours(record, now))
                for item_id, priority, created_ts, record in records]
    else:
        rows = [(item_id, issue_type, priority, created_ts, tokens, parent_of_deps(deps, item_id), None)
                for item_id, issue_type, priority, created_ts, tokens, deps in store.index.ready_facts(now)]
    if by_graph:
        signals.graphs.prefetch({row[5] for row in rows if row[5] is not None})
    buckets: dict[tuple, list[tuple[bool, float, str]]] = {}
    for item_id, issue_type, priority, created_ts, tokens, parent, due in rows:
        graph = signals.graphs.of(item_id, issue_type, parent) if by_graph else None
        if graph_id is not None and graph != graph_id:
            continue
        # (undated, timestamp, id) orders exactly as (order text, id); the text is made for the chosen only.
        buckets.setdefault((graph, priority, tokens, due), []).append((not created_ts, created_ts, item_id))
    return [
        ReadyGroup(rig, graph, priority, tokens, len(members), _sorted_rows(members), due)
        for (graph, priority, tokens, due), members in buckets.items()
    ]


def _sorted_rows(members: list[tuple[bool, float, str]]) -> Callable[[int], list[tuple[str, str]]]:
    """The first ``n`` members as (order text, id): only the groups that reach the top are ever sorted."""
    return lambda n: [(order_of_ts(ts), item_id) for _undated, ts, item_id in heapq.nsmallest(n, members)]
