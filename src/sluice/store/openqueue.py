"""Reading the open queue: each rig's open sling contexts, whole or for a few items, from what is kept.

A command that has not read a rig's ephemeral log yet (every CLI command)
takes its open contexts from the queue digest kept beside the index
(:mod:`sluice.store.queuedigest`) and the lines after its mark, and finds
one item's contexts in the item map (:mod:`sluice.store.openitems`), so
neither a view nor a write pays for every version of every context.  The
contexts themselves, and every change of them, are :mod:`sluice.store.contexts`'.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sluice.core.records import SlingContextFields
from sluice.errors import StoreCorrupt
from sluice.store import openitems, queuedigest
from sluice.store.contexts import Context, is_open, parse
from sluice.store.jsonlog import LogTail, worth_rewriting

if TYPE_CHECKING:
    from sluice.store.rigstore import RigStore, Stores


def read_fresh(store: RigStore) -> dict[str, dict]:
    """The store's ephemeral records as on disk now, last line winning.

    Only lines appended since this store last read its log are parsed, so a
    long-lived reader (the daemon, the MCP server, a big batch) pays for what
    changed, not for the whole log again.
    """
    return store.ephemeral_fresh()


def _open_contexts_of(store: RigStore, fresh: bool, lean: bool = False, digest: bool = True) -> list[Context]:
    """The rig's open contexts in log order: from its kept digest and the lines appended after it.

    A process that has not read the log yet (every CLI command) takes the open
    contexts from ``<rig>.queue.json`` beside the index, kept at a mark of
    the log (:meth:`LogTail.mark`: how far, and the bytes just before), and
    parses only the lines appended after that mark, instead of every version
    of every context (docs/performance.md); writers never touch the digest,
    so an append costs only what it writes.  A process that has read the log (the daemon's cycle after its
    first read, the MCP server, a writer) reads on from where it was.  ``lean``: a log
    with no digest that fits is read as a stream that keeps only the open contexts
    (:meth:`RigStore.read_lean`), for a caller that needs nothing else of it; ``digest``
    False: that read keeps no digest of them, for a caller about to close them all
    (:func:`keep_digests_after_closes` keeps the one after).
    """
    if store.log_unread():
        kept = _kept_open(store, digest)
        if kept is not None:
            return kept
        if lean:
            return _lean_open(store, digest)
    records = read_fresh(store).values() if fresh else store.ephemeral().values()
    # Closed contexts are most of a long-lived log: skip them before parsing their descriptions.
    found = [parse(store.rig.name, r) for r in records if is_open(r)]
    if store.keeps("queue"):  # this process read the log whole: keep what it found
        at = store.line_offsets()
        _keep_digests(store, store.log_mark(), [(c, at[c.id]) for c in found])
    return found


def _lean_open(store: RigStore, digest: bool = True) -> list[Context]:
    """The open contexts from a read of the log that holds no other record, their digest kept from it
    (``digest``)."""
    name = store.rig.name

    def keep(record: dict) -> Context | None:
        return parse(name, record) if is_open(record) else None

    read = store.read_lean(keep)
    if read is None:
        return []
    kept, mark, at = read
    found = [context for context in kept.values() if context is not None]
    if digest:
        _keep_digests(store, mark, [(c, at[c.id]) for c in found])
    return found


def keep_digests_after_closes(store: RigStore, before: tuple | None, still_open: list[Context]) -> bool:
    """Keep the queue digest, the item map and the log summary of a log whose last lines are this
    process's closes:
    ``still_open`` its open contexts now, ``before`` :meth:`RigStore.summary_at_own_mark` taken
    before the closes.

    For a clear, whose closes would otherwise leave the next reader a digest
    of every context it closed and their closes to parse after it (at
    100,000 contexts, about two seconds and 500 MB of the next command).
    Kept only when the log ends exactly where this store's own last line
    left it (no other writer's line since its read, :meth:`RigStore.own_mark`)
    and each context's line is known; False: nothing kept, the next reader
    starts from whatever fits, as before.  The summary carries over
    unchanged, since a close changes no id and no dependency.  Written like
    any digest: at a mark the log only ever extends, so a line appended
    after it is the next reader's tail.
    """
    mark = store.end_at_own_mark()
    if mark is None:
        return False
    if before is not None:
        store.carry_summary(before[1], mark)
    at = [store.known_offset(c.id) for c in still_open]
    if any(offset is None for offset in at):
        return False
    _keep_digests(store, mark, list(zip(still_open, at, strict=True)))
    return True


def keep_digest_of(store: RigStore, mark: dict, records_at: Iterable[tuple[dict, int]]) -> None:
    """Keep the queue digest and the item map of a log just written whole (compaction): its records, each
    with its line's offset, in the order they stand in the file."""
    name = store.rig.name
    found = [(parse(name, record), at) for record, at in records_at if is_open(record)]
    _keep_digests(store, mark, found)


def _keep_digests(store: RigStore, mark: dict, found: list[tuple[Context, int]]) -> None:
    """Keep the queue digest and the item map of the rig's open contexts ``found`` (each with where its
    latest line starts) as of ``mark``: whoever has them all at hand keeps both."""
    queuedigest.write(store.queue_digest_path, mark, [_row(c, offset) for c, offset in found])
    openitems.write(store.open_items_path, mark,
                    [(c.work_id, c.id, offset) for c, offset in found if c.work_id])


def _row(context: Context, offset: int) -> list:
    return [context.id, context.fields.to_compact() if context.fields is not None else None, offset]


def _kept_open(store: RigStore, digest: bool = True) -> list[Context] | None:
    """The open contexts from the digest and the log's lines after its mark; None: read the log whole.

    The lines after the mark are applied as a whole read would apply them
    (each id's latest version wins; closed or not a context: gone), and the
    result is kept at the new mark, so the next reader starts from there
    (``digest`` False: not by a caller about to close them all).
    """
    caught = LogTail.after_kept(store.ephemeral_path, queuedigest.rows(store.queue_digest_path))
    if caught is None:
        return None
    mark, rows, tail = caught
    name = store.rig.name
    offsets = {row[0]: row[2] for row in rows}
    offsets.update(tail.at)
    store.know_lines(tail.mark(), offsets)
    found = {context_id: Context(context_id, name, SlingContextFields.from_object(data))
             for context_id, data, _at in rows}
    if tail.lines == mark["lines"]:
        return list(found.values())
    for record_id, record in tail.records.items():
        if is_open(record):
            found[record_id] = parse(name, record)
        else:
            found.pop(record_id, None)
    if digest and worth_rewriting(tail.lines - mark["lines"], len(rows)):
        _keep_digests(store, tail.mark(), [(c, offsets[c.id]) for c in found.values()])
    return list(found.values())


def open_contexts(stores: Stores, fresh: bool = False, lean: bool = False, digest: bool = True
                  ) -> list[Context]:
    """Open contexts of every rig: valid ones oldest first (ties by id), unparseable ones last.

    A rig whose log cannot be read (a malformed line, an unreadable file) is
    left out and noted in ``stores.unreadable``: one bad rig does not stop
    the town, and nothing of it is rewritten or closed.  ``lean``: the caller
    needs nothing of the logs but the open contexts (see :func:`_open_contexts_of`).
    """
    found = []
    for store in stores.all():
        try:
            found.extend(_open_contexts_of(store, fresh, lean, digest))
        except (StoreCorrupt, OSError) as err:
            stores.hold_unreadable(store.rig.name, err)
    found.sort(key=_listing_key)
    return found


def _listing_key(context: Context) -> tuple[bool, str, str]:
    """Valid contexts oldest first (ties by id), then the rest: ``(not valid, order, id)``, the
    validity read off the fields directly (one sort key per open context)."""
    fields = context.fields
    return (fields is None or not fields.work_bead_id or not fields.target_rig, context.order, context.id)


def open_by_item(stores: Stores, fresh: bool = True) -> dict[str, list[Context]]:
    """Open, valid contexts grouped by work item, in every rig."""
    out: dict[str, list[Context]] = {}
    for context in open_contexts(stores, fresh):
        if context.valid:
            out.setdefault(context.work_id or "", []).append(context)
    return out


def find_open(stores: Stores, item_id: str) -> list[Context]:
    """Every open, valid context for ``item_id`` in every rig (duplicates included), oldest first."""
    return open_of_items(stores, [item_id]).get(item_id, [])


def open_of_items(stores: Stores, item_ids: Iterable[str], valid: bool = True) -> dict[str, list[Context]]:
    """The open contexts of ``item_ids`` in every rig, grouped by item, oldest first; ``valid`` False:
    the invalid ones that name one of them too.  What :func:`open_by_item` answers for them, as the
    logs stand now, at the cost of those items' contexts and the lines appended since each rig's item
    map (:mod:`sluice.store.openitems`), not of the whole queue."""
    wanted = set(item_ids)
    found: list[Context] = []
    for store in stores.all():
        try:
            found.extend(c for c in _of_items(store, wanted) if c.valid or not valid)
        except (StoreCorrupt, OSError) as err:
            stores.hold_unreadable(store.rig.name, err)
    found.sort(key=_listing_key)
    out: dict[str, list[Context]] = {}
    for context in found:
        out.setdefault(context.work_id or "", []).append(context)
    return out


def _of_items(store: RigStore, wanted: set[str]) -> list[Context]:
    """One rig's open contexts naming an item of ``wanted``, from its item map when one fits; else from
    every open context, whose map is kept for the next lookup."""
    if not wanted or not store.ephemeral_path.exists():
        return []
    found = _from_item_map(store, wanted)
    if found is None and store.log_unread() and _item_map_from_digest(store):
        found = _from_item_map(store, wanted)
    if found is not None:
        return found
    every = _open_contexts_of(store, fresh=True)
    _keep_item_map(store, every)
    return [c for c in every if c.work_id in wanted]


def _item_map_from_digest(store: RigStore) -> bool:
    """Keep the item map made from the queue digest and the lines after its mark; False: no digest fits.

    The digest's rows are not made into contexts (most of what reading the queue costs): a row names
    its item when its fields hold one as text, which every context whose fields parse and name an item
    does (a row whose fields do not parse is in the map too; a lookup reads its line and leaves it out).
    """
    caught = LogTail.after_kept(store.ephemeral_path, queuedigest.rows(store.queue_digest_path))
    if caught is None:
        return False
    _mark, rows, tail = caught
    found = [(data["work_bead_id"], context_id, offset) for context_id, data, offset in rows
             if context_id not in tail.records and isinstance(data, dict)
             and isinstance(data.get("work_bead_id"), str) and data["work_bead_id"]]
    opened = [parse(store.rig.name, r) for r in tail.records.values() if is_open(r)]
    found += [(c.work_id, c.id, tail.at[c.id]) for c in opened if c.work_id]
    openitems.write(store.open_items_path, tail.mark(), found)
    return True


def _from_item_map(store: RigStore, wanted: set[str]) -> list[Context] | None:
    """The rig's open contexts of ``wanted`` from its kept map, the lines after its mark and each found
    context's line; None: no map fits (then nothing was changed)."""
    caught = LogTail.after_kept(store.ephemeral_path, openitems.read(store.open_items_path))
    if caught is None:
        return None
    mark, body, tail = caught
    try:
        rows = [row for row in openitems.find(body, wanted) if row[1] not in tail.records]
    except ValueError:
        return None
    name = store.rig.name
    found = [parse(name, r) for r in tail.records.values() if is_open(r)]
    if store.log_unread():
        at_mark = _lines_at(store, [(context_id, offset) for _item, context_id, offset in rows])
        if at_mark is None:
            return None
        if store.read_mark() is None:  # a store that read nothing yet changes what it found at its line
            store.know_lines(tail.mark(), {**{row[1]: row[2] for row in rows}, **tail.at})
    else:  # read already: what is in memory is the log as it stands now
        records = store.ephemeral_fresh()
        at_mark = [records[context_id] for _item, context_id, _offset in rows if context_id in records]
    opened = [parse(name, r) for r in at_mark if is_open(r)]
    if len(opened) != len(rows):  # a line not as the map says: not this log's map
        return None
    if worth_rewriting(tail.lines - mark["lines"], body.count(b"\n") - 1):
        _carry_item_map(store, body, tail, found)
        _carry_queue_digest(store)
    return [c for c in (*opened, *found) if c.work_id in wanted]


def _carry_queue_digest(store: RigStore) -> None:
    """Keep the queue digest again at the log's end when the lines after its mark are worth it, from
    its rows as kept (not made into contexts) and those lines.

    Slings no longer read the queue, so nothing else would: after a big batch the first reader (a
    clear of everything holds every line after the mark in memory) paid for every line slung since.
    Done when the item map is written again, so at most once an eighth of the queue's lines.
    """
    caught = LogTail.after_kept(store.ephemeral_path, queuedigest.rows(store.queue_digest_path))
    if caught is None:
        return
    mark, rows, tail = caught
    if not worth_rewriting(tail.lines - mark["lines"], len(rows)):
        return
    name = store.rig.name
    rows = [row for row in rows if row[0] not in tail.records]
    rows += [_row(parse(name, record), tail.at[record_id]) for record_id, record in tail.records.items()
             if is_open(record)]
    queuedigest.write(store.queue_digest_path, tail.mark(), rows)


def _lines_at(store: RigStore, places: list[tuple[str, int]]) -> list[dict] | None:
    """The records on the lines at ``places`` (id, offset); None when one is not that id's line."""
    out = []
    with open(store.ephemeral_path, "rb") as fh:
        for context_id, offset in places:
            fh.seek(offset)
            line = fh.readline()
            try:
                record = json.loads(line)
            except ValueError:
                return None
            if not isinstance(record, dict) or record.get("id") != context_id:
                return None
            out.append(record)
    return out


def _carry_item_map(store: RigStore, body: bytes, tail: LogTail, opened: list[Context]) -> None:
    """Keep the map at ``tail``'s end: its lines less the records the tail changed, plus the open
    contexts the tail leaves (``opened``)."""
    try:
        kept = [row for row in openitems.rows(body) if row[1] not in tail.records]
    except ValueError:
        return
    kept += [(c.work_id, c.id, tail.at[c.id]) for c in opened if c.work_id]
    openitems.write(store.open_items_path, tail.mark(), kept)


def _keep_item_map(store: RigStore, every: list[Context]) -> None:
    """Keep the map of ``every`` open context of the rig, as this store has just read them."""
    mark = store.read_mark()
    if mark is None:
        return
    at = store.line_offsets() if not store.log_unread() else None
    rows = []
    for context in every:
        if context.work_id:
            offset = at.get(context.id) if at is not None else store.known_offset(context.id)
            if offset is None:
                return
            rows.append((context.work_id, context.id, offset))
    openitems.write(store.open_items_path, mark, rows)
