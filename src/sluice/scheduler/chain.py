"""What a dispatch cycle leaves for the next one: the queue's head, changed since only by its own lines.

A cycle over a long queue used to survey all of it before its first
launch (about two seconds at 100,000 queued contexts), and the next cycle
surveyed it all again although the only change was the cycle's own: the
launch marks and closes of the contexts it launched.  So a cycle that
surveyed, or took its queue from a chain, leaves in
``runtime/queue-chain.json``:

* **the head of the ready queue**: its first :data:`HEAD_WORKS` works in
  rank order, and for every kind of work (rig, graph, priority, tokens:
  what the score depends on) at least its oldest one, each with its item
  and its context as read, and where the context's latest line starts;
* **the counts**: ready works per kind and per admission shape (rig,
  labels, tokens, touches), backing-off works, and the queue's works per
  target rig (ready or backing off, blocked), as ``scheduler status``
  counts them;
* **what it stands on**: the signature of every file the survey reads that
  no cycle writes (the config, the policy, each rig's items file), each
  rig's ephemeral log at the mark the cycle left it, the items of the
  running polecats (none of them queued), and the first moment the clock
  alone would change the survey (a backoff or a deferral ending; never more
  than :data:`KEEP_AT_MOST`, an hour, after the survey);
* **what it has seen**: the CRC-32s of every record id in each rig's log
  and of every queued item (:class:`~sluice.scheduler.chaintail.Seen`),
  which tell a line appended later that holds a new record from one that
  changes a record the queue knew;
* **every queued context** with its item and the count it is in
  (:class:`~sluice.scheduler.chainqueue.Queued`), so a close appended
  later is taken out of the right count.

The next cycle, holding the dispatch lock, takes the chain instead of a
survey when all of that still holds: every log ends exactly at its mark,
or continues from it with lines that are each a new open sling context (a
sling's own append) or a closed context (a clear's):
:mod:`sluice.scheduler.chaintail` reads only those lines and folds each
new context in as a survey would count and rank it, and each close out,
or gives up; the signed files are as they were, every running polecat's
item is one the chain knows is not queued, and the clock is inside the
horizon.  Taking a chain writes nothing; the cycle then leaves a chain
whose marks are past the folded lines and whose ids seen hold theirs.  It then
ranks the head again with the signals as they are now (warmth, merge
queues, fairness move with every launch, and change the order of kinds,
never the order inside one), walks it only as far as no work outside the
head could rank before it, and admits that walk followed by the counted
rest (:func:`sluice.core.admission.admit_head`), which plans and counts
exactly as admission over the whole queue.  Whatever it cannot be sure of
— the walk ran out before the plan was full, a kind's kept works ran out,
a rule's first code depends on an order not kept — it surveys, as before.

``scheduler status`` takes a chain the same way, read-only, for the
queue's first rows and counts after a cycle
(:func:`sluice.scheduler.queue._chain_page`).

Crash safety: the chain is written by rename after the cycle's last write
and never fsynced.  A cycle killed before writing it leaves the old chain,
whose marks the killed cycle's own lines (a launch intent, a close) no
longer fit, or a cut file, which is no chain: the next cycle surveys, and
the survey settles any interrupted launch as before.  A chain is only
written when every launch the cycle planned was made and closed, and when
each rig's store saw no line but its own after its mark
(:meth:`~sluice.store.rigstore.RigStore.own_mark`, taken past any lines the
cycle folded in); a promotion, a requeue that backs off or any other
change of an open record by anyone (this cycle's own settling of ended
runs included) moves a log past its mark with a line no chain folds, and
so costs the next cycle one survey.  A sling of items not queued, or a
clear, costs none.
Not chained at all: policy aging or deadlines (the answer moves with the
clock), token budgets, rigs fed by a command, promoted work, and a survey
that found anything to tidy (stale, held, duplicate or mid-launch contexts).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections import Counter
from typing import TYPE_CHECKING

from sluice.core.admission import admit_head, shape_of
from sluice.core.clock import order_text
from sluice.core.items import priority_of
from sluice.core.recordclass import recordclass
from sluice.core.records import SlingContextFields
from sluice.core.scoring import rank_order
from sluice.errors import SluiceError
from sluice.scheduler.chainqueue import BACKING_OFF, BLOCKED, Queued, ready_bucket, shape_of_row
from sluice.scheduler.chaintail import MAX_SEEN, Fold, Seen, fold, seen_at_survey, tail_after
from sluice.store import fsutil
from sluice.store.contexts import Context

if TYPE_CHECKING:
    from sluice.core.admission import Tally
    from sluice.scheduler.pending import Survey
    from sluice.scheduler.ranking import Work
    from sluice.scheduler.session import Session
    from sluice.store.town import Town

FILE = "queue-chain.json"
VERSION = 4
#: Ready works kept in rank order: at 20 launches a cycle, 50 cycles before the head runs out.
HEAD_WORKS = 1000
#: More kinds of work than this and a chain would cost what a survey costs: none is kept.
MAX_KINDS = 2000
#: Seconds a chain stands at most after the survey it comes from.  The horizon names every change the
#: clock alone makes to a survey that may be chained; this bounds what it would miss all the same, and
#: is long enough for a daemon at its default interval (180 s) to chain many ticks.
KEEP_AT_MOST = 3600.0

Kind = tuple[str, str | None, int, int]


@recordclass
class Head:
    """The queue as a cycle took it from a chain: the plan's tally, and the chain for the next one (its
    works ranked now, its counts by kind and by shape read back)."""

    tally: Tally
    data: dict
    #: How many of ``data["works"]`` (ranked now) stand where a survey would rank them: every work
    #: outside the chain ranks after them, so they are the queue's first ``walked`` ready works.
    walked: int = 0


def _kind(work: Work) -> Kind:
    return (work.rig, work.graph_id, priority_of(work.item), int(work.tokens or 0))


def _fixed(session: Session) -> list | None:
    """The signature of what a survey reads that no cycle writes; None: no chain may stand on it."""
    from sluice.core.scoring import deadline_enabled
    from sluice.scheduler.admission import needs_spend
    from sluice.scheduler.ranking import load_town_policy

    town, config = session.files, session.config
    policy = load_town_policy(town)
    if float(getattr(policy, "aging", 0.0) or 0.0) > 0 or deadline_enabled(policy) or needs_spend(config):
        return None
    files = [town.policy_path]
    names = []
    for rig in town.rigs():
        if rig.command is not None:
            return None
        names.append(rig.name)
        files.append(town.rig_files(rig)[1])
    return [VERSION, names, session.config_signature, [fsutil.file_signature(f) for f in files]]


def before_survey(session: Session) -> dict | None:
    """What a chain from the survey about to be made would stand on, taken before it reads anything:
    the signed files, and the rigs with no log yet.  None: no chain may be left."""
    fixed = _fixed(session)
    if fixed is None:
        return None
    town = session.files
    absent = [rig.name for rig in town.rigs() if not town.rig_files(rig)[0].exists()]
    return {"fixed": fixed, "absent": absent}


def _log_mark(session: Session, rig: str, absent: list[str]) -> dict | str | None:
    """Where ``rig``'s log stands as this process's stores left it, with its modification time; "absent"
    when it had no log when the queue was read and has none now; None: not known to be only ours."""
    store = session.stores.rig(rig)
    mark = store.own_mark()
    if mark is None:
        return "absent" if rig in absent and not store.ephemeral_path.exists() else None
    try:
        stat = os.stat(store.ephemeral_path)
    except OSError:
        return None
    if stat.st_ino != mark["inode"] or stat.st_size != mark["offset"]:
        return None  # a line after the cycle's last one: not only ours
    return {**mark, "mtime": stat.st_mtime_ns}


def _horizon(session: Session, view: Survey) -> float:
    from sluice.scheduler.polecats import retry_epoch, retry_window

    now = session.now
    retry = retry_window(session.config.scheduler)
    ends = [now + KEEP_AT_MOST]
    ends += [at for work in view.backing_off if (at := retry_epoch(work.payload.fields, *retry)) is not None]
    for store in session.stores.all():
        try:
            ends.append(store.next_release(now))
        except (SluiceError, OSError):
            return now
    return min(e for e in ends if not math.isnan(e))


# -- leaving a chain -----------------------------------------------------------------------------


def from_survey(session: Session, before: dict | None, view: Survey, applicants: list) -> dict | None:
    """The chain a cycle that surveyed may leave, before its launches; None: the survey cannot be kept.

    ``before`` is :func:`before_survey`, taken before the survey read anything: a file that changed
    while it read has another signature now, and nothing is kept.
    """
    if before is None or _fixed(session) != before["fixed"]:
        return None
    if (view.stale or view.held or view.duplicates or view.reappeared or view.launched or view.relaunch
            or view.unreadable):
        return None
    if any(w.promoted_at for w in view.ready):
        return None
    if session.active is None:
        return None
    running = {p.item_id for p in session.active}
    if running and any(w.item["id"] in running for w in (*view.ready, *view.blocked, *view.backing_off)):
        return None  # a polecat's end would make its queued item ready: nothing the chain can see
    kinds: Counter = Counter()
    kept = []
    kind_of = [_kind(work) for work in view.ready]
    for position, work in enumerate(view.ready):
        kind = kind_of[position]
        if position < HEAD_WORKS or kind not in kinds:  # the head, and each kind's oldest work for its score
            kept.append(work)
        kinds[kind] += 1
    if len(kinds) > MAX_KINDS or len(applicants) != len(view.ready):
        return None
    shape_list = [shape_of(a) for a in applicants]  # admission's reading of view.ready
    shapes = Counter(shape_list)
    rigs: dict[str, list[int]] = {}  # rig → [ready or backing off, blocked], as the queue counts them
    for works, blocked in ((view.ready, 0), (view.backing_off, 0), (view.blocked, 1)):
        for work in works:
            rigs.setdefault(work.rig, [0, 0])[blocked] += 1
    return {"version": VERSION, "made_at": session.now, "until": _horizon(session, view),
            "fixed": before["fixed"], "absent": before["absent"], "running": sorted(running),
            "backing_off": len(view.backing_off), "ready": len(view.ready), "rigs": rigs,
            "kinds": kinds, "shapes": shapes, "works": kept, "seen": seen_at_survey(session, view),
            "queued": Queued.of_survey(view, kind_of, shape_list)}


def forget(town: Town) -> None:
    """Remove the chain: after a compaction, whose new log may take the old one's inode (its marks could
    then seem to fit a file they never described)."""
    with contextlib.suppress(OSError):
        (town.runtime / FILE).unlink(missing_ok=True)


def leave(session: Session, base: dict | None, launched: list[str], complete: bool) -> None:
    """After the launches: write the chain ``base`` minus the ``launched`` context ids, when it may stand.

    ``complete``: every planned launch was made and its context closed.
    Otherwise (or when a rig's log saw another writer's line, or a kind
    would be left without a kept work) the old chain is removed, so the
    next cycle surveys.
    """
    path = session.files.runtime / FILE
    data = _next(session, base, launched) if base is not None and complete else None
    if data is None:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        return
    fsutil.write_cache(path, json.dumps(data, separators=(",", ":")).encode("utf-8"))


def _next(session: Session, base: dict, launched: list[str]) -> dict | None:
    from sluice.scheduler.admission import applicant

    gone = set(launched)
    if not gone <= {w.context_id for w in base["works"]}:
        return None  # a launch from beyond the kept works: the counts could not follow it
    kinds: Counter = Counter(base["kinds"])
    shapes: Counter = Counter(base["shapes"])
    rigs = {rig: list(counts) for rig, counts in base["rigs"].items()}
    works = []
    queued: Queued | None = base.get("queued")
    for work in base["works"]:
        if work.context_id in gone:
            kinds[_kind(work)] -= 1
            shapes[shape_of(applicant(work))] -= 1
            rigs[work.rig][0] -= 1
            if queued is not None and queued.remove(work.payload.rig, work.context_id) is None:
                queued = None  # not as the counts say: no close is folded past this chain
        else:
            works.append(work)
    kinds = +kinds
    shapes = +shapes
    if {_kind(w) for w in works} != set(kinds):
        return None  # a kind left with no kept work: its score could not be asked
    marks = {}
    for rig in session.files.rigs():
        mark = _log_mark(session, rig.name, base["absent"])
        if mark is None:
            return None
        marks[rig.name] = mark
    running = {p.item_id for p in session.require_active()} | {w.item["id"] for w in base["works"]
                                                                if w.context_id in gone}
    offsets = _offsets(session, works)
    if offsets is None:
        return None
    return {"version": VERSION, "made_at": base["made_at"], "until": base["until"], "fixed": base["fixed"],
            "absent": [rig for rig, mark in marks.items() if mark == "absent"], "marks": marks,
            "running": sorted(running), "backing_off": base["backing_off"],
            "ready": base["ready"] - len(gone),
            "rigs": {rig: counts for rig, counts in rigs.items() if counts != [0, 0]},
            "kinds": [[*k, n] for k, n in kinds.items()],
            "shapes": [[s[0], sorted(s[1]), s[2], list(s[3]), n] for s, n in shapes.items()],
            "works": [_work_row(w, offsets[w.context_id]) for w in works], "seen": _seen_row(base["seen"]),
            "queued": queued.to_json() if queued is not None else None}


def _seen_row(seen: Seen | dict | None) -> dict | None:
    """What the next chain keeps of the ids and items seen: a taken chain's as it was read, or with the
    lines folded into it (none once it holds more than :data:`~sluice.scheduler.chaintail.MAX_SEEN`:
    no line is folded then)."""
    if isinstance(seen, Seen):
        return None if len(seen) > MAX_SEEN else seen.to_json()
    return seen


def _offsets(session: Session, works: list[Work]) -> dict[str, int] | None:
    out = {}
    for work in works:
        store = session.stores.rig(work.payload.rig)
        at = store.known_offset(work.context_id)
        if at is None:
            return None
        out[work.context_id] = at
    return out


def _work_row(work: Work, offset: int) -> list:
    context = work.payload
    return [context.id, context.rig, context.fields.to_compact(), offset, work.item, work.rig,
            work.tokens]


# -- taking a chain ------------------------------------------------------------------------------


def take(session: Session, batch: int, gates) -> Head | None:
    """The next cycle's queue from the chain a cycle left, when it still stands; None: survey."""
    try:
        data = json.loads((session.files.runtime / FILE).read_bytes())
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return None
        return _take(session, data, batch, gates)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None  # no chain, or not one as written: survey


def _take(session: Session, data: dict, batch: int, gates) -> Head | None:
    from sluice.scheduler.admission import applicant, limits, running
    from sluice.scheduler.ranking import Work, rank_work
    from sluice.store import admission_state as kept

    now = session.now
    if not data["made_at"] <= now < data["until"] or data["fixed"] != _fixed(session):
        return None
    active = session.require_active()
    known = set(data["running"])
    if any(p.item_id not in known for p in active):
        return None
    marks = data["marks"]
    if set(marks) != {rig.name for rig in session.files.rigs()}:
        return None
    tails = {}
    for rig, mark in marks.items():
        path = session.files.rig_files(session.files.rig(rig))[0]
        if mark == "absent":
            if path.exists():
                return None
            continue
        tail = tail_after(path, mark)
        if tail is None:
            return None
        if tail is not False:
            tails[rig] = tail
    folded = None
    data["queued"] = Queued.from_json(data.get("queued"))
    if tails:  # lines after the marks: new contexts and closes folded in, or a survey
        if data.get("seen") is None:
            return None
        data["seen"] = Seen.from_json(data["seen"])
        folded = fold(session, data, tails, data["seen"], data["queued"])
        if folded is None:
            return None
    offsets: dict[str, dict[str, int]] = {}
    works = []
    for context_id, store_rig, fields, offset, item, rig, tokens in data["works"]:
        parsed = SlingContextFields.from_object(fields)
        if parsed is None:
            return None
        context = Context(context_id, store_rig, parsed)
        offsets.setdefault(store_rig, {})[context_id] = offset
        works.append(Work(item=item, rig=rig, order=context.order, context_id=context_id, payload=context,
                          tokens=tokens))
    for rig, mark in marks.items():
        if rig in tails:  # the store reads on after the new lines, where each new context stands known
            session.stores.rig(rig).know_lines(tails[rig].mark(), {**offsets.get(rig, {}), **tails[rig].at})
        elif mark != "absent":
            session.stores.rig(rig).know_lines(mark, offsets.get(rig, {}))
    new = folded.ready if folded is not None else []
    kinds = {tuple(row[:4]): row[4] for row in data["kinds"]}
    shapes = {(s[0], frozenset(s[1]), s[2], tuple(s[3])): s[4] for s in data["shapes"]}
    if folded is not None and folded.closed:
        works = _without_closed(data, works, folded.closed, kinds, shapes)
        if works is None:
            return None
    ranked = rank_work(session.files, session.stores, works + new, now=now)
    kept_of: Counter = Counter(_kind(w) for w in works)
    if set(kept_of) != set(kinds):
        return None
    if folded is not None:
        ranked = _with_folded(data, ranked, folded, kinds, shapes)
        if ranked is None:
            return None
        kept_of = Counter(_kind(w) for w in ranked)
    bound = None
    last: dict[Kind, tuple] = {}
    for work in ranked:
        last[_kind(work)] = _key(work)
    for kind, count in kinds.items():
        if count < kept_of[kind]:
            return None  # not a chain as written
        if count > kept_of[kind]:  # the kind's unkept works rank after its last kept one
            bound = last[kind] if bound is None else min(bound, last[kind])
    walked = ranked if bound is None else [w for w in ranked if _key(w) <= bound]
    applicants = [applicant(w) for w in walked]
    rest: Counter = Counter(shapes)
    for a in applicants:
        rest[shape_of(a)] -= 1
    if any(n < 0 for n in rest.values()):
        return None
    config = session.config
    tally = admit_head(applicants, rest, running(session.stores, active), limits(config, len(active), batch),
                       throttles=kept.throttles(session.files, now), gates=gates.reasons, now=now)
    if tally is None:
        return None
    data["works"], data["kinds"], data["shapes"] = ranked, kinds, shapes
    return Head(tally, data, len(walked))


def _without_closed(data: dict, works: list[Work], closed: list[tuple[str, str, list]], kinds: dict,
                    shapes: dict) -> list[Work] | None:
    """The kept works less the queued contexts closed since the marks; the counts (``kinds``,
    ``shapes``, ``data``'s) each less one in the bucket the chain's :class:`Queued` held it in.  None:
    a count would go below zero (not a chain as written)."""
    rigs = data["rigs"]
    for _rig, _context_id, bucket in closed:
        if bucket[0] == BLOCKED:
            rigs[bucket[1]][1] -= 1
        elif bucket[0] == BACKING_OFF:
            data["backing_off"] -= 1
            rigs[bucket[1]][0] -= 1
        else:
            kind, shape = tuple(bucket[1]), shape_of_row(bucket[2])
            kinds[kind] -= 1
            shapes[shape] -= 1
            rigs[kind[0]][0] -= 1
            data["ready"] -= 1
    for counts in (kinds, shapes):
        if any(n < 0 for n in counts.values()):
            return None
        for key in [key for key, n in counts.items() if n == 0]:
            del counts[key]
    if data["backing_off"] < 0 or any(n < 0 for counts in rigs.values() for n in counts):
        return None
    data["rigs"] = {rig: counts for rig, counts in rigs.items() if counts != [0, 0]}
    gone = {(rig, context_id) for rig, context_id, _bucket in closed}
    return [work for work in works if (work.payload.rig, work.context_id) not in gone]


def _with_folded(data: dict, ranked: list[Work], folded: Fold, kinds: dict, shapes: dict
                 ) -> list[Work] | None:
    """The kept works ranked with the new ready ones, less those the chain only counts; the counts
    (``kinds``, ``shapes``, ``data``'s) and the ids seen take in the new works.  None: a new work ranks
    among its kind's kept works, which would then no longer be the kind's first works.

    A new context is younger than every context kept, and inside one kind the order is the contexts'
    age, so a new work ranks after its kind's kept works (else: a clock set back, say, and None).  It is
    kept when its kind is new (it is the kind's oldest), or every work of its kind is kept (it is the
    next one) while the chain keeps fewer than :data:`HEAD_WORKS`; otherwise it is only counted, as any
    work behind the kept ones.
    """
    from sluice.scheduler.admission import applicant

    new = {id(w) for w in folded.ready}
    last: dict[Kind, tuple] = {}
    kept_of: Counter = Counter()
    for work in ranked:
        if id(work) not in new:
            last[_kind(work)] = _key(work)
            kept_of[_kind(work)] += 1
    room = HEAD_WORKS - (len(ranked) - len(new))
    kept = []
    for work in ranked:
        kind = _kind(work)
        if id(work) in new:
            if kind in last and _key(work) <= last[kind]:
                return None
            whole = kinds.get(kind, 0) == kept_of[kind]  # every work of its kind is kept
            kinds[kind] = kinds.get(kind, 0) + 1
            shape = shape_of(applicant(work))
            shapes[shape] = shapes.get(shape, 0) + 1
            data["rigs"].setdefault(work.rig, [0, 0])[0] += 1
            if kind in last and not (whole and room > 0):
                continue  # counted, behind its kind's kept works
            kept_of[kind] += 1
            last[kind] = _key(work)  # a new kind's next works are kept as any kind's
            room -= 1
        kept.append(work)
    if len(kinds) > MAX_KINDS:
        return None
    queued: Queued | None = data["queued"]
    for work in folded.ready if queued is not None else ():
        queued.add(work.payload.rig, work.context_id, work.item["id"],
                   ready_bucket(_kind(work), shape_of(applicant(work))))
    for log_rig, context_id, item_id, rig in folded.blocked:
        data["rigs"].setdefault(rig, [0, 0])[1] += 1
        if queued is not None:
            queued.add(log_rig, context_id, item_id, [BLOCKED, rig])
    data["ready"] += len(folded.ready)
    for key in folded.keys:
        data["seen"].add(key)
    return kept


def queue_counts(data: dict) -> dict[str, list[int]]:
    """A taken chain's queue per target rig: [ready or backing off, blocked], checked to be counts;
    ValueError (or KeyError, TypeError) when it is not as written."""
    rigs = {str(rig): [int(n[0]), int(n[1])] for rig, n in data["rigs"].items()}
    if sum(n[0] for n in rigs.values()) != int(data["ready"]) + int(data["backing_off"]):
        raise ValueError("the per-rig counts do not add up")
    return rigs


def _key(work: Work) -> tuple:
    return rank_order(work.score, work.tokens, order_text(work.order), work.item["id"])


def summary(head: Head) -> dict:
    """What the cycle reports of the queue it took from the chain (a :func:`queuekeep.cycle_summary`)."""
    from sluice.core import admission as rules

    tally, data = head.tally, head.data
    why = dict(tally.why)
    if data["backing_off"]:
        why[rules.BACKOFF] = data["backing_off"]
    return {"planned": len(tally.to_dispatch), "ready": data["ready"], "backing_off": data["backing_off"],
            "skipped": tally.skipped, "why": why, "reason": tally.reason, "tidy": True}


__all__ = ["FILE", "Head", "forget", "from_survey", "leave", "queue_counts", "summary", "take"]
