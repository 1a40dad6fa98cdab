"""Admission control: which ranked candidates one cycle may launch, and why the rest wait.

The ranking (:mod:`sluice.core.scoring`) says in which order queued work
should go; admission says how much of it may go *now*.  One pure function,
:func:`admit`, takes the ranked candidates, the polecats already running,
the limits from the config, the token spend in the budget window, the
active throttles and the clock value, and returns the plan plus, for every
candidate it does not plan, each reason in one vocabulary (:data:`CODES`).
``scheduler run``, its dry run, ``list``, ``status``, ``explain``, the
daemon and the MCP tools all call it on the same survey, so they can never
give two answers.

Rules, applied to each candidate in rank order against the counters left by
the candidates planned before it:

* ``throttled`` — a town-wide throttle, or one on the candidate's rig, is
  still running at ``now``;
* ``rig-cap`` — the rig already runs (or this cycle already plans) its
  ``rigs.NAME.max_polecats``;
* ``label-cap`` — for a label the item carries, ``scheduler.label_caps.LABEL``
  polecats with that label run or are planned;
* ``budget`` — launching would take the town's (or the rig's) token spend in
  the window above its budget;
* ``overlap`` — the item's ``touches`` overlap those of an item running or
  planned in the same rig (:func:`touches_overlap`);
* ``hold-file``, ``host-load``, ``host-memory``, ``host-disk`` — a town-wide
  gate (:mod:`sluice.core.gates`) holds every candidate, so nothing is planned;
* ``capacity`` / ``batch`` — the town's free slots or the batch are used up
  (``capacity`` when the free slots are the smaller limit, ``batch`` on a tie,
  as :func:`sluice.core.plan.plan_dispatch` decides).

A held candidate never uses a slot, so the next one down the ranking may go
instead: one rig at its cap does not stall the others.  Every reason that
applies is reported, not only the first, so ``explain`` can list them all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from sluice.core.plan import REASON_CAPACITY, REASON_NONE, plan_dispatch
from sluice.core.recordclass import field, frozen, recordclass

# The one vocabulary of "why is this item not launched", used by explain, list, status and the plan.
NOT_QUEUED = "not-queued"
BLOCKED = "blocked"
PAUSED = "paused"
DIRECT_MODE = "direct-mode"
CAPACITY = "capacity"
RIG_CAP = "rig-cap"
LABEL_CAP = "label-cap"
BUDGET = "budget"
THROTTLED = "throttled"
BACKOFF = "backoff"
OVERLAP = "overlap"
CIRCUIT_BROKEN = "circuit-broken"
BATCH = "batch"
MISSING_ITEM = "missing-item"
RIG_UNREADABLE = "rig-unreadable"  # the item's rig has a file sluice cannot read
# Town-wide gates (sluice.core.gates): every applicant is held while one holds.
HOLD_FILE = "hold-file"
HOST_LOAD = "host-load"
HOST_MEMORY = "host-memory"
HOST_DISK = "host-disk"

CODES = (NOT_QUEUED, BLOCKED, PAUSED, DIRECT_MODE, CAPACITY, RIG_CAP, LABEL_CAP, BUDGET, THROTTLED,
         BACKOFF, OVERLAP, CIRCUIT_BROKEN, BATCH, MISSING_ITEM, RIG_UNREADABLE, HOLD_FILE, HOST_LOAD,
         HOST_MEMORY, HOST_DISK)

#: Characters that start a glob pattern; a touch is cut at the first one.
WILDCARDS = frozenset("*?[{")


@recordclass(frozen=True, slots=True)
class Reason:
    """One reason an item is not launched: a code from :data:`CODES` and a sentence."""

    code: str
    detail: str = ""

    def to_json(self) -> dict:
        return {"code": self.code, "detail": self.detail}


@recordclass(frozen=True, slots=True)
class Applicant:
    """A ranked candidate as admission sees it.

    ``key`` identifies it in :attr:`Admission.held` (the context id);
    ``tokens`` is the estimate a launch spends against the budgets (the same
    ``T`` scoring uses).
    """

    key: str
    item_id: str
    rig: str
    tokens: int = 0
    labels: frozenset[str] = frozenset()
    touches: tuple[str, ...] = ()
    payload: object = field(default=None, compare=False)


@recordclass(frozen=True, slots=True)
class Running:
    """A polecat that holds a slot now: its item's rig, labels and touches."""

    item_id: str
    rig: str
    labels: frozenset[str] = frozenset()
    touches: tuple[str, ...] = ()


@frozen
class Limits:
    """The caps of one cycle.

    ``capacity`` is the town's free slots (``max_polecats`` minus the active
    polecats, floored at 0).  A budget of 0 means no budget.
    """

    capacity: int
    batch: int
    rig_caps: Mapping[str, int] = field(default_factory=dict)
    label_caps: Mapping[str, int] = field(default_factory=dict)
    town_budget: int = 0
    rig_budgets: Mapping[str, int] = field(default_factory=dict)


@frozen
class Spend:
    """Tokens spent by launches inside the budget window, town-wide and per rig."""

    town: int = 0
    rigs: Mapping[str, int] = field(default_factory=dict)


@frozen
class Throttle:
    """New launches held until ``until`` (epoch seconds); ``rig`` None holds the whole town."""

    until: float
    rig: str | None = None
    reason: str = ""


@frozen
class Admission:
    """The plan of one cycle and, for every applicant not in it, why."""

    to_dispatch: tuple[Applicant, ...]
    held: Mapping[str, tuple[Reason, ...]]
    reason: str

    @property
    def skipped(self) -> int:
        return len(self.held)


def stamp(epoch: float) -> str:
    """Epoch seconds as the UTC text sluice writes (for details)."""
    try:
        moment = datetime.fromtimestamp(epoch, UTC)
    except (OverflowError, OSError, ValueError):
        return "never"
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


# -- overlap --------------------------------------------------------------------------------


def touch_prefix(glob: str) -> tuple[str, bool]:
    """A touch glob cut at its first wildcard: (literal prefix, whether it was cut).

    Leading ``./`` and ``/`` are dropped and repeated slashes collapsed, so
    ``./src//api`` and ``src/api`` are the same path.
    """
    text = glob.strip()
    while text.startswith("./"):
        text = text[2:]
    text = text.lstrip("/")
    while "//" in text:
        text = text.replace("//", "/")
    for position, char in enumerate(text):
        if char in WILDCARDS:
            return text[:position], True
    return text, False


def _covers(prefix: str, wild: bool, other: str) -> bool:
    if wild:  # whatever the wildcard matches starts with the prefix, mid-name included
        return other.startswith(prefix)
    if not prefix:
        return True
    base = prefix.rstrip("/")
    return other == base or other.startswith(base + "/")


def touches_overlap(a: Iterable[str], b: Iterable[str]) -> bool:
    """Whether two items' touch globs may name a common path.

    Each glob is cut at its first wildcard to a literal prefix; two globs
    overlap when one prefix is a path prefix of the other (a cut prefix
    matches mid-name too: ``src/a*`` covers ``src/api/x.py``).  So
    ``src/api/**`` overlaps ``src/api/auth.py``, ``src/api/*`` does not
    overlap ``src/web/*``, and ``*.md`` overlaps everything.  An empty list
    never overlaps: items that declare nothing never conflict.
    """
    cut_b = [touch_prefix(g) for g in b]
    return any(_covers(pa, wa, pb) or _covers(pb, wb, pa)
               for pa, wa in map(touch_prefix, a) for pb, wb in cut_b)


# -- admission --------------------------------------------------------------------------------


class _Counters:
    """What is running plus what this cycle has planned so far."""

    def __init__(self, running: Sequence[Running], spend: Spend):
        self.by_rig: dict[str, int] = {}
        self.by_label: dict[str, int] = {}
        self.touching: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        self.town_spend = spend.town
        self.rig_spend = dict(spend.rigs)
        for polecat in running:
            self._count(polecat.item_id, polecat.rig, polecat.labels, polecat.touches)

    def _count(self, item_id: str, rig: str, labels: Iterable[str], touches: tuple[str, ...]) -> None:
        self.by_rig[rig] = self.by_rig.get(rig, 0) + 1
        for label in labels:
            self.by_label[label] = self.by_label.get(label, 0) + 1
        if touches:
            self.touching.setdefault(rig, []).append((item_id, touches))

    def plan(self, a: Applicant) -> None:
        self._count(a.item_id, a.rig, a.labels, a.touches)
        self.town_spend += a.tokens
        self.rig_spend[a.rig] = self.rig_spend.get(a.rig, 0) + a.tokens


def _rule_reasons(
    a: Applicant, limits: Limits, counts: _Counters, throttles: Sequence[Throttle]
) -> list[Reason]:
    reasons: list[Reason] = []
    for throttle in throttles:
        if throttle.rig is None or throttle.rig == a.rig:
            where = "the town" if throttle.rig is None else f"rig {throttle.rig}"
            why = f" ({throttle.reason})" if throttle.reason else ""
            reasons.append(Reason(THROTTLED, f"{where} is throttled until {stamp(throttle.until)}{why}"))
    cap = limits.rig_caps.get(a.rig)
    if cap is not None and counts.by_rig.get(a.rig, 0) >= cap:
        reasons.append(
            Reason(RIG_CAP, f"rig {a.rig} runs {counts.by_rig.get(a.rig, 0)} of its {cap} polecats")
        )
    for label in sorted(a.labels):
        cap = limits.label_caps.get(label)
        if cap is not None and counts.by_label.get(label, 0) >= cap:
            reasons.append(
                Reason(LABEL_CAP, f"label {label}: {counts.by_label.get(label, 0)} of {cap} polecats")
            )
    if limits.town_budget > 0 and counts.town_spend + a.tokens > limits.town_budget:
        reasons.append(
            Reason(
                BUDGET,
                f"town budget: {counts.town_spend} of {limits.town_budget} tokens spent"
                f" in the window, this item needs {a.tokens}",
            )
        )
    rig_budget = limits.rig_budgets.get(a.rig, 0)
    if rig_budget > 0 and counts.rig_spend.get(a.rig, 0) + a.tokens > rig_budget:
        reasons.append(
            Reason(
                BUDGET,
                f"rig {a.rig} budget: {counts.rig_spend.get(a.rig, 0)} of {rig_budget}"
                f" tokens spent in the window, this item needs {a.tokens}",
            )
        )
    if a.touches:
        for other_id, other_touches in counts.touching.get(a.rig, ()):
            if touches_overlap(a.touches, other_touches):
                reasons.append(Reason(OVERLAP, f"touches overlap {other_id} in rig {a.rig}"))
                break
    return reasons


def admit(
    applicants: Sequence[Applicant],
    running: Sequence[Running],
    limits: Limits,
    *,
    spend: Spend | None = None,
    throttles: Sequence[Throttle] = (),
    gates: Sequence[Reason] = (),
    now: float,
) -> Admission:
    """Plan one cycle over ``applicants`` (already in rank order); see the module docstring.

    The plan's ``reason`` is Gas Town's (``none``, ``capacity``, ``batch``,
    ``ready``) whenever the town cap or the batch decided it, and otherwise
    the first code that held the best-ranked applicant left out; with
    ``gates`` (town-wide reasons, e.g. a hold file) nothing is planned and the
    reason is the first gate's code.
    """
    walk = _Walk(running, limits, spend, throttles, gates, now)
    walk.take(applicants)
    return Admission(tuple(walk.planned), walk.held, walk.reason(bool(applicants)))


#: What admission reads of an applicant besides its place in the ranking: (rig, labels, tokens, touches).
Shape = tuple[str, frozenset[str], int, tuple[str, ...]]


def shape_of(a: Applicant) -> Shape:
    return (a.rig, a.labels, a.tokens, a.touches)


@frozen
class Tally:
    """:func:`admit` over a whole ranking told as its head and the shapes of the rest: the plan, how
    many applicants it holds and by which codes (each applicant's codes counted once), its reason, and
    the reasons of each applicant of the head it holds (by key), as :func:`admit` gives them."""

    to_dispatch: tuple[Applicant, ...]
    skipped: int
    why: Mapping[str, int]
    reason: str
    held: Mapping[str, tuple[Reason, ...]] = field(default_factory=dict)


def admit_head(
    head: Sequence[Applicant],
    rest: Mapping[Shape, int],
    running: Sequence[Running],
    limits: Limits,
    *,
    spend: Spend | None = None,
    throttles: Sequence[Throttle] = (),
    gates: Sequence[Reason] = (),
    now: float,
) -> Tally | None:
    """:func:`admit` of ``head`` followed by the applicants counted in ``rest`` (by shape, in an order
    not known), told as a :class:`Tally`; None when the rest's order would matter.

    Once the plan is full the counters stop moving, so every later
    applicant is held for reasons its shape alone decides: a cycle that
    knows the head of a long queue in rank order and only the shapes of the
    rest plans and counts exactly as over the whole ranking.  So do they
    when the plan is left short (a binding rig or label cap, a budget, a
    throttle) but every shape of the rest is held by a rule: none of it can
    be planned, so the counters stop moving all the same.  The order
    matters, and None is returned, when the plan is not full after the head
    and a shape of the rest is held by no rule (a later applicant would be
    planned), or when no applicant of the head was held by a rule but two
    shapes of the rest are held by rules with different first codes (which
    one ranks first names the reason).
    """
    walk = _Walk(running, limits, spend, throttles, gates, now)
    walk.take(head)
    why = Counter(code for reasons in walk.held.values() for code in dict.fromkeys(r.code for r in reasons))
    waiting = sum(n for n in rest.values() if n > 0)
    full = len(walk.planned) >= walk.slots
    firsts: set[str] = set()
    for (rig, labels, tokens, touches), n in rest.items():
        if n <= 0:
            continue
        known = _rule_reasons(Applicant("", "", rig, tokens, labels, touches), limits, walk.counts, walk.live)
        if known:
            firsts.add(known[0].code)
        elif not full:
            return None  # a plan left short could still take works of this shape: their order decides
        else:
            walk.admissible += n
        reasons = [*walk.gates, *known] + ([walk.full] if full and not walk.gates else [])
        why.update(dict.fromkeys((r.code for r in reasons), n))
    if walk.first_rule is None and firsts:
        if len(firsts) > 1 and walk.reads_first_rule():
            return None
        walk.first_rule = min(firsts)  # read only when all agree (else the reason does not read it)
    reason = walk.reason(bool(head) or waiting > 0)
    return Tally(tuple(walk.planned), len(walk.held) + waiting, why, reason, dict(walk.held))


class _Walk:
    """One pass of admission down a ranking: the plan so far, who is held and why, the counters."""

    def __init__(self, running: Sequence[Running], limits: Limits, spend: Spend | None,
                 throttles: Sequence[Throttle], gates: Sequence[Reason], now: float):
        if limits.batch < 1:
            plan_dispatch(0, limits.batch, ())  # raises the config error with its message
        self.limits, self.gates = limits, tuple(gates)
        self.live = [t for t in throttles if t.until > now]
        self.counts = _Counters(running, spend or Spend())
        self.slots = 0 if gates else max(0, min(limits.capacity, limits.batch))
        self.full = (
            Reason(CAPACITY, f"no free polecat slot ({limits.capacity} free)")
            if limits.capacity < limits.batch
            else Reason(BATCH, f"ranked below this cycle's batch of {limits.batch}")
        )
        self.planned: list[Applicant] = []
        self.held: dict[str, tuple[Reason, ...]] = {}
        self.admissible = 0
        self.first_rule: str | None = None

    def take(self, applicants: Iterable[Applicant]) -> None:
        limits, counts, live, gates = self.limits, self.counts, self.live, self.gates
        planned, held = self.planned, self.held
        # The reasons depend only on (rig, labels, tokens, touches) and on the counters, which change
        # only when something is planned: remember them per shape until then (10,000 queued contexts
        # come in a few hundred shapes).
        memo: dict[Shape, list[Reason]] = {}
        for a in applicants:
            shape = shape_of(a)
            known = memo.get(shape)
            if known is None:
                known = memo[shape] = _rule_reasons(a, limits, counts, live)
            reasons = [*gates, *known]
            if not known:
                self.admissible += 1
                if len(planned) < self.slots:
                    planned.append(a)
                    counts.plan(a)
                    memo.clear()
                    continue
            elif self.first_rule is None:
                self.first_rule = known[0].code
            if len(planned) >= self.slots and not gates:
                reasons.append(self.full)
            held[a.key] = tuple(reasons)

    def reads_first_rule(self) -> bool:
        """Whether :meth:`reason` names the first rule that held an applicant (rather than a gate, the
        town's capacity or the plan's own reason)."""
        return not self.gates and self.limits.capacity > 0 and self.admissible <= len(self.planned)

    def reason(self, any_applicant: bool) -> str:
        limits = self.limits
        if not any_applicant:
            return REASON_NONE
        if self.gates:
            return self.gates[0].code
        if limits.capacity <= 0:
            return REASON_CAPACITY
        if self.admissible > len(self.planned) or self.first_rule is None:
            return plan_dispatch(limits.capacity, limits.batch, range(self.admissible)).reason
        return self.first_rule
