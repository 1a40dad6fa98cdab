"""Which ready item should go next: metagit RFC-0012 scoring on beads items.

Every candidate gets one number::

    score = round(wp*P + wa*A + wc*C + wf*F + wd*D - penalty_if_pressured, 6)

* ``P = 4 - priority``: beads priority 0 is the most urgent, so it must score
  highest.  Nothing is clamped; a hand-written priority of -1 or 7 simply
  scores 5 or -3, as metagit's raw priorities do.
* ``A`` is 1 when the item's rig already has a live worktree (warm), else 0.
* ``C = 1 / (1 + T/1000)`` with ``T`` the item's effective token estimate: a
  fixed transform in (0, 1], so a score never depends on the rest of the set.
* ``F`` is 1 for items on the rigs that have had the fewest decisions, and
  only when the resolved fairness weight is positive.
* ``D`` (deadline) is 0 for an item without beads' ``due_at``, else
  ``1 / (1 + H/24)`` with ``H`` the hours until it is due (0 once due): 1.0
  when due or overdue, 0.5 a day ahead.  Its weight defaults to 0, so
  scores and reasons stay metagit's until a policy turns it on.
* A rig whose merge queue is at least ``threshold`` deep is *pressured*: its
  items lose ``penalty`` points (also in skip mode, where :func:`select` then
  turns them into skipped selections).

Scores are rounded *before* ranking, so values that differ only beyond the
sixth decimal tie and fall through to the deterministic tie-break: fewer
tokens, then the earlier timestamp, then the id.

Pure: plain values in, plain values out.  The policy file lives in
:mod:`sluice.store.files.policy`; this module only reads a policy-shaped object.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Protocol

from sluice.core.recordclass import field, frozen, recordclass
from sluice.errors import ConfigError, UsageError

#: Beads priorities run 0 (most urgent) .. 4 (backlog); P = 4 - priority.
LOWEST_URGENCY_PRIORITY = 4
#: The token estimate assumed for an item that gives none.
DEFAULT_TOKENS = 1000
SKIPPED_REASON = "skipped_due_to_merge_pressure"
#: The largest weight, penalty or aging setting a policy may hold (either sign).  With every factor
#: at most 4, a score stays below 1e7 and keeps its six decimals; a weight of 1e308 would overflow.
MAX_WEIGHT = 1_000_000.0
WEIGHT_NAMES = ("priority", "affinity", "cost", "fairness", "deadline")


@frozen
class Weights:
    """The factor weights after graph overrides have been applied."""

    priority: float = 1.0
    affinity: float = 0.5
    cost: float = 0.25
    fairness: float = 0.0
    deadline: float = 0.0

    def __post_init__(self) -> None:
        # A NaN weight would make every comparison false and the ranking
        # depend on input order; refuse it where it would enter.
        for name in WEIGHT_NAMES:
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"weight {name} must be a finite number (got {getattr(self, name)!r})")


@recordclass(frozen=True, slots=True)
class Candidate:
    """One thing that could be scheduled: a ready item or a queued context.

    ``order`` is the third tie-break (``enqueued_at`` for contexts,
    ``created_at`` for items).  ISO-8601 UTC strings in one format compare
    correctly as strings; callers normalise them.  ``payload`` is the caller's
    own object, carried through untouched and ignored by equality.
    """

    item_id: str
    priority: int
    tokens: int
    rig: str | None
    order: str
    graph_id: str | None = None
    payload: object = field(default=None, compare=False)
    age_hours: float = 0.0  # how long a queued context has waited (aging); 0 for a bare item
    due_in_hours: float | None = None  # hours until the item's due_at (negative: overdue); None: no deadline

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ValueError(f"{self.item_id}: tokens must be >= 0 (got {self.tokens})")


@recordclass(frozen=True, slots=True)
class Scored:
    """A candidate with its score and the metagit reasons that explain it."""

    candidate: Candidate
    score: float
    reasons: tuple[str, ...]
    pressured: bool


@frozen
class Selection:
    """One entry of :func:`select`'s answer.

    A skipped selection is a pressured candidate in skip mode: it is reported
    (and takes a ``limit`` slot, as in metagit) but must not be launched.
    """

    scored: Scored
    skipped: bool
    reasons: tuple[str, ...]


# --------------------------------------------------------------------------
# Policy shape (duck-typed so this module never imports pydantic)


class PolicyLike(Protocol):
    """What scoring needs from a policy; :class:`sluice.store.files.policy.Policy` fits.

    The weights and each graph's overrides are read by name (:data:`WEIGHT_NAMES`), a null override
    falling back to the base weight.
    """

    @property
    def weights(self) -> object: ...

    @property
    def graph_overrides(self) -> Mapping[str, object]: ...

    @property
    def merge_queue_threshold(self) -> int: ...

    @property
    def merge_pressure_penalty(self) -> float: ...


def resolve_weights(policy: PolicyLike, graph_id: str | None) -> Weights:
    """The weights for items of one graph.

    Each non-null field of ``graph_overrides[graph_id]`` replaces the base
    weight; a null falls back to it.  Threshold, penalty and skip are global.
    """
    base = policy.weights
    override = policy.graph_overrides.get(graph_id) if graph_id is not None else None

    def pick(name: str) -> float:
        value = getattr(override, name, None) if override is not None else None
        return float(getattr(base, name, 0.0) if value is None else value)

    return Weights(**{name: pick(name) for name in WEIGHT_NAMES})


def deadline_enabled(policy: PolicyLike) -> bool:
    """Whether any graph scores deadlines, i.e. whether items' ``due_at`` must be read."""
    return bool(getattr(policy.weights, "deadline", 0.0)) or any(
        getattr(o, "deadline", None) for o in policy.graph_overrides.values())


# --------------------------------------------------------------------------
# Factors


def _non_negative_int(value: object) -> int | None:
    # bool is an int subclass, but ``true`` is not a token count.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def effective_tokens(metadata: Mapping[str, object] | None) -> int:
    """The token estimate ``T`` of an item, from its beads ``metadata``.

    ``estimated_tokens``, else ``context_budget``, else 1000.  A value counts
    only when it is an integer >= 0: an explicit 0 is honoured (an item that
    needs no context is the cheapest there is), while negatives, floats,
    strings and booleans fall through to the next source.
    """
    if not isinstance(metadata, Mapping):
        return DEFAULT_TOKENS
    for key in ("estimated_tokens", "context_budget"):
        tokens = _non_negative_int(metadata.get(key))
        if tokens is not None:
            return tokens
    return DEFAULT_TOKENS


def cost_factor(tokens: int) -> float:
    """``C = 1 / (1 + T/1000)``: 1.0 for a free item, 0.5 at the default 1000."""
    return 1.0 / (1.0 + tokens / 1000.0)


def deadline_factor(due_in_hours: float | None) -> float:
    """``D = 1 / (1 + H/24)`` for an item due in ``H`` hours (1.0 once due); 0 without a deadline."""
    if due_in_hours is None:
        return 0.0
    return 1.0 / (1.0 + max(0.0, due_in_hours) / 24.0)


def due_text(due_in_hours: float) -> str:
    """``due in 3h``, ``due in 2d``, ``overdue by 40m``: a deadline as explain and the views say it."""
    from sluice.core.clock import format_duration

    seconds = abs(due_in_hours) * 3600.0
    if seconds >= 2 * 86400:
        amount = f"{round(seconds / 86400)}d"
    elif seconds >= 3600:
        amount = f"{round(seconds / 3600)}h"
    else:
        amount = format_duration(max(60.0, round(seconds / 60) * 60.0))
    return f"due in {amount}" if due_in_hours >= 0 else f"overdue by {amount}"


def aging_bonus(age_hours: float, aging: float, aging_max: float) -> float:
    """Points for waiting: ``aging`` per hour queued, at most ``aging_max``; 0 when aging is off."""
    if aging <= 0 or age_hours <= 0:
        return 0.0
    return min(aging * age_hours, aging_max)


def _score_value(
    c: Candidate,
    weights: Weights,
    warm: bool,
    underrepresented: bool,
    pressured: bool,
    penalty: float,
    bonus: float = 0.0,
) -> float:
    # The one place the formula lives, so the fast top-k path of score_all and
    # score_candidate can never disagree on a score.
    raw = (
        weights.priority * (LOWEST_URGENCY_PRIORITY - c.priority)
        + weights.affinity * (1.0 if warm else 0.0)
        + weights.cost * cost_factor(c.tokens)
        + weights.fairness * (1.0 if weights.fairness > 0 and underrepresented else 0.0)
    )
    if weights.deadline:
        raw += weights.deadline * deadline_factor(c.due_in_hours)
    if pressured:
        raw -= penalty
    raw += bonus
    if not math.isfinite(raw):
        # Finite weights can still overflow (1e308 * 4); an infinite or NaN score would rank
        # arbitrarily and is not valid JSON, so the policy is what must change.
        raise ConfigError(
            f"an item of priority {c.priority} scores {raw} under this policy (weights {weights.priority!r},"
            f" {weights.affinity!r}, {weights.cost!r}, {weights.fairness!r}, penalty {penalty!r});"
            " choose smaller weights"
        )
    # "+ 0.0" turns a rounded -0.0 into 0.0, so JSON never shows "-0.0".
    return round(raw, 6) + 0.0


def _check_pressure_settings(threshold: int, penalty: float) -> None:
    if threshold < 1:
        raise ValueError(f"merge_queue_threshold must be >= 1 (got {threshold})")
    if not math.isfinite(penalty):
        raise ValueError(f"merge_pressure_penalty must be a finite number (got {penalty!r})")


def score_candidate(
    c: Candidate,
    weights: Weights,
    *,
    warm: bool,
    underrepresented: bool,
    merge_depth: int,
    threshold: int,
    penalty: float,
    aging: tuple[float, float] = (0.0, 0.0),
) -> Scored:
    """Score one candidate and explain the score in metagit's reason strings.

    The reasons show the raw factors, not the weighted contributions, and the
    cost reason is present even when the cost weight is 0 (as in metagit).
    """
    _check_pressure_settings(threshold, penalty)
    pressured = merge_depth >= threshold
    bonus = aging_bonus(c.age_hours, *aging)
    score = _score_value(c, weights, warm, underrepresented, pressured, penalty, bonus)

    reasons = [
        f"priority={c.priority}",
        f"affinity={1 if warm else 0}",
        f"cost={cost_factor(c.tokens):.4f}(tokens={c.tokens})",
    ]
    if weights.fairness > 0:
        reasons.append(f"fairness={1 if underrepresented else 0}")
    if pressured:
        reasons.append(f"merge_pressure depth={merge_depth} threshold={threshold} penalty={float(penalty)!r}")
    if aging[0] > 0:
        reasons.append(f"aging=+{bonus:.2f}")
    if weights.deadline and c.due_in_hours is not None:
        reasons.append(f"deadline={deadline_factor(c.due_in_hours):.4f}({due_text(c.due_in_hours)})")
    return Scored(candidate=c, score=score, reasons=tuple(reasons), pressured=pressured)


def underrepresented_rigs(counts: Mapping[str, int], ready_rigs: Iterable[str | None]) -> frozenset[str]:
    """The ready rigs that have had the fewest decisions so far.

    A rig never seen counts 0, so on the first run every ready rig qualifies
    (a uniform shift that changes no order).  Items without a rig never do.
    """
    ready = {rig for rig in ready_rigs if rig}
    if not ready:
        return frozenset()
    fewest = min(counts.get(rig, 0) for rig in ready)
    return frozenset(rig for rig in ready if counts.get(rig, 0) == fewest)


# --------------------------------------------------------------------------
# Ranking and selection


def rank_key(s: Scored) -> tuple[float, int, str, str]:
    """Higher score first, then fewer tokens, earlier timestamp, smaller id."""
    c = s.candidate
    return rank_order(s.score, c.tokens, c.order, c.item_id)


def rank_order(score: float, tokens: int, order: str, item_id: str) -> tuple[float, int, str, str]:
    """:func:`rank_key` from its parts, for callers that score kinds of candidates, not each one."""
    return (-score, tokens, order, item_id)


def rank(scored: Iterable[Scored]) -> list[Scored]:
    """Order scored candidates best first; see :func:`rank_key`."""
    return sorted(scored, key=rank_key)


def select(ranked: Sequence[Scored], limit: int | None, skip_on_pressure: bool) -> list[Selection]:
    """Walk the ranking and take up to ``limit`` selections (metagit's skip rule, docs/architecture.md).

    In skip mode a pressured candidate becomes a *skipped* selection that
    still uses up a slot, so ``limit=1`` with a pressured leader yields only
    the skip: the caller sees why nothing runnable came back instead of
    silently getting the runner-up.  ``limit=None`` takes everything.
    """
    if limit is not None and (isinstance(limit, bool) or limit < 1):
        raise UsageError("limit must be >= 1")
    chosen: list[Selection] = []
    for s in ranked:
        if limit is not None and len(chosen) >= limit:
            break
        if skip_on_pressure and s.pressured:
            chosen.append(Selection(scored=s, skipped=True, reasons=(*s.reasons, SKIPPED_REASON)))
        else:
            chosen.append(Selection(scored=s, skipped=False, reasons=s.reasons))
    return chosen


def score_all(
    candidates: Iterable[Candidate],
    policy_like: PolicyLike,
    *,
    warm_rigs: Collection[str],
    merge_depths: Mapping[str, int],
    decision_counts: Mapping[str, int] | Callable[[], Mapping[str, int]],
    top: int | None = None,
) -> list[Scored]:
    """Score and rank a whole ready set under one policy.

    ``decision_counts`` (past decisions per rig) may be given as a callable;
    it is then called only when some candidate's resolved fairness weight is
    positive, so the decision log need not be read when fairness is off.

    ``top`` keeps only the best ``top`` of the ranking.  ``select`` never looks
    past its ``limit``, so ``select(score_all(..., top=k), k, skip)`` equals
    ``select(score_all(...), k, skip)``; the shortcut exists because building
    reason strings for 100,000 candidates costs more than scoring them.
    """
    if top is not None and top < 0:
        raise ValueError(f"top must be >= 0 (got {top})")
    pool = list(candidates)
    weights_by_graph: dict[str | None, Weights] = {}
    for c in pool:
        if c.graph_id not in weights_by_graph:
            weights_by_graph[c.graph_id] = resolve_weights(policy_like, c.graph_id)

    favoured: frozenset[str] = frozenset()
    if any(w.fairness > 0 for w in weights_by_graph.values()):
        counts = decision_counts() if callable(decision_counts) else decision_counts
        favoured = underrepresented_rigs(counts, (c.rig for c in pool))

    threshold = policy_like.merge_queue_threshold
    penalty = policy_like.merge_pressure_penalty
    _check_pressure_settings(threshold, penalty)
    aging = (float(getattr(policy_like, "aging", 0.0) or 0.0),
             float(getattr(policy_like, "aging_max", 0.0) or 0.0))

    def conditions(c: Candidate) -> tuple[Weights, bool, bool, int]:
        rig = c.rig
        if not rig:  # no rig: no affinity, no fairness, no merge queue
            return weights_by_graph[c.graph_id], False, False, 0
        return weights_by_graph[c.graph_id], rig in warm_rigs, rig in favoured, merge_depths.get(rig, 0)

    if top is not None and top < len(pool):
        # Rank on bare numbers first; explain only the winners.
        keyed = []
        for position, c in enumerate(pool):
            weights, warm, under, depth = conditions(c)
            bonus = aging_bonus(c.age_hours, *aging)
            score = _score_value(c, weights, warm, under, depth >= threshold, penalty, bonus)
            keyed.append((*rank_order(score, c.tokens, c.order, c.item_id), position))
        pool = [pool[k[-1]] for k in heapq.nsmallest(top, keyed)]

    scored = []
    for c in pool:
        weights, warm, under, depth = conditions(c)
        scored.append(
            score_candidate(
                c,
                weights,
                warm=warm,
                underrepresented=under,
                merge_depth=depth,
                threshold=threshold,
                penalty=penalty,
                aging=aging,
            )
        )
    return rank(scored)
