"""The head of a long queue and its exact counts, without surveying every context.

:func:`~sluice.scheduler.queue.pending.survey` reads every open context and its
item; at 100,000 queued that is seconds, although a view shows 50 rows and a
cycle launches 20.  :func:`read_head` answers the same (the same rows in the
same order, the same counts, the same admission of what is shown) from:

* the counts of the *plain* contexts by group — target rig, ready / blocked /
  stale, priority, tokens, labels, touches — one SQL join of the town
  database with each rig's item index (:mod:`sluice.store.database.queue`);
* a survey of the few contexts that are not plain (a failure, a launch
  intent, a missing item, a force, a promotion) and of those whose item a
  polecat is running;
* one score per group, as ``schedule next`` ranks a whole ready set
  (:mod:`sluice.scheduler.queue.ranking`): inside a group every context scores
  alike and is ordered by (enqueued_at, item id), so rows are read only from
  the groups that reach the head, in tiers of equal (score, tokens);
* admission of the head with the rest counted by shape
  (:func:`sluice.core.admission.admit_head`): once the plan is full nothing
  later can change it, and the head grows until that is so.

It answers None, and the caller surveys, whenever the grouping would not be
exact or cheap: a policy that scores each context apart (aging, deadlines,
graph weights), a rig that cannot be read or has no index on disk, rig
prefixes that nest, more rigs than SQLite attaches at once, an item found in
no rig's index or found as a context, or thousands of contexts that are not
plain.  The tests check that both ways answer alike.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from sluice.core import admission as rules
from sluice.core.items import priority_of
from sluice.core.recordclass import field, recordclass
from sluice.core.scoring import Candidate, Scored, deadline_enabled, rank_order, score_all
from sluice.errors import StoreCorrupt
from sluice.scheduler.launch.admission import Assessment, applicant, limits, needs_spend, running
from sluice.scheduler.launch.polecats import retry_window
from sluice.scheduler.queue.pending import Stale, Survey, survey
from sluice.scheduler.queue.ranking import Work, has_graph_weights, in_tiers, load_town_policy, tier_rows
from sluice.scheduler.queue.signals import Signals
from sluice.store.database import admission_state as kept
from sluice.store.database import contexts as ctxs
from sluice.store.database import queue as sql
from sluice.store.database.state import load_state

if TYPE_CHECKING:
    from sluice.scheduler.launch.gates import Gates
    from sluice.scheduler.session import Session
    from sluice.store.database.contexts import Context

#: More open contexts than this that are not plain, and the survey reads the queue instead.
UNUSUAL_MAX = 2000
#: Ready works admitted at first; doubled while the rest's order could still change the plan.
HEAD_MIN = 64


@recordclass
class Head:
    """A survey cut to its head, with the whole queue's counts."""

    view: Survey  # ready and blocked: the first of each, ranked; the other lists whole (stale: every one)
    ready_total: int  # ready works in the queue (not backing off)
    blocked_total: int
    stale_total: int
    rigs: dict[str, list[int]] = field(default_factory=dict)  # target rig → [ready, blocked] (as QueueCounts)
    registered: set[str] = field(default_factory=set)
    surveyed: set[str] = field(default_factory=set)  # context ids of the works the survey read
    assessment: Assessment | None = None
    tally: rules.Tally | None = None  # the admission of the whole ready queue, told by counts
    order: Order | None = None  # the whole queue in order, when asked for (read_order)


class _Entry:
    """One scored group: plain contexts read from SQL, or one work of the survey of the others."""

    def __init__(self, rig: str, priority: int, tokens: int, count: int,
                 rows: Callable[[int], list[tuple[str, str]]], work: Work | None = None,
                 group: sql.Group | None = None):
        self.rig, self.priority, self.tokens, self.count = rig, priority, tokens, count
        self.rows, self.work, self.group = rows, work, group


def groupable(policy) -> bool:
    """Whether every context of a group scores alike under ``policy``."""
    return (float(getattr(policy, "aging", 0.0) or 0.0) <= 0 and not deadline_enabled(policy)
            and not has_graph_weights(policy))


def read_head(session: Session, rows: int, gates: Gates | None = None,
              batch: int | None = None, order: bool = False, fill: bool = True) -> Head | None:
    """The queue's first ``rows`` entries (ready, then blocked), its counts and its admission (a cycle of
    ``batch``, default the town's), with the whole order when asked for; None: survey instead.

    One call's views share one reading: a head read for at least as many
    rows (and with the order, when that is asked for) is the answer again.
    ``fill`` False (a dry run, which writes nothing): contexts whose item
    facts are not copied yet send the read to the survey instead.
    """
    key = (gates is None, batch)
    if session.head is not None:
        kept_key, kept_rows, kept_order, kept_head = session.head
        if kept_key == key and kept_rows >= rows and (kept_order or not order):
            return kept_head
    rows, order = max(rows, session.head_rows), order or session.head_rows > 0
    head = _read_head(session, rows, gates, batch, order, fill)
    session.head = (key, rows, order, head)
    return head


def _read_head(session: Session, rows: int, gates: Gates | None, batch: int | None, order: bool,
               fill: bool) -> Head | None:
    town, stores, now, config = session.files, session.stores, session.now, session.config
    policy = load_town_policy(town)
    if not groupable(policy):
        return None
    rigs = town.rigs()
    prefixes = sorted(rig.prefix for rig in rigs)
    if any(not p for p in prefixes) or _nested(prefixes):
        return None
    tags = []
    for store in stores.all():
        try:
            store.index.conn()
        except (StoreCorrupt, OSError):  # the survey holds the rig and says why
            return None
        if not store.index.on_disk:
            return None
        # Each rig's plain contexts carry its items' facts as its index has them now.
        version = store.index.facts_version
        if not sql.refresh(town, store.rig.name, store.rig.prefix, store.index.db_path, version, fill):
            return None
        tags.append(sql.facts_tag(store.rig.name, version))
    active = session.active or []
    busy = sorted({p.item_id for p in active if p.item_id})
    sched = config.scheduler
    with sql.reading(town) as rd:
        if rd.unfilled(tags):
            return None  # an item no rig's prefix routes (its rig removed, or never there): the survey
        unusual = rd.unusual()
        if len(unusual) > UNUSUAL_MAX:
            return None
        seen = {c.id for c in unusual}
        busy_plain = [c for c in _open_contexts(town, busy).values() if c.id not in seen]
        view = survey(town, stores, sched.max_dispatch_failures, active, session.find, now=now,
                      backoff=retry_window(sched), contexts=unusual + busy_plain)
        if view.unreadable:
            return None
        groups, odd = rd.groups(now, busy)
        if odd:
            return None  # an item missing from its rig's index, or itself a context: the survey decides
        head = _counted(view, groups, {rig.name for rig in rigs})
        live = [g for g in groups if g.target_rig in head.registered]  # the others close next cycle
        signals = Signals(town, stores)
        read = partial(_built, session, signals)
        want_ready = max(rows, HEAD_MIN)
        ready, blocked = view.ready, view.blocked
        head.surveyed = {w.context_id for w in ready + blocked}
        ready_tiers = _tiers(session, policy, signals, rd, busy, live, ready, sql.READY)
        while True:
            view.ready = _first(read, *ready_tiers, want_ready)
            head.assessment, head.tally = _admitted(session, head, live, gates, batch)
            if head.tally is not None or len(view.ready) >= head.ready_total:
                break
            want_ready *= 4
        need_blocked = rows - head.ready_total - len(view.backing_off)
        blocked_tiers = _tiers(session, policy, signals, rd, busy, live, blocked, sql.BLOCKED)
        view.blocked = _first(read, *blocked_tiers, need_blocked) if need_blocked > 0 else []
        if order:
            head.order = Order(head, _segments(*ready_tiers, len(view.ready)),
                               _segments(*blocked_tiers, len(view.blocked)))
        stale = any(g.klass == sql.STALE for g in groups)
        unknown = {g.target_rig for g in groups if g.target_rig not in head.registered}
        if stale or unknown:  # the plain ones the next cycle closes join the survey's, as a survey has them
            view.stale += _stale_plain(session, rd, stale, unknown, busy)
    return head


def _nested(prefixes: list[str]) -> bool:
    """Whether one rig prefix routes ids another one also matches (``ab`` and ``ab-c``)."""
    return any(b.startswith(f"{a}-") for a in prefixes for b in prefixes if a != b)


def _counted(view: Survey, groups: list[sql.Group], registered: set[str]) -> Head:
    """The whole queue's counts: the plain groups' and the surveyed contexts'."""
    head = Head(view, len(view.ready), len(view.blocked), len(view.stale), registered=registered)
    counts = view.rig_counts()
    for g in groups:
        if g.target_rig not in registered or g.klass == sql.STALE:
            head.stale_total += g.count
        elif g.klass == sql.READY:
            head.ready_total += g.count
            counts.setdefault(g.target_rig, [0, 0])[0] += g.count
        else:
            head.blocked_total += g.count
            counts.setdefault(g.target_rig, [0, 0])[1] += g.count
    head.rigs = counts
    return head


def _built(session: Session, signals: Signals, keyed: list[tuple[str, str, Scored]]) -> list[Work]:
    """Works for item ids of plain contexts: their contexts and records, read for those ids only."""
    ids = [item_id for _order, item_id, _s in keyed]
    contexts, found = _open_contexts(session.files, ids), session.stores.find_many(ids)
    out = []
    for order, item_id, s in keyed:
        context, record = contexts[item_id], found[item_id][1]
        out.append(Work(item=record, rig=context.fields.target_rig, order=order, context_id=context.id,
                        payload=context, tokens=s.candidate.tokens, score=s.score, reasons=s.reasons,
                        pressured=s.pressured, graph_id=signals.graphs.of_record(record)))
    return out


def _tiers(session: Session, policy, signals: Signals, rd: sql.Reading, busy: list[str],
           groups: list[sql.Group], surveyed: list[Work], klass: int
           ) -> tuple[list[tuple[Work, Scored]], list[list[Scored]]]:
    """One class (ready or blocked) in rank order, as rank_work orders it: the promoted surveyed works
    (oldest promotion first), then tiers of groups and surveyed works of equal (score, tokens), inside
    which contexts interleave by (enqueued_at, item id)."""
    entries = [_Entry(g.target_rig, g.priority, g.tokens, g.count, partial(rd.rows, g, session.now, busy),
                      group=g) for g in groups if g.klass == klass]
    entries += [_Entry(w.rig, priority_of(w.item), w.tokens or 0, 1,
                       lambda n, w=w: [(w.order, w.item["id"])][:n], w) for w in surveyed]
    if not entries:
        return [], []
    reps = [Candidate(str(n), e.priority, e.tokens, e.rig, "", None, e) for n, e in enumerate(entries)]
    scored = score_all(reps, policy, **signals.scoring_inputs({e.rig for e in entries}))

    def promoted_work(s: Scored) -> Work | None:
        work = s.candidate.payload.work
        return work if work is not None and work.promoted_at else None

    promoted = sorted(((promoted_work(s), s) for s in scored if promoted_work(s) is not None),
                      key=lambda ws: (ws[0].promoted_at, *rank_order(ws[1].score, ws[0].tokens or 0,
                                                                      ws[0].order, ws[0].item["id"])))
    return promoted, in_tiers(s for s in scored if promoted_work(s) is None)  # type: ignore[return-value]


def _first(read, promoted: list[tuple[Work, Scored]], tiers: list[list[Scored]], want: int) -> list[Work]:
    """The first ``want`` works of :func:`_tiers`' order, each built (its context and item read)."""
    out = [_scored_work(work, s) for work, s in promoted[:want]]
    for tier in tiers:
        if len(out) >= want:
            break
        chosen = tier_rows(tier, want - len(out))[:want - len(out)]
        plain = [row for row in chosen if row[2].candidate.payload.work is None]
        built = {w.item["id"]: w for w in read(plain)} if plain else {}
        for _order, item_id, s in chosen:
            work = s.candidate.payload.work
            out.append(_scored_work(work, s) if work is not None else built[item_id])
    return out


def _segments(promoted: list[tuple[Work, Scored]], tiers: list[list[Scored]], skip: int) -> list[tuple]:
    """:func:`_tiers`' order past its first ``skip`` works, as segments: ``(work, None, 1)`` for a
    surveyed work, ``(None, group, n)`` for ``n`` plain contexts of one group in a row (their ids
    unread).  A tier of one group is one stretch; a tier of several is read row by row (its contexts
    interleave by age) and told as the stretches it makes."""
    out: list[tuple] = [(_scored_work(work, s), None, 1) for work, s in promoted[skip:]]
    position = len(promoted)
    for tier in tiers:
        size = sum(s.candidate.payload.count for s in tier)
        taken = min(size, max(0, skip - position))
        position += size
        if taken == size:
            continue
        if len(tier) == 1 and tier[0].candidate.payload.work is None:
            out.append((None, tier[0].candidate.payload.group, size - taken))
            continue
        for _order, _item_id, s in tier_rows(tier, size)[taken:]:
            entry = s.candidate.payload
            if entry.work is not None:
                out.append((_scored_work(entry.work, s), None, 1))
            elif out and out[-1][0] is None and out[-1][1] is entry.group:
                out[-1] = (None, entry.group, out[-1][2] + 1)
            else:
                out.append((None, entry.group, 1))
    return out


@recordclass
class Order:
    """The whole queue in order, its first works built and the rest as segments (:func:`read_order`)."""

    head: Head
    ready: list[tuple]  # segments of the ready works past head.view.ready
    blocked: list[tuple]  # segments of the blocked works past head.view.blocked


def read_order(session: Session, concrete: int) -> Order | None:
    """The queue in order, as the forecast replays it: its first ``concrete`` works built, the rest told
    as segments; None: survey instead."""
    head = read_head(session, concrete, order=True)
    return head.order if head is not None else None


def _scored_work(work: Work, s: Scored) -> Work:
    work.score, work.reasons, work.pressured = s.score, s.reasons, s.pressured
    return work


def _admitted(session: Session, head: Head, groups, gates: Gates | None, batch: int | None
              ) -> tuple[Assessment, rules.Tally | None]:
    """Admission of the head's ready works, with the rest of the ready queue counted by shape."""
    from sluice.scheduler.launch import gates as gate_view

    town, config, stores, now = session.files, session.config, session.stores, session.now
    view = head.view
    active = session.active or []
    gates = gate_view.current(town) if gates is None else gates
    window = config.scheduler.seconds("budget_window")
    spend = kept.spend(town, now, window) if needs_spend(config) else rules.Spend()
    throttles = kept.throttles(town, now)
    caps = limits(config, len(active), batch or config.scheduler.batch_size)
    applicants = [applicant(w) for w in view.ready]
    rest: dict[rules.Shape, int] = {}
    for g in groups:
        if g.klass == sql.READY:
            shape = (g.target_rig, g.label_set, g.tokens, g.touch_list)
            rest[shape] = rest.get(shape, 0) + g.count
    for a in applicants:
        if a.key not in head.surveyed:  # a plain context: counted in its group
            rest[rules.shape_of(a)] -= 1
    tally = rules.admit_head(applicants, rest, running(stores, active), caps, spend=spend,
                             throttles=throttles, gates=gates.reasons, now=now)
    state = load_state(town)
    plan = rules.Admission(tally.to_dispatch, tally.held, tally.reason) if tally is not None \
        else rules.Admission((), {}, rules.REASON_NONE)
    assessment = Assessment(view, plan, caps, spend, throttles, state.paused, config.scheduler.deferred, now,
                            gates=gates, paused_by=state.paused_by, applicants=applicants)
    assessment.planned_keys = {a.key for a in plan.to_dispatch}
    if tally is not None and not _binding_shown(assessment, tally, head):
        return assessment, None
    return assessment, tally


def _binding_shown(assessment: Assessment, tally: rules.Tally, head: Head) -> bool:
    """Whether the limit the plan names holds an applicant of the head (whose reason is then told)."""
    code = tally.reason
    if code in (rules.REASON_NONE, "ready", "capacity", "batch") or len(head.view.ready) >= head.ready_total:
        return True
    return any(r.code == code for reasons in tally.held.values() for r in reasons)


def _open_contexts(town, item_ids: list[str]) -> dict[str, Context]:
    """The open context of each of ``item_ids`` that has one (one per item, the database's rule)."""
    return {item: found[0] for item, found in ctxs.open_of_items(town, item_ids).items()}


def _stale_plain(session: Session, rd: sql.Reading, stale: bool, unknown: set[str], busy: list[str]
                 ) -> list[Stale]:
    """The plain contexts the next cycle closes, as the survey names them: aimed at a rig no longer
    registered, or whose item ended (or is hooked)."""
    found: dict[str, tuple[str, str | None]] = {}  # context id → (item, its status; None: unknown rig)
    for cid, item in rd.of_rigs(unknown):
        found[cid] = (item, None)
    if stale:
        ended = [(cid, item) for cid, item in rd.stale(busy) if cid not in found]
        records = session.stores.find_many(item for _cid, item in ended)
        for cid, item in ended:
            found[cid] = (item, records[item][1].get("status", "open"))
    contexts = _open_contexts(session.files, [item for item, _status in found.values()])
    out = []
    for item, status in found.values():
        context = contexts[item]
        if status is None:
            detail = f"target rig {context.fields.target_rig!r} is unknown"
            out.append(Stale(context, ctxs.INVALID_CONTEXT, detail))
        else:
            out.append(Stale(context, ctxs.STALE_WORK_ITEM, f"item is {status}"))
    return out
