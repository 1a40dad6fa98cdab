"""Reading and writing JSON-lines logs: one record per line, torn tails tolerated.

:func:`parse_line` holds the rules for one line (shared by every reader);
:class:`LogTail` remembers how far an append-only log has been read, so a
long-lived reader parses only what was appended since.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sluice.core.items import normalise, priority_problem, shape_problem, skip_record
from sluice.core.text import printable
from sluice.errors import StoreCorrupt
from sluice.logs import log


class TornLine(Exception):
    """The last line lacks its newline and does not parse: a write that was cut short."""


def parse_line(path: Path, number: int, chunk: bytes, warn: Callable[[str], None] | None = None
               ) -> dict | None:
    """The normalised record on one line, None for a blank or skipped line.

    Raises :class:`TornLine` for an unparseable line without its newline (only
    the last line of a file can be one) and :class:`StoreCorrupt` naming file
    and line for any other bad line.  A priority that is not an integer 0–4 is
    read as the default and warned about (to ``warn``, default the logger).
    """
    if not chunk.strip():
        return None
    try:
        record = json.loads(chunk)
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as err:  # RecursionError: nested too deeply to parse
        if not chunk.endswith(b"\n"):
            raise TornLine from None
        raise StoreCorrupt(path, number, f"malformed record ({_short(err)})") from None
    if skip_record(record):
        return None
    if not isinstance(record.get("id"), str) or not record["id"]:
        raise StoreCorrupt(path, number, "record has no string 'id'")
    problem = shape_problem(record)
    if problem is not None:
        raise StoreCorrupt(path, number, f"record {record['id']!r}: {problem}")
    problem = priority_problem(record.get("priority"))
    if problem is not None:
        (warn or log.warning)(f"{path}:{number}: record {printable(record['id'])}: {problem}")
    return normalise(record)


class LogTail:
    """What has been read of an append-only log, so the next read parses only what was appended.

    ``records`` maps id to its latest version (first-seen order).  A read
    continues from ``offset`` (the end of the last complete line) while the
    file is the same one (inode) and still ends its read part with the same
    bytes; a log replaced by compaction or cut shorter is read again whole.

    A mark also carries the CRC-32 of everything read (``crc``), so a read
    can continue in a *copy* of the log (another inode: a town copied,
    restored from a backup, moved to another disk) once the copy's first
    ``offset`` bytes are found to have that CRC: one sequential pass over
    bytes, instead of parsing every line again and losing every digest kept
    at a mark of the original.  A mark written before marks carried a CRC
    (or one of a tail resumed from such a mark) holds none, and continues
    only in the same file, as before.
    """

    GUARD = 64  # bytes before ``offset`` that must be unchanged for a read to continue
    #: Bytes read at a time to check a copy's prefix against a mark's CRC.
    CRC_BLOCK = 1 << 20

    def __init__(self, path: Path, keep: Callable[[dict], Any] | None = None):
        self.path = path
        #: What is kept of each record's latest version: the record itself, or ``keep(record)`` for a
        #: reader that needs only a little of each (read a block at a time, see :meth:`catch_up`).
        self.keep = keep
        self.records: dict[str, Any] = {}
        self.positions: dict[str, int] = {}  # id → line number of its latest version
        self.at: dict[str, int] = {}  # id → byte offset of the line holding its latest version
        self.offset = 0
        self.lines = 0
        self.inode: int | None = None
        self.guard = b""
        self.crc: int | None = 0  # of the ``offset`` bytes read; None: not known (a mark without one)

    def mark(self) -> dict:
        """Where this reader stands, as plain JSON: what a digest of the log read so far is keyed by."""
        mark = {"inode": self.inode, "offset": self.offset, "lines": self.lines, "guard": self.guard.hex()}
        if self.crc is not None:
            mark["crc"] = self.crc
        return mark

    @classmethod
    def mark_of_written(cls, path: Path, data: bytes, lines: int) -> dict:
        """The :meth:`mark` of a reader that has read all of ``path``, just written whole as ``data``."""
        tail = cls(path)
        tail.inode, tail.offset, tail.lines = os.stat(path).st_ino, len(data), lines
        tail.guard = data[-cls.GUARD :]
        tail.crc = zlib.crc32(data)
        return tail.mark()

    @staticmethod
    def mark_after(mark: dict, data: bytes, lines: int) -> dict:
        """``mark`` moved past ``data`` (``lines`` whole lines) appended right at it."""
        moved = {"inode": mark["inode"], "offset": mark["offset"] + len(data), "lines": mark["lines"] + lines,
                 "guard": (bytes.fromhex(mark["guard"]) + data)[-LogTail.GUARD:].hex()}
        if mark.get("crc") is not None:
            moved["crc"] = zlib.crc32(data, mark["crc"])
        return moved

    @classmethod
    def after_kept(cls, path: Path, kept: tuple[dict, Any] | None) -> tuple[dict, Any, LogTail] | None:
        """A derived file's kept ``(mark, body)`` with a reader of the log's lines after that mark, as
        ``(mark, body, tail)``; None when nothing is kept or the log no longer continues from the mark."""
        if kept is None:
            return None
        mark, body = kept
        tail = cls.resume(path, mark)
        return None if tail is None else (mark, body, tail)

    @classmethod
    def resume(cls, path: Path, mark: object, *, whole_prefix: bool = False) -> LogTail | None:
        """A reader that parses only what was appended after ``mark`` (its ``records`` hold just that).

        None when the log no longer continues from ``mark`` (replaced, cut
        shorter, its bytes before the mark changed) or the mark is not one:
        then the caller reads the log whole.  ``whole_prefix``: in the same
        file too, a mark with a CRC continues only once the whole prefix is
        found to have it, not just the :data:`GUARD` bytes before the mark —
        for a mark kept where compaction does not forget it, whose log a new
        file at the same (reused) inode may have replaced.
        """
        tail = cls(path)
        try:
            tail.inode, tail.offset, tail.lines = mark["inode"], mark["offset"], mark["lines"]  # type: ignore[index]
            tail.guard = bytes.fromhex(mark["guard"])  # type: ignore[index]
            tail.crc = mark.get("crc")  # type: ignore[union-attr]
        except (TypeError, KeyError, ValueError, AttributeError):
            return None
        if not all(type(v) is int and v >= 0 for v in (tail.inode, tail.offset, tail.lines)) or \
                len(tail.guard) != min(tail.offset, cls.GUARD):
            return None
        if tail.crc is not None and not (type(tail.crc) is int and 0 <= tail.crc < 1 << 32):
            return None
        try:
            fh = open(path, "rb")  # noqa: SIM115 - closed by the with below
        except FileNotFoundError:
            return None
        with fh:
            if not tail._continues(fh, os.fstat(fh.fileno()), whole_prefix):
                return None
            fh.seek(tail.offset)
            data = fh.read()
        tail._parse(data)
        return tail

    def catch_up(self, block: int = 0) -> dict[str, Any]:
        """Parse what was appended since the last read (all of it when the log was replaced).

        ``block`` (bytes, 0: all at once) parses it a block of whole lines at
        a time, each id's latest version across blocks winning as across
        appends, so with ``keep`` no more than one block's records are ever
        in memory.
        """
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - closed by the with below
        except FileNotFoundError:
            self.__init__(self.path, self.keep)  # type: ignore[misc]
            return self.records
        with fh:
            stat = os.fstat(fh.fileno())
            if not self._continues(fh, stat):
                self.__init__(self.path, self.keep)  # type: ignore[misc]
                self.inode = stat.st_ino
            fh.seek(self.offset)
            if not block:
                self._parse(fh.read())
                return self.records
            rest = b""
            while chunk := fh.read(block):
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                if cut:
                    self._parse(data[:cut])
                rest = data[cut:]
            if rest:  # a last line without its newline: as a whole read takes it
                self._parse(rest)
        return self.records

    def _continues(self, fh, stat, whole_prefix: bool = False) -> bool:
        if self.inode is None or stat.st_size < self.offset:
            return False
        # another file (a copy of the one read, if its prefix says so), or one that must prove its prefix
        if stat.st_ino != self.inode or (whole_prefix and self.crc is not None):
            if self.crc is None or not self._same_prefix(fh):
                return False
            self.inode = stat.st_ino
            return True
        if not self.guard:
            return True
        fh.seek(self.offset - len(self.guard))
        return fh.read(len(self.guard)) == self.guard

    def _same_prefix(self, fh) -> bool:
        """Whether the file's first ``offset`` bytes have the CRC-32 of what this reader read."""
        fh.seek(0)
        crc, left = 0, self.offset
        while left:
            chunk = fh.read(min(self.CRC_BLOCK, left))
            if not chunk:
                return False
            crc = zlib.crc32(chunk, crc)
            left -= len(chunk)
        return crc == self.crc

    def _parse(self, data: bytes) -> None:
        """Read the lines in ``data``, parsing only each record's latest version.

        A log holds every version of every record (a context is written when
        slung, when its launch starts, when it closes …), and a command wants
        the latest.  sluice writes each record as ``{"id":"…",…}``, so each
        line's id is read without parsing the line, and a line a later line of
        the same id supersedes is skipped; every other line (the latest
        versions, any line of another shape, a final line without its newline)
        is parsed and checked as always.  Should the latest line of an id be
        one beads skips, the versions before it are parsed, newest first, until
        one stands, exactly as reading every line would.
        """
        spans: list[tuple[int, int, bool]] = []
        start, end = 0, len(data)
        while start < end:
            newline = data.find(b"\n", start)
            stop = end if newline < 0 else newline + 1
            spans.append((start, stop, newline >= 0))
            start = stop
        quick: list[bytes | None] = [None] * len(spans)
        versions: dict[bytes, list[int]] = {}
        for index, (begin, _stop, complete) in enumerate(spans):
            match = QUICK_ID.match(data, begin) if complete else None
            if match is not None:
                quick[index] = match.group(1)
                versions.setdefault(match.group(1), []).append(index)
        found: dict[str, tuple[dict, int, int]] = {}
        first: dict[str, int] = {}  # id → index of its first line here: new ids keep first-seen order
        consumed = lines = 0
        for index, (begin, stop, complete) in enumerate(spans):
            number = self.lines + index + 1
            key = quick[index]
            if key is not None and versions[key][-1] != index:
                consumed, lines = stop, index + 1
                continue  # a later line holds this record's newer version
            try:
                record = parse_line(self.path, number, data[begin:stop])
            except TornLine:
                log.warning("%s:%d: ignoring a torn last line (an interrupted write)", self.path, number)
                break
            if not complete and record is None:
                break  # blank text after the last newline: not a line yet
            if record is None and key is not None:
                record, number, begin = self._latest_standing(data, spans, versions[key][:-1])
            if record is not None:
                record_id = record["id"]
                seen = self._first_standing(data, spans, versions[key]) if key is not None else index
                first[record_id] = min(first.get(record_id, seen), seen)
                if record_id not in found or found[record_id][1] < number:
                    found[record_id] = (record, number, begin)
            consumed, lines = stop, index + 1
        keep = self.keep
        for record_id in sorted(found, key=first.__getitem__):
            self.records[record_id] = found[record_id][0] if keep is None else keep(found[record_id][0])
            self.positions[record_id] = found[record_id][1]
            self.at[record_id] = self.offset + found[record_id][2]
        if consumed:
            self.guard = (self.guard + data[:consumed])[-self.GUARD :]
            if self.crc is not None:
                self.crc = zlib.crc32(data[:consumed], self.crc)
            self.offset += consumed
            self.lines += lines

    def _first_standing(self, data: bytes, spans, indices: list[int]) -> int:
        """The first of an id's lines that holds a record beads reads (where a full read first sees it).

        Only a line naming ``_type`` or ``_schema`` can be one beads skips, so
        only such a line is parsed to find out.
        """
        for index in indices:
            begin, stop, _complete = spans[index]
            chunk = data[begin:stop]
            if (b'"_type"' not in chunk and b'"_schema"' not in chunk) or \
                    parse_line(self.path, self.lines + index + 1, chunk) is not None:
                return index
        return indices[-1]

    def _latest_standing(self, data: bytes, spans, earlier: list[int]) -> tuple[dict | None, int, int]:
        """The newest of ``earlier`` lines that holds a record beads reads: it, its line number, its start."""
        for index in reversed(earlier):
            begin, stop, _complete = spans[index]
            record = parse_line(self.path, self.lines + index + 1, data[begin:stop])
            if record is not None:
                return record, self.lines + index + 1, begin
        return None, 0, 0


def worth_rewriting(tail_lines: int, kept: int) -> bool:
    """Whether a digest of ``kept`` entries, ``tail_lines`` behind the log, is worth writing again.

    Rewriting costs every entry, parsing the lines after the mark costs each
    line; rewritten once those lines reach an eighth of the digest, a
    reader's share of both stays proportional to the queue, so a daemon's
    cycle after 40 appends does not rewrite 100,000 entries.
    """
    return tail_lines > max(64, kept // 8)


#: The id at the start of a line as sluice writes records (no escapes in it, else the line is parsed).
QUICK_ID = re.compile(rb'\{"id":"([^"\\]+)",')

#: An id whose JSON text is itself in quotes (most ids: a prefix, a dash, letters and digits).
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:/+-]*")


def ascii_json(text: str) -> bytes:
    """``text`` as a JSON string in ASCII: no tab, newline or quote of its own stands bare in it, so a
    file of one such string per line (or per field) is searched for exactly ``text`` with a search in C."""
    if _PLAIN_ID.fullmatch(text):
        return b'"%s"' % text.encode("ascii")
    return json.dumps(text).encode("ascii")


def line_text(record: dict) -> str:
    """One record as one compact JSON line (no newline)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _short(err: Exception) -> str:
    return str(err).split(": line")[0]


# -- the end of a log ---------------------------------------------------------------

TAIL_BLOCK = 64 * 1024


def tail_objects(path: Path, count: int, kind: str) -> list[dict]:
    """The last ``count`` JSON objects of a log, oldest first, reading only its end.

    Status commands and live views read the newest events and decisions every
    second, so they never parse the whole log.  A torn last line (an append
    in progress) is not there yet; any other bad line is a StoreCorrupt
    naming its line (``malformed <kind>``).
    """
    if count <= 0:
        return []
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return []
    with fh:
        start = fh.seek(0, os.SEEK_END)
        data = b""
        lines: list[tuple[int, bytes]] = []
        while start > 0 and len(lines) < count:
            step = min(TAIL_BLOCK, start)
            start -= step
            fh.seek(start)
            data = fh.read(step) + data
            lines = complete_lines(data, start)
    return [json_object_at(path, line, position, kind) for position, line in lines[-count:]]


def complete_lines(data: bytes, start: int) -> list[tuple[int, bytes]]:
    """(offset, text) of the whole, non-blank lines in ``data``, the log's tail from byte ``start``.

    The first line is cut off unless ``data`` starts the file; bytes after the
    last newline are a torn append.
    """
    body = data[: data.rfind(b"\n") + 1]
    first = 0 if start == 0 else body.find(b"\n") + 1
    out = []
    position = start + first
    for line in body[first:].split(b"\n")[:-1]:
        if line.strip():
            out.append((position, line))
        position += len(line) + 1
    return out


def json_object_at(path: Path, line: bytes, position: int, kind: str) -> dict:
    """The JSON object on the line at byte ``position``, or StoreCorrupt naming its line number."""
    try:
        record = json.loads(line)
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as err:
        raise StoreCorrupt(path, _line_number(path, position), f"malformed {kind} ({err})") from None
    return record


def _line_number(path: Path, position: int) -> int:
    """1-based number of the line starting at byte ``position`` (error path only: reads the prefix)."""
    with open(path, "rb") as fh:
        return fh.read(position).count(b"\n") + 1
