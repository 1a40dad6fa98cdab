"""One rig's issue store: durable items plus an append-only ephemeral log.

* ``issues.jsonl`` (or an external beads export, read-only) holds work items;
  writers rewrite it atomically under the rig lock.
* ``ephemeral.jsonl`` holds sluice's own records (sling contexts).  Every line
  is the whole current version of one record; the last line for an id wins,
  so an update is one appended line, written with one ``write()``.

Readers take no lock.  A torn last line (a crash mid-append) is skipped with a
warning; any other bad line is a :class:`StoreCorrupt` naming file and line,
and nothing is rewritten.  Reads of the durable file go through the derived
:class:`~sluice.store.index.DurableIndex`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from sluice.core import readiness
from sluice.core.items import is_context, normalise, to_node
from sluice.errors import ConfigError, InvalidOperation, ReadOnlyStore, StoreCorrupt, UnknownItem
from sluice.logs import log
from sluice.store import columns, fsutil
from sluice.store.index import DurableIndex, blocked_line, with_causes
from sluice.store.jsonlog import QUICK_ID, LogTail, TornLine, line_text, parse_line, worth_rewriting
from sluice.store.town import Rig, Town

#: The layout of ``<rig>.ephemeral.json``; a summary of another layout is ignored and written again.
SUMMARY_VERSION = 3
#: The edge types of an ephemeral record that can change a durable item's readiness.
READINESS_EDGES = ("parent-child", "waits-for")
#: Bytes of the log parsed at a time by :meth:`RigStore.read_lean`.
LEAN_BLOCK = 4 << 20


def read_jsonl(path: Path, warn: Callable[[str], None] | None = None) -> Iterator[tuple[int, dict, str]]:
    """(line number, normalised record, raw text) for every record line of ``path``.

    Streams the file, so a 100,000-line export never sits in memory whole.  Only
    the final line can lack its newline; if it is also unparseable it is a torn
    write and is skipped with a warning.  A priority that is not an integer 0–4
    is read as the default and warned about, naming file and line.  Warnings
    go to ``warn`` (default: the ``sluice`` logger).
    """
    warn = warn or log.warning
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed in the finally below, the generator may pause
    except FileNotFoundError:
        return
    try:
        for number, chunk in enumerate(fh, start=1):
            try:
                parsed = parse_line(path, number, chunk, warn)
            except TornLine:
                warn(f"{path}:{number}: ignoring a torn last line (an interrupted write)")
                return
            if parsed is not None:
                yield number, parsed, chunk.decode("utf-8").rstrip("\r\n")
    finally:
        fh.close()


#: Per record id, a function making the record's new line from its latest line's text (no newline);
#: it returns None for a line it does not know, and the record is then parsed and changed as a dict.
Patches = dict[str, Callable[[str], str | None]]


def _patched(line: bytes, record_id: str, patch: Callable[[str], str | None] | None) -> str | None:
    """``patch``'s new line for ``line`` if it is a whole line of ``record_id`` as sluice writes it."""
    if patch is None or not line.endswith(b"\n"):
        return None
    match = QUICK_ID.match(line)
    if match is None or match.group(1) != record_id.encode("utf-8"):
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return patch(text[:-1])


def decode_all(raws: Iterable[str]) -> list[dict]:
    """The normalised records of index rows' raw texts, in order.

    One JSON array parsed at once instead of one ``json.loads`` per row: a
    dispatch cycle decodes every queued item, and the per-call overhead was a
    quarter of that.  The index holds only lines that parsed as one object
    each when it was built, so the array has exactly one record per text.
    """
    return [normalise(record) for record in json.loads("[" + ",".join(raws) + "]")]


class RigStore:
    """Items and sling contexts of one rig."""

    def __init__(self, town: Town, rig: Rig):
        self.town = town
        self.rig = rig
        self.ephemeral_path, self.durable_path = town.rig_files(rig)
        self.lock_path = town.runtime / "locks" / f"rig-{rig.name}.lock"
        self.index_path = town.runtime / "index" / f"{rig.name}.sqlite"
        self.queue_digest_path = self.index_path.with_suffix(".queue.json")  # sluice.store.queuedigest
        self.open_items_path = self.index_path.with_suffix(".open-items")  # sluice.store.openitems
        self.index = DurableIndex(self.index_path, self.durable_path, self._load)
        self._log = LogTail(self.ephemeral_path)
        self._log_stale = True
        self._summary: tuple[str, tuple[set[str], bool, bool]] | None = None
        self._unkept: set[str] = set()
        # Without a whole read: a mark of the log and where the latest line of each record known stands.
        self._sparse: tuple[dict, dict[str, int]] | None = None
        self._own = False  # every line after the mark handed to know_lines is this store's own
        self._refresh_source()

    def _refresh_source(self) -> None:
        if self.rig.command is not None:  # a command source: its snapshot brought up to date first
            from sluice.store.sources import ensure_fresh

            ensure_fresh(self.town, self.rig)

    @property
    def read_only(self) -> bool:
        return self.rig.read_only

    def _load(self):
        if self.rig.command is not None and not self.durable_path.exists():
            from sluice.store.sources import read_state, shown

            error = read_state(self.town, self.rig.name).get("error") or "it has not run yet"
            raise ConfigError(f"rig {self.rig.name!r} reads its items through"
                              f" `{shown(self.rig.command.argv)}`, which has given no snapshot yet ({error})")
        if self.read_only and not self.durable_path.exists():
            # An own store that does not exist yet is simply empty; a vanished export is not: read as
            # empty, every queued context for its items would look orphaned and be closed.
            raise ConfigError(
                f"rig {self.rig.name!r} reads its items from {self.durable_path}, which does not exist"
                " (restore the beads export there)"
            )
        for _number, record, raw in read_jsonl(self.durable_path, self.index.warn):
            yield record, raw

    def refresh(self) -> None:
        """Forget cached reads, so the next read sees other writers' changes."""
        self.index.close()
        self._log_stale = True

    def recheck(self) -> None:
        """Before reusing this store for another call: forget what other writers changed since.

        The index stays open while its source file is unchanged (a new open
        would find the same index); the ephemeral log is read on from where
        it was (only appended lines, or all of it when it was rewritten).
        """
        self._refresh_source()
        self.index.forget_if_changed()
        self._log_stale = True

    # -- reading -------------------------------------------------------------
    def ephemeral(self) -> dict[str, dict]:
        """The ephemeral records, last line winning (cached until :meth:`refresh` or a write)."""
        if self._log_stale:
            return self.ephemeral_fresh()
        return self._log.records

    def ephemeral_fresh(self) -> dict[str, dict]:
        """The ephemeral records as on disk now; only lines appended since the last read are parsed."""
        if self._log.offset == 0:  # a whole read: each digest of the log may be kept from it
            self._unkept = {"summary", "queue"}
        self._log.catch_up()
        self._log_stale = False
        return self._log.records

    def know_lines(self, mark: dict, offsets: dict[str, int]) -> None:
        """Remember, for a log not read whole, where records' latest lines stand as of ``mark``.

        A reader that took the open queue from its digest hands this over, so
        a write to those records (a launch mark, a close) reads their lines
        and the log's end, never the whole log.
        """
        if self.log_unread():
            self._sparse = (mark, offsets)
            self._own = True

    def own_mark(self) -> dict | None:
        """The log's mark as this store last wrote or read it, when every line after the mark handed to
        :meth:`know_lines` is one this store appended; None when another writer's line was seen since, or
        the store lost its place (then it read, or will read, the log whole).

        What a dispatch cycle leaves for the next one stands on it
        (:mod:`sluice.scheduler.chain`): a queue known at a mark, changed
        since only by this process's own lines.
        """
        if self._sparse is None or not self._own or not self.log_unread():
            return None
        return dict(self._sparse[0])

    def read_mark(self) -> dict | None:
        """How far this process has the log as it stands (its digest's tail included), whichever way it
        read it; None when that is not known (no read yet)."""
        if not self.log_unread():
            return self._log.mark()
        if self._sparse is not None:
            return dict(self._sparse[0])
        # A log that was not there when read (a rig nothing was ever slung to) leaves no trace of the read.
        return None if self.ephemeral_path.exists() else LogTail(self.ephemeral_path).mark()

    def known_offset(self, record_id: str) -> int | None:
        """Where ``record_id``'s latest line starts, as known without a whole read; None: not known."""
        return self._sparse[1].get(record_id) if self._sparse is not None and self.log_unread() else None

    def read_lean(self, keep: Callable[[dict], object]
                  ) -> tuple[dict[str, object], dict, dict[str, int]] | None:
        """The log read whole, keeping of each record's latest version only ``keep(record)``, by id;
        with the mark read to and where each record's latest line starts.  None: there is no log.

        For a process that needs little of each record (a clear: its open
        contexts) and found no digest to start from (the first command after a
        compaction): the log is parsed a block of lines at a time, so its
        records are never all in memory at once (a whole read of 100,000
        contexts holds over 400 MB).  The log summary is kept from the same
        read, and this store then changes records as after a digest
        (:meth:`know_lines`): reading only their lines.
        """
        if not self.log_unread():
            raise InvalidOperation("read_lean is for a store that has not read its log")
        tail = LogTail(self.ephemeral_path, keep=lambda record: (keep(record), *self._bits(record)))
        tail.catch_up(block=LEAN_BLOCK)
        if tail.inode is None:
            return None
        mark = tail.mark()
        rows = tail.records.values()
        edges, quiet = any(row[1] for row in rows), all(row[2] for row in rows)
        self._keep_summary(mark, (set(tail.records), edges, quiet))
        self.know_lines(mark, tail.at)
        return {record_id: row[0] for record_id, row in tail.records.items()}, mark, tail.at

    def _latest_of(self, ids: Iterable[str], patches: Patches | None = None) -> dict[str, dict | str] | None:
        """Under the rig lock: the latest versions of ``ids``, read at their lines and from the log's end.

        A line read at its place whose id has a patch is handed to it first:
        what the patch makes of it (the record's new line, as text) stands in
        for the record, which is then not parsed; a line the patch does not
        know is parsed as usual.  None (read the log whole) when the log was
        read whole already, no place is known for one of the ids, or the log
        no longer continues from the mark (replaced, cut, changed before it).
        """
        if self._sparse is None or not self.log_unread():
            return None
        mark, offsets = self._sparse
        ids = list(ids)
        tail = LogTail.resume(self.ephemeral_path, mark)
        if tail is None:
            self._sparse = None
            return None
        offsets.update(tail.at)
        if tail.lines != mark["lines"]:  # lines another writer appended since
            self._own = False
        self._sparse = (tail.mark(), offsets)
        if any(rid not in offsets for rid in ids):
            return None
        patches = patches or {}
        out: dict[str, dict | str] = {rid: tail.records[rid] for rid in ids if rid in tail.records}
        with open(self.ephemeral_path, "rb") as fh:
            for rid in ids:
                if rid in out:
                    continue
                fh.seek(offsets[rid])
                line = fh.readline()
                patched = _patched(line, rid, patches.get(rid))
                if patched is not None:
                    out[rid] = patched
                    continue
                try:
                    record = parse_line(self.ephemeral_path, 0, line)
                except (TornLine, StoreCorrupt):
                    record = None
                if record is None or record["id"] != rid:  # not where it was said to be: read whole
                    self._sparse = None
                    return None
                out[rid] = record
        return out

    def _note_append(self, start: int, end: int, inode: int, ids: list[str], data: bytes) -> None:
        """After an append of ``data`` at byte ``start``: the known lines and the mark move past it."""
        if self._sparse is None:
            return
        mark, offsets = self._sparse
        if mark["inode"] != inode or mark["offset"] != start or end != start + len(data):
            self._sparse = None  # a mended tail or another writer's bytes: the mark no longer fits
            return
        at = start
        for record_id, line in zip(ids, data.split(b"\n"), strict=False):
            offsets[record_id] = at
            at += len(line) + 1
        self._sparse = (LogTail.mark_after(mark, data, len(ids)), offsets)

    def keeps(self, digest: str) -> bool:
        """True once after a whole read of the log for ``digest`` ("summary", "queue"): keep yours now.

        A digest is written by the reader that parsed the whole log, whichever
        digest made it read, so the next process finds both.
        """
        if digest in self._unkept and self._log.inode is not None:
            self._unkept.discard(digest)
            return True
        return False

    def get(self, item_id: str) -> dict | None:
        # A log not read yet is only read when its summary says it holds the id.
        if not self._log_stale or item_id in self._ephemeral_summary()[0]:
            record = self.ephemeral().get(item_id)
            if record is not None:
                return record
        raw = self.index.get_raw(item_id)
        return normalise(json.loads(raw)) if raw is not None else None

    def get_many(self, ids: Iterable[str]) -> dict[str, dict]:
        """``get`` for many ids at once (one index query per 500 ids); unknown ids are absent."""
        ids = list(ids)
        # As in ``get``: a log not read yet is only read when its summary says it holds one of the ids.
        unneeded = self._log_stale and self._ephemeral_summary()[0].isdisjoint(ids)
        eph = {} if unneeded else self.ephemeral()
        out = {rid: eph[rid] for rid in ids if rid in eph}
        rest = [rid for rid in ids if rid not in out]
        found = self.index.get_raw_many(rest)
        out.update(zip(found, decode_all(found.values()), strict=True))
        return out

    def get_many_ready(self, ids: Iterable[str], now_ts: float
                       ) -> tuple[dict[str, dict], set[str], dict[str, int]]:
        """:meth:`get_many` of ``ids``, which of the records found are ready (:meth:`ready_among`),
        and the effective tokens of those the index holds (the others are absent).

        When the index alone answers readiness and none of the ids is in the
        ephemeral log, one query per few hundred ids answers all three.
        """
        ids = list(ids)
        if self._interplay() or not self._ephemeral_summary()[0].isdisjoint(ids):
            records = self.get_many(ids)
            return records, self.ready_among(now_ts, records), {}
        rows = self.index.raw_and_ready(ids, now_ts)
        records = dict(zip(rows, decode_all(row[0] for row in rows.values()), strict=True))
        return (records, {rid for rid, row in rows.items() if row[1]},
                {rid: row[2] for rid, row in rows.items()})

    def require(self, item_id: str) -> dict:
        record = self.get(item_id)
        if record is None:
            raise UnknownItem(f"no item {item_id!r} in rig {self.rig.name!r}")
        return record

    def durable(self, where: str = "", params=()) -> list[dict]:
        return [normalise(json.loads(raw)) for _id, raw in self.index.rows(where, params)]

    def durable_with_edge(self, dep_type: str, targets: Iterable[str]) -> list[dict]:
        """Durable items, in file order, with a ``dep_type`` edge to one of ``targets`` (one scan)."""
        return [normalise(json.loads(raw)) for _id, raw in self.index.rows_with_edge(dep_type, targets)]

    def contexts(self) -> list[dict]:
        """Every sling context of this rig, open or closed, in creation order."""
        return [r for r in self.ephemeral().values() if is_context(r)]

    def index_is_exact(self) -> bool:
        """True when the index's ready/blocked answers need no correction from ephemeral records."""
        return not self._interplay()

    def _interplay(self) -> bool:
        """True when ephemeral records could change durable rows' blocked state."""
        ids, edges, _quiet = self._ephemeral_summary()
        if not ids:
            return False
        return edges or bool(self.index.outside_targets() & ids)

    def _ephemeral_summary(self) -> tuple[set[str], bool, bool]:
        """The log's record ids; whether a non-context record has a parent or waits-for edge;
        whether every edge in the log is a ``tracks`` edge (then no ephemeral row can be blocked).

        Kept beside the index, keyed by the log's inode, size and mtime, so a read
        command over a rig with 10,000 queued contexts does not parse them all
        just to learn that they change no item's readiness.
        """
        sig = self.log_signature()
        if sig is None:
            return set(), False, True
        if self._summary is not None and self._summary[0] == sig:
            return self._summary[1]
        self._summary = (sig, self._read_summary())
        return self._summary[1]

    def log_ids(self) -> set[str]:
        """Every record id in the ephemeral log now, without parsing the whole log when it is unread.

        The kept summary and the lines after its mark give exactly the ids a
        whole read gives (ids only leave the log when compaction replaces
        it, and then the summary is read past), so a sling picking new ids
        under the creation lock does not parse 100,000 queued contexts.
        """
        if self.log_unread():
            return set(self._ephemeral_summary()[0])
        return set(self.ephemeral_fresh())

    def log_unread(self) -> bool:
        """True until this store first reads its ephemeral log (then it only reads what is appended)."""
        return self._log.inode is None

    def log_signature(self) -> str | None:
        """The log's :func:`~sluice.store.fsutil.file_signature` (what the in-memory summary is keyed by)."""
        return fsutil.file_signature(self.ephemeral_path)

    def line_offsets(self) -> dict[str, int]:
        """Where each record's latest line starts, as this store has read the log."""
        return self._log.at

    def log_mark(self) -> dict | None:
        """How far this store has read its log (:meth:`LogTail.mark`); None before a first read."""
        return None if self.log_unread() else self._log.mark()

    @property
    def _summary_path(self) -> Path:
        return self.index_path.with_suffix(".ephemeral.json")

    def forget_digests(self) -> None:
        """After the log is replaced: drop what is kept of the old one (a reader would reject it anyway)."""
        for path in (self._summary_path, self.queue_digest_path, self.open_items_path):
            with contextlib.suppress(OSError):
                path.unlink()

    def end_at_own_mark(self) -> dict | None:
        """:meth:`own_mark`, when the log ends exactly there now (no line after this store's last)."""
        mark = self.own_mark()
        try:
            stat = os.stat(self.ephemeral_path)
        except OSError:
            return None
        if mark is None or (stat.st_ino, stat.st_size) != (mark["inode"], mark["offset"]):
            return None
        return mark

    def summary_at_own_mark(self) -> tuple[dict, tuple[set[str], bool, bool]] | None:
        """(:meth:`end_at_own_mark`, the log summary as of it), from the kept summary and the lines after
        its mark; None when the log does not end there, no kept summary fits, or those lines cannot be
        read.  Never a whole read: a clear that finds no summary to carry over carries none."""
        mark = self.end_at_own_mark()
        if mark is None:
            return None
        try:
            caught_up = self._summary_caught_up()
        except (StoreCorrupt, OSError):  # the clear's own read says what is wrong with the log
            return None
        if caught_up is None or caught_up[3].mark()["offset"] != mark["offset"]:
            return None  # no summary, or a line appended since the mark was taken
        return mark, caught_up[2]

    def carry_summary(self, summary: tuple[set[str], bool, bool], mark: dict) -> None:
        """Keep ``summary`` (of an earlier mark, :meth:`summary_at_own_mark`) as the summary at ``mark``.

        Only for lines between the two that change no record's id or
        dependencies, which a close never does: a clear of 100,000 contexts
        then leaves the next reader no 100,000 lines to parse for ids it
        already knows.
        """
        self._keep_summary(mark, summary)

    def keep_summary_of(self, mark: dict, records: Iterable[dict]) -> None:
        """Keep the summary of a log just written whole (compaction) as ``records``, at its ``mark``."""
        self._keep_summary(mark, self._summarise(records))

    def _kept_summary(self) -> tuple[dict, tuple[set[str], bool, bool]] | None:
        try:
            kept = json.loads(self._summary_path.read_bytes())
            ids = columns.id_set(kept.get("ids"))  # one joined string: 100,000 ids parse as one
            if kept.get("version") == SUMMARY_VERSION and ids is not None:
                return kept["mark"], (ids, bool(kept["edges"]), bool(kept["quiet"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        return None

    def _keep_summary(self, mark: dict, summary: tuple[set[str], bool, bool]) -> None:
        ids, edges, quiet = summary
        body = json.dumps({"version": SUMMARY_VERSION, "mark": mark, "ids": columns.joined(sorted(ids)),
                           "edges": edges, "quiet": quiet})
        fsutil.write_cache(self._summary_path, body.encode("utf-8"))

    @staticmethod
    def _summarise(records: Iterable[dict]) -> tuple[set[str], bool, bool]:
        records = list(records)
        bits = [RigStore._bits(record) for record in records]
        return {record["id"] for record in records}, any(e for e, _q in bits), all(q for _e, q in bits)

    @staticmethod
    def _bits(record: dict) -> tuple[bool, bool]:
        """What one record adds to the summary: a readiness edge of a non-context; only ``tracks`` edges."""
        deps = record.get("dependencies") or ()
        edge = not is_context(record) and any(dep.get("type") in READINESS_EDGES for dep in deps)
        return edge, all(dep.get("type") == "tracks" for dep in deps)

    def _read_summary(self) -> tuple[set[str], bool, bool]:
        """The summary kept at some earlier point of the log, brought up to date from the lines after it.

        Writers never touch it (an append costs what it writes); the first
        reader after them parses only the appended lines and keeps the
        result.  Carried forward, it may only err on the safe side: an edge
        once in the log still counts after a later version drops it, which
        sends readers down the exact (slower) path, never a wrong one.
        """
        if not self.log_unread():  # read already: what is in memory is exact and costs no file
            summary = self._summarise(self.ephemeral_fresh().values())
            if self.keeps("summary"):
                self._keep_summary(self._log.mark(), summary)
            return summary
        caught_up = self._summary_caught_up()
        if caught_up is not None:
            mark, kept_ids, summary, tail = caught_up
            if worth_rewriting(tail.lines - mark["lines"], kept_ids):
                self._keep_summary(tail.mark(), summary)
            return summary
        summary = self._summarise(self.ephemeral_fresh().values())
        if self.keeps("summary"):
            self._keep_summary(self._log.mark(), summary)
        return summary

    def _summary_caught_up(self) -> tuple[dict, int, tuple[set[str], bool, bool], LogTail] | None:
        """The kept summary's mark and size, the summary brought up to the log's end from the lines
        after that mark, and the tail read; None when no kept summary fits the log."""
        caught = LogTail.after_kept(self.ephemeral_path, self._kept_summary())
        if caught is None:
            return None
        mark, summary, tail = caught
        kept_ids = len(summary[0])
        if tail.lines != mark["lines"]:
            ids, edges, quiet = self._summarise(tail.records.values())
            summary = (summary[0] | ids, summary[1] or edges, summary[2] and quiet)
        return mark, kept_ids, summary, tail

    def ready_raw(self, now_ts: float, limit: int = 0) -> list[tuple]:
        """(priority, created_ts, id, raw) of ready items in beads order."""
        if not self._interplay():
            return self.index.ready_rows(now_ts, limit)
        nodes = self._all_nodes()
        ready = readiness.ready_nodes(nodes, now_ts, limit=limit)
        return [(n.priority, n.created_ts, n.id, self._raw(n.id)) for n in ready]

    def next_release(self, now_ts: float) -> float:
        """When the clock alone next makes an item of this rig ready (a deferral ends; infinity: never).

        ``now_ts`` itself when ephemeral records mix into readiness: then
        only a full reading can say, and nothing may count on the answer.
        """
        return now_ts if self._interplay() else self.index.next_release(now_ts)

    def ready_among(self, now_ts: float, ids: Iterable[str]) -> set[str]:
        """Which of ``ids`` are ready: the ids of :meth:`ready_raw` among them, without reading the rest."""
        ids = set(ids)
        if not self._interplay():
            return self.index.ready_among(now_ts, ids)
        return {row[2] for row in self.ready_raw(now_ts, 0) if row[2] in ids}

    def blocked(self) -> list[tuple[dict, list[str]]]:
        """Blocked rows (ephemeral ones included) with what blocks each (K1–K5)."""
        return [(self.get(row[2]) if row[3] is None else normalise(json.loads(row[3])), row[4])
                for row in self.blocked_raw()]

    def blocked_by(self, item_id: str) -> list[str] | None:
        """What blocks ``item_id``, as :meth:`blocked` names it; None when it is not among its rows.

        ``scheduler explain`` asks it of one item: a lookup by id when no
        ephemeral record can change readiness, not the 13,000 rows of a busy rig.
        """
        if not self._interplay() and self._ephemeral_summary()[2]:
            return self.index.blocked_by(item_id)
        return next((list(row[4]) for row in self.blocked_raw() if row[2] == item_id), None)

    def blocked_raw(self) -> list[tuple]:
        """(priority, created_ts, id, raw or None, blocked_by) of blocked rows in beads order.

        ``raw`` is the durable line's text; it is None for ephemeral rows.
        """
        interplay = self._interplay()
        if not interplay and self._ephemeral_summary()[2]:
            return self.index.blocked_listing()  # no ephemeral row can be blocked: no need to read the log
        eph = self.ephemeral()
        if interplay:
            nodes = self._all_nodes()
            return [
                (n.priority, n.created_ts, n.id, None if n.id in eph else self.index.get_raw(n.id), causes)
                for n, causes in readiness.blocked_nodes(nodes)
            ]
        rows = self.index.blocked_listing()
        if eph:
            rows.extend((n.priority, n.created_ts, n.id, None, c) for n, c in self._ephemeral_blocked(eph))
            rows.sort(key=lambda row: (row[0], -row[1], row[2]))
        return rows

    def blocked_lines(self) -> list[tuple[int, float, str, str]]:
        """(priority, created_ts, id, JSON text) of :meth:`blocked_raw`'s rows as ``item blocked`` lists them.

        A durable row is :func:`~sluice.store.index.blocked_line` of its stored
        line (kept written out in the index when no ephemeral record is
        involved); an ephemeral row is its record with the two keys added.
        """
        if not self._interplay() and self._ephemeral_summary()[2]:
            return self.index.blocked_lines()
        out = []
        for priority, created_ts, item_id, raw, causes in self.blocked_raw():
            if raw is not None:
                text = blocked_line(raw, causes)
            else:
                text = with_causes(self.ephemeral().get(item_id) or {"id": item_id}, causes)
            out.append((priority, created_ts, item_id, text))
        return out

    def _ephemeral_blocked(self, eph: dict[str, dict]) -> list[tuple]:
        nodes = {rid: to_node(r) for rid, r in eph.items() if r.get("status") != "tombstone"}
        targets = {t for n in nodes.values() for _t, t, _g in n.deps if t not in nodes}
        for tid, status in self.index.statuses(targets).items():
            nodes[tid] = readiness.Node(tid, status=status)
        eph_nodes = {rid: n for rid, n in nodes.items() if rid in eph}
        return [(n, c) for n, c in readiness.blocked_nodes(nodes) if n.id in eph_nodes]

    def _all_nodes(self) -> dict[str, readiness.Node]:
        nodes = self.index.nodes()
        for rid, record in self.ephemeral().items():
            if record.get("status") != "tombstone":
                node = to_node(record)
                # A record of the ephemeral log is ephemeral (never ready work), flag or no flag,
                # just as it is when the index answers alone.
                node.ephemeral = True
                nodes[rid] = node
        return nodes

    def _raw(self, item_id: str) -> str:
        record = self.ephemeral().get(item_id)
        if record is not None:
            return json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        return self.index.get_raw(item_id) or "{}"

    def statuses(self, ids) -> dict[str, str]:
        ids = set(ids)
        out = self.index.statuses(ids)
        for rid in ids & self.ephemeral().keys():
            out[rid] = self.ephemeral()[rid].get("status", "open")
        return out

    def merge_queue_counts(self) -> dict[str, int]:
        """``merge-request`` items per status: open ones are queued, in_progress ones running."""
        return self.index.status_counts("merge-request")

    # -- writing durable items --------------------------------------------------
    def require_writable(self) -> None:
        """Raise ReadOnlyStore when this rig reads its items from an external export."""
        if self.rig.command is not None:
            from sluice.store.sources import shown

            raise ReadOnlyStore(
                f"rig {self.rig.name!r} reads its items through `{shown(self.rig.command.argv)}`;"
                " change items with beads, or `sluice item import` them into a rig of its own"
            )
        if self.read_only:
            raise ReadOnlyStore(
                f"rig {self.rig.name!r} reads its items from {self.durable_path}, a read-only beads export;"
                " change items with beads there, or `sluice item import` them into a rig of its own"
            )

    def mutate_durable(self, change: Callable[[list[dict]], object]):
        """Run ``change(records)`` on the current durable records and rewrite them atomically."""
        self.require_writable()
        with fsutil.file_lock(self.lock_path):
            records = [record for _n, record, _raw in read_jsonl(self.durable_path)]
            result = change(records)
            body = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)
            fsutil.atomic_write_bytes(self.durable_path, body.encode("utf-8"))
        self.refresh()
        return result

    # -- writing ephemeral records ---------------------------------------------
    def put_ephemeral_many(self, records: list[dict]) -> None:
        """Append several records under one lock with one ``write()`` (a big sling is one append).

        Takes the rig lock itself; the lock is not re-entrant, so never call
        this while holding it.
        """
        if not records:
            return
        with fsutil.file_lock(self.lock_path):
            self._append_locked([r["id"] for r in records], [line_text(r) for r in records])
        self._log_stale = True

    def _append_locked(self, ids: list[str], lines: list[str]) -> None:
        """Append one line per record (``lines``, the texts of records ``ids``) in one write."""
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        self._mend_torn_tail()
        start, stat = fsutil.append_bytes(self.ephemeral_path, data, mend=False)  # all or nothing, fsynced
        self._note_append(start, stat.st_size, stat.st_ino, ids, data)

    def update_ephemeral_many(self, changes: dict[str, Callable[[dict], dict | None]],
                              patches: Patches | None = None) -> dict[str, dict | str]:
        """Apply each ``change`` to its record's latest version, under one lock, with one append.

        Reads only what was appended since this store last read the log, so
        closing N contexts costs one read and one write, not N of each.
        Unknown ids and changes returning None write nothing.  ``patches``
        (by id) may make a record's new line from the text of its latest
        line where that was read at its known place, unparsed (see
        :meth:`_latest_of`).  Returns what was written, by id: the record,
        or for a patched one the text of its new line.
        """
        written: dict[str, dict | str] = {}
        if not changes:
            return written
        with fsutil.file_lock(self.lock_path):
            current = self._latest_of(changes, patches)
            if current is None:
                current = self.ephemeral_fresh()
            lines = []
            for record_id, change in changes.items():
                record = current.get(record_id)
                if record is None:
                    continue
                if isinstance(record, str):  # patched from its line already
                    written[record_id] = record
                    lines.append(record)
                    continue
                updated = change(dict(record))
                if updated is not None:
                    written[record_id] = updated
                    lines.append(line_text(updated))
            if written:
                self._append_locked(list(written), lines)
                self._log_stale = True
        return written

    def _mend_torn_tail(self) -> None:
        """Before appending: drop a torn final fragment so it cannot fuse with the new line."""
        try:
            fsutil.mend_torn_tail(self.ephemeral_path)
        except OSError as err:
            raise fsutil.storage_error(self.ephemeral_path, err, "append to",
                                       "; nothing of this change was written") from None


class Stores:
    """Every rig's store in a town, opened lazily and routed by id prefix."""

    def __init__(self, town: Town):
        self.town = town
        self._open: dict[str, RigStore] = {}
        #: Rigs with a file that cannot be read (a malformed line, an unreadable file): rig → what,
        #: naming file and line.  Their work is held, never closed, and every other rig goes on.
        self.unreadable: dict[str, str] = {}

    def hold_unreadable(self, name: str, err: Exception) -> None:
        self.unreadable.setdefault(name, str(err))

    def rig(self, name: str) -> RigStore:
        if name not in self._open:
            self._open[name] = RigStore(self.town, self.town.rig(name))
        return self._open[name]

    def all(self) -> list[RigStore]:
        return [self.rig(r.name) for r in self.town.rigs()]

    def for_id(self, item_id: str) -> RigStore:
        """The store an id routes to, falling back to a search of every rig."""
        rig = self.town.rig_for_id(item_id)
        if rig is not None:
            store = self.rig(rig.name)
            if store.get(item_id) is not None:
                return store
        for store in self.all():
            if store.rig.name in self.unreadable:
                continue
            try:
                if store.get(item_id) is not None:
                    return store
            except (StoreCorrupt, OSError) as err:  # another rig's damage does not hide this item
                self.hold_unreadable(store.rig.name, err)
        raise UnknownItem(f"no item {item_id!r} in any rig of this town")

    def find(self, item_id: str) -> tuple[RigStore, dict]:
        store = self.for_id(item_id)
        return store, store.require(item_id)

    def find_many(self, item_ids: Iterable[str]) -> dict[str, tuple[RigStore, dict]]:
        """``find`` for many ids with a few queries per rig; ids no rig holds are absent.

        Same answer as :meth:`find` one by one: the rig an id's prefix routes
        to if it holds the id, else the first rig (in name order) that does.
        """
        wanted = list(dict.fromkeys(item_ids))
        out: dict[str, tuple[RigStore, dict]] = {}
        routed: dict[str, list[str]] = {}
        for item_id in wanted:
            rig = self.town.rig_for_id(item_id)
            if rig is not None:
                routed.setdefault(rig.name, []).append(item_id)
        for name, ids in routed.items():
            store = self.rig(name)
            out.update((rid, (store, record)) for rid, record in store.get_many(ids).items())
        for store in self.all():
            missing = [rid for rid in wanted if rid not in out]
            if not missing:
                break
            out.update((rid, (store, record)) for rid, record in store.get_many(missing).items())
        return out

    def refresh(self) -> None:
        for store in self._open.values():
            store.refresh()

    def recheck(self) -> None:
        for store in self._open.values():
            store.recheck()


def ensure_no_cycle(records_by_id: dict[str, dict], source: str, target: str) -> None:
    """Refuse a blocking edge source→target that would close a cycle."""
    seen, stack = set(), [target]
    while stack:
        current = stack.pop()
        if current == source:
            raise InvalidOperation(f"{source} → {target} would create a dependency cycle")
        if current in seen:
            continue
        seen.add(current)
        for dep in (records_by_id.get(current) or {}).get("dependencies") or ():
            if dep.get("type") in ("blocks", "conditional-blocks", "parent-child", "waits-for"):
                stack.append(dep.get("depends_on_id"))
