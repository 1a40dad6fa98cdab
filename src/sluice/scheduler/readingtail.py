"""The forecast's kept reading of the queue, carried past the slings, clears and launches since.

``scheduler forecast`` replays a *reading* of the queue: every queued item
in dispatch order with what the replay needs of it (:func:`reading_row`).
A survey makes it, and it is kept for the inputs the survey read
(:mod:`sluice.scheduler.queuekeep`), so a forecast of an unchanged queue
does not survey again.  But a queue changes all the time, by a line or two
at a time: a sling appends a context, a clear closes one, a dispatch cycle
closes the ones it launched (and starts polecats, books runs and
decisions).  Each made the next forecast survey every queued context again:
about half a second at 10,000 queued, of which the reading's own change is
a row or two.

So a reading that may be carried keeps, beside its rows, where each rig's
log stood when the survey read it and, for each row, its context and what
its rank is made of.  The next reader whose inputs differ from the kept
ones only where the reading does not look — the state, the decision and
run logs, the polecat records, holds, throttles and budgets (read by
admission and the replay, which the forecast does afresh), the running
polecats (as long as none of them is on an item still queued) and the
rigs' ephemeral logs — parses just the lines appended to those logs after
the marks and carries the reading on, when each record they leave is

* **a new sling context**, open, as a sling writes it (no failure, launch,
  promotion, force or missing mark; for a registered rig), for an item
  that is not queued already and that its rig holds: it becomes a ready row
  ranked among the ready ones by the same key the survey ranks by, or a
  blocked row among the blocked ones (its item not ready, or running); or
* **a closed context** (cleared, dispatched, or stale): a queued one's row
  goes, unless the survey saw a younger duplicate of its item, which would
  take its place; any other's changes nothing.

Anything else — a queued context still open but changed (a launch in
flight, a failure, a promotion), a record that is no context, an item
missing, closed or queued twice, more lines than :data:`MOST_LINES` — and
the reader surveys as before.  So does a reading whose survey saw promoted
work or scored fairness, where the rank of one item depends on the others.

Why the carried reading is the survey's answer: a survey classifies each
open context by its own fields and its item (the items files are
unchanged, so every item's readiness, tokens, graph and parents are), ranks
it by a key made of its own score, tokens, enqueue time and id (the score
depends on the rig's warmth and merge queue, also unchanged, and with
fairness off on nothing of the other rows), and keeps one context per item,
the oldest; what runs only blocks the items it runs.  A new context of an
unqueued item thus stands where the survey would put it; a closed one
leaves exactly its row.  The horizon stays the kept one, cut to admission's
as its files are now (a throttle set since lifting, a launch's charge
leaving the budget window: the replay kept of the carried reading shows
them): the clock's next change to any item's readiness is the rig's
(:meth:`~sluice.store.rigstore.RigStore.next_release`, over every item), and
new rows bring no backoff.  A compaction's new log may take the inode
a mark names once the old file is gone, and end in the same bytes; but each
compaction first rewrites the rig's ``ephemeral.compacted`` (durably, by
rename), whose signature is in the inputs a reading is carried under
(:func:`sluice.scheduler.queuekeep.inputs`), taken before the survey read
the logs: so a log at a mark's inode under the same inputs is the very
file the mark was taken in, and only the 64 bytes before the mark are
checked.  A log at another inode (a copied town) is followed only where its
whole prefix has the mark's CRC.  A crash leaves a reading whose marks still name a
prefix of each log, so whoever reads next carries from there or surveys.
The property test in ``tests/test_reading_tail.py`` holds every forecast so
made to a fresh survey's.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from sluice.core import admission as rules
from sluice.core.clock import order_text
from sluice.core.items import DONE_STATUSES, estimated_minutes, is_context
from sluice.core.scoring import fairness_enabled, rank_order
from sluice.errors import SluiceError
from sluice.scheduler import admission, queuekeep
from sluice.scheduler.pending import UNREADABLE, items_of
from sluice.scheduler.ranking import Work, load_town_policy, rank_work
from sluice.scheduler.reading import Reading
from sluice.store import contexts
from sluice.store.columns import Slots
from sluice.store.jsonlog import LogTail

if TYPE_CHECKING:
    from sluice.scheduler.pending import Survey
    from sluice.scheduler.session import Session

#: More lines after the marks than this and a survey costs about what carrying would.
MOST_LINES = 2000
#: Lines a reading is carried past before it is kept again whole.  Fewer cost the next reader less to
#: carry again (a look for each line's context among the rows) than writing 100,000 rows again costs
#: this one (about 30 ms); until then only its first rows are kept for the inputs of now.
REKEEP_LINES = 64


def reading_row(work: Work, retry_at: float | None, why: str | None, seen) -> list:
    """One queued item as the replay reads it: ``[item id, rig, issue type, the item's labels, its
    estimated minutes, its tokens, the end of its backoff, why it cannot start, and the labels, touches
    and tokens admission reads]`` (``seen``: its :func:`~sluice.scheduler.admission.applicant`)."""
    item = work.item
    minutes = estimated_minutes(item)
    if minutes is None and isinstance(item.get("metadata"), dict):
        minutes = estimated_minutes(item["metadata"])
    return [item["id"], work.rig, item.get("issue_type"), item.get("labels") or [], minutes, work.tokens,
            retry_at, why, sorted(seen.labels), list(seen.touches), seen.tokens]


def is_reading(found: dict) -> bool:
    """Whether kept rows are as the forecast writes them (rows of :func:`reading_row`, and the caps); else
    the queue is surveyed."""
    works = found.get("works")
    return isinstance(works, list) and is_caps(found.get("caps")) and all(
        isinstance(row, list) and len(row) == 11 and isinstance(row[0], str) and isinstance(row[1], str)
        for row in works)


def is_caps(caps: object) -> bool:
    """Whether a reading's caps are as the forecast keeps them."""
    if not isinstance(caps, dict):
        return False
    if not all(isinstance(caps.get(name), dict) for name in ("rig_caps", "label_caps", "rig_budgets")):
        return False
    return isinstance(caps.get("town_budget"), int)


def tail_facts(session: Session, view: Survey) -> tuple[dict, list[list]] | None:
    """What a reading of ``view`` keeps so that the next reader may carry it (see the module docstring),
    and each row's rank facts (``[context, score, enqueue time]``), its rows being ready, backing off,
    then blocked works, in that order; None: it may not be carried."""
    # Promoted work leads its list, ready or blocked, whatever its score: no new row may be placed by score.
    if any(w.promoted_at for w in (*view.ready, *view.blocked)):
        return None
    if fairness_enabled(load_town_policy(session.files)):
        return None
    if any(mark is None for mark in view.marks.values()):
        return None
    rows = [[w.context_id, w.score, w.order] for w in (*view.ready, *view.backing_off, *view.blocked)]
    return {"marks": view.marks, "ready": len(view.ready), "backing_off": len(view.backing_off),
            "duplicated": sorted({c.work_id for c in view.duplicates})}, rows


def carry(session: Session, key: list) -> tuple[Reading, dict, float] | None:
    """The kept reading carried past the lines appended to the rigs' logs since, kept again for ``key``
    (the inputs now): (reading, caps, horizon); None when it cannot be (then the caller surveys)."""
    found = queuekeep.load_whole(session, queuekeep.REPLAY_FILE,
                                 lambda kept: queuekeep.same_reading_inputs(kept, key))
    reading = kept_reading(found) if found is not None else None
    if reading is None or not isinstance(found.get("tail"), dict):
        return None
    try:
        carried = _carried(session, reading, found["tail"], found["key"], key)
    except (SluiceError, OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None  # a log or a kept file not as written: survey
    if carried is None:
        return None
    facts, lines = carried
    # The survey's horizon, and admission's as its files are now (a throttle set since, a launch's charge).
    caps, until = found["caps"], min(found["until"], queuekeep.admission_horizon(session))
    if lines >= REKEEP_LINES:
        keep(session, key, until, reading, caps, facts)
    else:  # the next reader carries it from the same marks; a view's replay of its first rows reads these
        keep_head(session, key, until, reading, caps)
    return reading, caps, until


def kept_reading(found: dict) -> Reading | None:
    """The reading a kept file holds, as :func:`keep` wrote it (with its caps); else None."""
    if not is_caps(found.get("caps")):
        return None
    return Reading.decode(found.get("reading"))


def keep(session: Session, key: list, until: float, reading: Reading, caps: dict, facts: dict | None) -> None:
    """Keep a reading (and its first rows apart, for a view's replay of its first rows) for ``key``."""
    whole = {"reading": reading.encode(), "caps": caps}
    if facts is not None and reading.ranks is not None:
        whole["tail"] = facts
    queuekeep.keep(session, key, until, whole, queuekeep.REPLAY_FILE)
    keep_head(session, key, until, reading, caps)


def keep_head(session: Session, key: list, until: float, reading: Reading, caps: dict) -> None:
    """Keep the reading's first rows (what a view's replay of its first rows reads) for ``key``."""
    queuekeep.keep(session, key, until, {"works": reading.rows(queuekeep.HEAD_ROWS), "total": len(reading),
                                         "caps": caps}, queuekeep.REPLAY_HEAD_FILE)


def _carried(session: Session, reading: Reading, facts: dict, kept_key: list, key: list
             ) -> tuple[dict, int] | None:
    """Carry ``reading`` (in place) past the lines appended since ``facts``' marks; the facts that stand
    then and how many lines it was carried past, or None when the lines leave what only a survey can
    place (``reading`` is then as it was)."""
    if reading.ranks is None:
        return None
    ids, context_ids = reading.ids, reading.ranks[0]
    ready, backing = int(facts["ready"]), int(facts["backing_off"])
    if not 0 <= ready <= ready + backing <= len(reading):
        return None
    town = session.files
    marks, appended, lines = {}, [], 0
    for rig in town.rigs():
        tail = _tail(town.rig_files(rig)[0], facts["marks"][rig.name])
        if tail is None:
            return None
        lines += tail.lines - facts["marks"][rig.name]["lines"]
        if lines > MOST_LINES:
            return None
        marks[rig.name] = tail.mark()
        appended += [(rig.name, record) for record in tail.records.values()]
    # A polecat that started or ended since makes its item blocked or ready, if that item is still queued.
    moved = queuekeep.running_items(kept_key) ^ queuekeep.running_items(key)
    if not appended:  # no line since: the reading stands as it was
        return None if any(item in ids for item in moved) else ({**facts, "marks": marks}, lines)
    # A survey sees only where the lines leave each context, not the order they came in: the closes
    # first, then the new contexts, each for an item no open context holds any more.
    position = _positions(context_ids, [r.get("id") for _rig, r in appended if isinstance(r, dict)])
    duplicated = set(facts["duplicated"])
    gone: set[int] = set()
    opened: list[tuple[str, dict]] = []
    for rig, record in appended:
        if not isinstance(record, dict) or not is_context(record):
            return None  # another kind of record may change what is ready
        index = position.get(record["id"])
        if index is not None:
            if contexts.is_open(record) or ids[index] in duplicated:
                return None  # a queued context changed, or one of its item's duplicates takes its place
            gone.add(index)
        elif contexts.is_open(record):
            opened.append((rig, record))
    gone_items = {ids[index] for index in gone}
    slung: set[str] = set()

    def queued(item: str) -> bool:  # an item has one row at most: a look in the column, not a set of all
        return item in slung or (item not in gone_items and item in ids)

    if any(queued(item) for item in moved):
        return None
    new: list[contexts.Context] = []
    for rig, record in opened:
        context = _new_context(session, rig, record)
        if context is None or queued(context.work_id):
            return None  # not as a sling writes it, or a second open context of one item
        slung.add(context.work_id)
        new.append(context)
    ranked = _ranked(session, new)
    if ranked is None:
        return None
    # Backing-off works were never ranked (the survey sets them aside first): nothing is placed among them.
    was_ready = ready
    ready -= sum(1 for k in gone if k < was_ready)
    backing -= sum(1 for k in gone if was_ready <= k < was_ready + backing)
    reading.remove(gone)
    # A segment is in rank order, so a new row's place is found by the keys of a few rows, not of all.
    for (work, rank), blocked in ranked:
        lo, hi = (ready + backing, len(reading)) if blocked else (0, ready)
        place = bisect.bisect_left(range(lo, hi), _key(rank, work), key=lambda k: _key_at(reading, k))
        reading.insert(lo + place, work, rank)
        if not blocked:
            ready += 1
    return {**facts, "marks": marks, "ready": ready, "backing_off": backing}, lines


def _positions(context_ids, wanted: list) -> dict[str, int]:
    """Where each of the ``wanted`` context ids stands among ``context_ids`` (those that do)."""
    few = 200 if isinstance(context_ids, Slots) else 32
    if len(wanted) <= few:  # a sling or a cycle's worth: a search each, in C
        out = {}
        for context_id in wanted:
            try:
                out[context_id] = context_ids.index(context_id)
            except ValueError:
                pass
        return out
    wanted_set = set(wanted)
    return {context_id: k for k, context_id in enumerate(context_ids) if context_id in wanted_set}


def _tail(path, mark: dict) -> LogTail | None:
    """What was appended to a rig's log after ``mark``; a log that had no lines then is read whole."""
    if mark.get("inode") is None and mark.get("offset") == 0:
        tail = LogTail(path)
        tail.catch_up()
        return tail
    # A compaction since would have changed the key the reading was taken under (its mark file,
    # queuekeep.inputs), so a log of the marks' inode is the very file they were taken in: the 64 bytes
    # before the mark are checked, not the whole prefix (about 20 ms at 100,000 queued).  Another
    # inode (a copied town) continues only where its whole prefix has the mark's CRC.
    return LogTail.resume(path, mark)


def _new_context(session: Session, rig: str, record: dict) -> contexts.Context | None:
    """An appended open context as a sling writes it, else None."""
    context = contexts.parse(rig, record)
    fields = context.fields
    if fields is None or not context.valid or fields.target_rig not in {r.name for r in session.files.rigs()}:
        return None
    if (fields.dispatch_failures or fields.run_failures or fields.launch_started_at or fields.missing_since
            or fields.promoted_at or fields.force or fields.last_failure or fields.last_failure_at):
        return None
    if record["id"] in session.stores.rig(rig).index.outside_targets():
        return None  # an item waits on this very id: its readiness would change
    return context


def _ranked(session: Session, new: list[contexts.Context]) -> list[tuple[tuple[list, list], bool]] | None:
    """The new contexts' works as reading rows with their rank facts, and whether each is blocked."""
    if not new:
        return []
    stores, now = session.stores, session.now
    found = items_of(stores, new, now)
    busy = {p.item_id for p in session.require_active()}
    ready: list[Work] = []
    blocked: list[Work] = []
    for context in new:
        there = found.get(context.work_id)
        if there is None or there == UNREADABLE:
            return None  # missing or unreadable: held, not queued
        _store, item, is_ready, tokens = there
        status = item.get("status", "open")
        if status in DONE_STATUSES or status == "hooked":
            return None  # stale: a cycle closes it
        work = Work(item=item, rig=context.fields.target_rig, order=context.order, context_id=context.id,
                    payload=context, tokens=tokens)
        (ready if is_ready and item["id"] not in busy else blocked).append(work)
    out = []
    for works, why in ((ready, None), (blocked, rules.BLOCKED)):
        for work in rank_work(session.files, stores, works, now=now) if works else []:
            out.append(((reading_row(work, None, why, admission.applicant(work)),
                         [work.context_id, work.score, work.order]), why is not None))
    return out


def _key(rank: list, row: list) -> tuple:
    """A reading row's rank key, as :func:`sluice.scheduler.ranking.rank_work` orders works (score, tokens,
    enqueue time, item id), from its rank facts ``[context, score, enqueue time]``."""
    return rank_order(rank[1], row[5], order_text(rank[2]), row[0])


def _key_at(reading: Reading, index: int) -> tuple:
    """:func:`_key` of the reading's row ``index``."""
    _contexts, scores, orders = reading.ranks
    return rank_order(scores[index], reading.kinds[reading.kind_of[index]][4], order_text(orders[index]),
                      reading.ids[index])


__all__ = ["MOST_LINES", "REKEEP_LINES", "carry", "is_caps", "is_reading", "keep", "keep_head",
           "kept_reading", "reading_row", "tail_facts"]
