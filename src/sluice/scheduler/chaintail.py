"""New sling contexts and closes appended after a chain's marks, folded into the chain instead of a survey.

A chain (:mod:`sluice.scheduler.chain`) used to stand only while every
rig's log ended exactly at its mark, so one ``sluice sling`` of one item
between two cycles cost every view after it, and the next cycle, a survey
of the whole queue (about 2.7 s at 100,000 queued).  A sling only appends
brand-new open contexts, and what a survey would make of one such context
can be told from the context, its item's row in the index and what the
chain knows, so :func:`fold` reads only the lines after each mark and
gives the works they add, or None (then the caller surveys) unless every
line is one it can place soundly:

* **a new record**: its id was in no line of that log before the mark.
  A line that changes an existing record (a close, a launch mark, a
  promotion, a clear) looks like any open context, so the chain carries
  :class:`Seen`, the CRC-32s of every id each log held at its mark (and of
  every item the queue held): an id whose CRC is not among them is surely
  new; one whose CRC is sends the caller to a survey (a new id does so about
  once in 20,000 at 200,000 entries, and then it costs only a survey);
* **an open sling context**, valid, not broken, for a registered rig, with
  no launch, failure backoff, missing mark or promotion of its own, and
  whose id no item of its rig depends on (else the index alone would no
  longer say which items are ready);
* **for an item no context in the queue has** (the survey keeps one
  context per item: :class:`~sluice.scheduler.chainqueue.Queued` holds
  every queued item exactly, :class:`Seen` or a CRC of each), that no polecat
  the chain knows runs, that no other new line names, found where its prefix
  routes in the index alone (no ephemeral record may bear on it, as at the
  mark), open (not closed or hooked), and ready, or blocked without a
  forced sling (whose readiness needs the rig's blocked rows).

A line may also be **a closed context** (a clear's, or anyone's close):
one whose id was never seen was slung and closed since the mark, and
changes nothing; any other is looked up in the chain's
:class:`~sluice.scheduler.chainqueue.Queued`, which holds exactly the
contexts queued at the marks: found, it leaves the count it was in (and
its item is queued no more, so a new context for it may be folded in
after); not found, it was closed already.  A close of a record an item
depends on sends the caller to a survey, as a new one does.

A deferral's end needs nothing here: the chain's horizon is already the
first release of any item of the rig (:meth:`RigStore.next_release`).
At most :data:`MAX_LINES` new lines are folded; more, and a survey is as
cheap.  A torn last line, a malformed line, a log created since the mark, or a
chain kept without :class:`Seen` (more than :data:`MAX_SEEN` ids) folds none.

What the folded works change is :func:`sluice.scheduler.chain._take`'s:
the counts, and which new works join the kept ones.
"""

from __future__ import annotations

import binascii
import os
import sys
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sluice.core.items import DONE_STATUSES, is_context
from sluice.core.plan import is_circuit_broken
from sluice.core.recordclass import field, recordclass
from sluice.errors import SluiceError
from sluice.store import contexts as ctxs
from sluice.store.jsonlog import LogTail
from sluice.store.rigstore import decode_all

if TYPE_CHECKING:
    from sluice.scheduler.chainqueue import Queued
    from sluice.scheduler.pending import Survey
    from sluice.scheduler.ranking import Work
    from sluice.scheduler.session import Session

#: New lines after the marks folded at most (all rigs together); past it a survey is as cheap.
MAX_LINES = 10_000
#: Bytes after the marks read at most: a few lines of any length, never a big batch's append.
MAX_BYTES = 16 << 20
#: Entries a chain's :class:`Seen` holds at most (ids in the logs and queued items); more, and none is kept.
MAX_SEEN = 1_000_000


class Seen:
    """A set of strings kept as their sorted CRC-32s: ``key in seen`` is False only for a key never added.

    Four bytes an entry (about 800 KB at 200,000), made in about 0.1 s at
    that size, and a key never added is taken for one that was about once
    in 20,000 lookups there (its CRC equals one of 200,000 of 2³²): then the
    caller surveys, which is never wrong.  A Bloom filter of a third of the
    size took four times as long to make (a SHA-256 and four bits a key in
    Python), on the survey a chain comes from.  Keys added after it was
    made (:meth:`add`) are kept beside it until it is written again.
    """

    def __init__(self, prints: array, added: set[int] | None = None):
        self.prints, self.added = prints, added if added is not None else set()

    @classmethod
    def of(cls, keys: Iterable[str]) -> Seen:
        return cls(array("I", sorted({_print(key) for key in keys})))

    def __len__(self) -> int:
        return len(self.prints) + len(self.added)

    def add(self, key: str) -> None:
        self.added.add(_print(key))

    def __contains__(self, key: object) -> bool:
        found = _print(str(key))
        if found in self.added:
            return True
        at = bisect_left(self.prints, found)
        return at < len(self.prints) and self.prints[at] == found

    def to_json(self) -> dict:
        prints = array("I", sorted({*self.prints, *self.added})) if self.added else self.prints
        data = prints.tobytes() if sys.byteorder == "little" else _swapped(prints).tobytes()
        return {"crc32": binascii.b2a_base64(data, newline=False).decode("ascii")}

    @classmethod
    def from_json(cls, data: dict) -> Seen:
        """The set as :meth:`to_json` wrote it; ValueError (or KeyError, TypeError) when it is not."""
        prints = array("I")
        prints.frombytes(binascii.a2b_base64(data["crc32"]))
        return cls(prints if sys.byteorder == "little" else _swapped(prints))


def _print(key: str) -> int:
    return zlib.crc32(key.encode("utf-8"))


def _swapped(prints: array) -> array:
    out = array("I", prints)
    out.byteswap()
    return out


def log_key(rig: str, record_id: str) -> str:
    """The key in :class:`Seen` of a record id in ``rig``'s log."""
    return f"L{rig}\x00{record_id}"


def item_key(item_id: str) -> str:
    """The key in :class:`Seen` of an item the queue holds."""
    return f"Q{item_id}"


def seen_at_survey(session: Session, view: Survey) -> Seen | None:
    """The set a chain from ``view`` keeps: every id in every rig's log now and every queued item;
    None when there are too many, a CRC-32 is not four bytes here, or a log's ids cannot be read (then
    no new line is ever folded)."""
    if array("I").itemsize != 4:
        return None
    try:
        ids = {store.rig.name: store.log_ids() for store in session.stores.all()}
    except (SluiceError, OSError):
        return None
    items = {w.item["id"] for works in (view.ready, view.blocked, view.backing_off) for w in works}
    if sum(len(found) for found in ids.values()) + len(items) > MAX_SEEN:
        return None
    keys = [log_key(rig, record_id) for rig, found in ids.items() for record_id in found]
    return Seen.of(keys + [item_key(item_id) for item_id in items])


def tail_after(path, mark: dict) -> LogTail | bool | None:
    """What ``path`` holds after ``mark``: False when it ends exactly there (nothing appended, replaced or
    cut), the tail of whole lines appended after it (the bytes before it unchanged), or None when it does
    not continue from ``mark`` as a log only appended to, ends in a torn line, or grew too far."""
    try:
        stat = os.stat(path)
        if stat.st_ino != mark["inode"] or stat.st_size < mark["offset"]:
            return None
        if stat.st_size == mark["offset"]:
            if stat.st_mtime_ns != mark["mtime"]:
                return None  # written again in place
            tail = LogTail.resume(path, mark)
            return None if tail is None or tail.lines != mark["lines"] else False
        if stat.st_size - mark["offset"] > MAX_BYTES:
            return None
        tail = LogTail.resume(path, mark)
    except (OSError, TypeError, KeyError, SluiceError):  # SluiceError: a malformed line (a survey says so)
        return None
    if tail is None or tail.offset != stat.st_size:  # a torn last line, or more appended meanwhile
        return None
    return tail


@recordclass
class Fold:
    """What the lines after a chain's marks add to its queue."""

    ready: list[Work] = field(default_factory=list)  # in log order, not ranked yet
    blocked: list[tuple[str, str, str, str]] = field(default_factory=list)  # (log rig, context, item, target)
    keys: list[str] = field(default_factory=list)  # what the next chain's ids seen must hold
    closed: list[tuple[str, str, list]] = field(default_factory=list)  # queued contexts closed: (log rig,
    # context id, its bucket in the chain's Queued)


def fold(session: Session, data: dict, tails: dict[str, LogTail], seen: Seen, queued: Queued | None
         ) -> Fold | None:
    """The works the lines of ``tails`` (rig → the tail after its mark in ``data``) add to the chain's
    queue, and the queued contexts they close (taken out of ``queued``), as a survey would find them now;
    None: a line that is neither a new context nor a close this can place."""
    try:
        return _fold(session, data, tails, seen, queued)
    except (SluiceError, OSError, ValueError, KeyError, TypeError):
        return None


def _fold(session: Session, data: dict, tails: dict[str, LogTail], seen: Seen, queued: Queued | None
          ) -> Fold | None:
    from sluice.scheduler.polecats import is_retry_due, retry_window
    from sluice.scheduler.ranking import Work

    town, stores, now = session.files, session.stores, session.now
    sched = session.config.scheduler
    registered = {rig.name for rig in town.rigs()}
    running = set(data["running"])
    contexts: list[ctxs.Context] = []
    new_ids: dict[str, set[str]] = {}
    closed: list[tuple[str, str, list]] = []
    lines = 0
    for rig, tail in tails.items():
        lines += tail.lines - data["marks"][rig]["lines"]
        if lines > MAX_LINES:
            return None
        for record_id, record in tail.records.items():
            if is_context(record) and record.get("status", "open") in DONE_STATUSES:
                if log_key(rig, record_id) not in seen:
                    continue  # slung and closed since the marks: never queued
                if queued is None:
                    return None
                bucket = queued.remove(rig, record_id)
                if bucket is not None:  # else it was closed at the mark already
                    closed.append((rig, record_id, bucket))
                continue
            if log_key(rig, record_id) in seen:
                return None  # maybe a change of a record the log had: the queue may have moved anywhere
            if not is_context(record):
                return None
            context = ctxs.parse(rig, record)
            fields = context.fields
            if not context.valid or fields is None:
                return None
            if is_circuit_broken(fields.dispatch_failures, sched.max_dispatch_failures) or \
                    fields.target_rig not in registered:
                return None  # stale: the next cycle closes it
            if fields.launch_started_at or fields.missing_since or fields.promoted_at:
                return None
            contexts.append(context)
        new_ids[rig] = set(tail.records)
    for rig, ids in new_ids.items():
        if stores.rig(rig).index.outside_targets() & ids:
            return None  # an item depends on the new record: the index alone no longer says readiness
    by_rig: dict[str, list[ctxs.Context]] = {}
    items: set[str] = set()
    for context in contexts:
        item_id = context.work_id or ""
        rig = town.rig_for_id(item_id)
        queued_now = queued.has_item(item_id) if queued is not None else item_key(item_id) in seen
        if item_id in items or item_id in running or queued_now or rig is None:
            return None  # a second context, a running item, a queued (maybe queued) one, or an item astray
        if log_key(rig.name, item_id) in seen or item_id in new_ids.get(rig.name, ()):
            return None  # maybe in its rig's log: the index alone does not say what it is
        items.add(item_id)
        by_rig.setdefault(rig.name, []).append(context)
    retry = retry_window(sched)
    out = Fold()
    for rig, group in by_rig.items():
        rows = stores.rig(rig).index.raw_and_ready([c.work_id for c in group], now)
        for context in group:
            fields = context.fields
            assert fields is not None
            row = rows.get(fields.work_bead_id)
            if row is None:
                return None  # missing (held) or elsewhere: a survey says which
            [item] = decode_all([row[0]])
            status = item.get("status", "open")
            if is_context(item) or status in DONE_STATUSES or (status == "hooked" and not fields.force):
                return None
            ready = row[1]
            if not ready and fields.force and status in ctxs.PROTECTED_STATUSES:
                return None  # a forced sling's readiness is the rig's blocked rows
            if ready and not is_retry_due(fields, now, *retry):
                return None  # backing off: its end would move the chain's horizon
            if ready:
                out.ready.append(Work(item=item, rig=fields.target_rig, order=context.order,
                                      context_id=context.id, payload=context, tokens=row[2]))
            else:
                out.blocked.append((context.rig, context.id, item["id"], fields.target_rig))
            out.keys += [log_key(context.rig, context.id), item_key(item["id"])]
    out.closed = closed
    return out


__all__ = ["Fold", "Seen", "fold", "seen_at_survey", "tail_after"]
