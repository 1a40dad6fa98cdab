"""The forecast's samples of the run log, kept at a mark: ``runtime/runs-samples.json``.

The forecast learns from the last :data:`~sluice.core.forecast.DEFAULT_WINDOW`
runs of each kind.  Parsing a run log of 100,000 runs for that costs seconds;
this cache keeps each kind's window (the runs in it, oldest first) at a byte
offset of the log, and a reader parses only the lines appended since, as the
run digest (:func:`sluice.store.runs.digest`) and the queue digest do; it
writes the cache again only once those lines are worth it
(:func:`~sluice.store.jsonlog.worth_rewriting`), so the forecast after a
cycle's 20 launches does not write out 100,000 ended runs.  A
cache of another layout or window, or whose mark the log no longer continues
from (compacted: another inode, or shorter), is ignored and the log is read
whole.  It is only a cache: deleting it costs one whole read.

The windows are exactly those a whole read of the log's latest versions
gives (the property tests hold it to that): a run takes its place by its
first line (its launch), not by when it ended, so a long run that ends late
enters its kind's window where it was launched, or not at all when the
window has moved past it; a later version of a run in a window (reported
usage) replaces it there.  A run's kind is the one of its first counted
version (rig, type and labels are frozen at launch).
"""

from __future__ import annotations

import bisect
import json
import os
from typing import TYPE_CHECKING

from sluice.core import forecast as model
from sluice.core.recordclass import field, recordclass
from sluice.store import fsutil
from sluice.store import runs as log
from sluice.store.jsonlog import worth_rewriting

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.store.town import Town

VERSION = 2
SEP = "\x1f"  # between the parts of a kind's key
#: What is kept of a running run: what the forecast counts it by (its rig, kind, paths and start).
RUNNING_FIELDS = ("item_id", "rig", "issue_type", "labels", "touches", "started_at")
GUARD = 64  # bytes before the mark that must be unchanged for a read to continue from it


@recordclass
class Samples:
    """Each kind's window of samples, caught up with the log to ``offset``."""

    window: int = model.DEFAULT_WINDOW
    inode: int | None = None
    offset: int = 0
    lines: int = 0
    guard: bytes = b""  # the bytes before ``offset``: a log rewritten onto a reused inode does not continue
    #: run id → [seq, rig, type, labels, runtime, censored, tokens] of every run in a window
    runs: dict[str, list] = field(default_factory=dict)
    kinds: dict[str, list[list]] = field(default_factory=dict)  # kind → [[seq, run id], …] oldest first
    #: running run id → its first line's number and what a forecast needs of its latest version
    pending: dict[str, dict] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)  # every run seen ended
    holds: dict[str, int] = field(default_factory=dict)  # run id → how many windows hold it (not kept)
    written: int = -1  # the line the kept file stands at (-1: no file fits), not kept either

    def __post_init__(self) -> None:
        if not self.holds:
            for rows in self.kinds.values():
                for _, run_id in rows:
                    self.holds[run_id] = self.holds.get(run_id, 0) + 1

    def apply(self, record: dict, seq: int) -> None:
        """One record version, the ``seq``-th line of the log."""
        run_id = record["run_id"]
        if record.get("outcome") == log.RUNNING:
            if run_id not in self.ended:
                known = self.pending.get(run_id)
                self.pending[run_id] = {"seq": known["seq"] if known else seq,
                                        **{k: record.get(k) for k in RUNNING_FIELDS}}
            return
        running = self.pending.pop(run_id, None)
        first = running["seq"] if running is not None else None
        if first is None and run_id not in self.ended:
            first = seq  # ended in its first line (a log written whole, an import)
        self.ended.add(run_id)
        sample = model.sample_of(record)
        kept = self.runs.get(run_id)
        if kept is not None:  # a later version of a run in the windows: it keeps its place
            if sample is not None:
                self.runs[run_id] = [kept[0], *_row(sample)]
            return
        if first is None or sample is None:  # a version of a run the windows passed, or not a sample
            return
        placed = False
        for key in model.kind_keys(sample):
            rows = self.kinds.setdefault(SEP.join(key), [])
            if len(rows) >= self.window and first < rows[0][0]:
                continue  # the window has moved past it
            bisect.insort(rows, [first, run_id])
            self.holds[run_id] = self.holds.get(run_id, 0) + 1
            placed = True
            if len(rows) > self.window:
                self._drop(rows.pop(0)[1])
        if placed:
            self.runs[run_id] = [first, *_row(sample)]

    def _drop(self, run_id: str) -> None:
        left = self.holds.get(run_id, 1) - 1
        if left > 0:
            self.holds[run_id] = left
            return
        self.holds.pop(run_id, None)
        self.runs.pop(run_id, None)

    def model(self, timeout: float | None = None,
              min_samples: int = model.DEFAULT_MIN_SAMPLES) -> model.Model:
        made: dict[str, model.Sample] = {}  # a run in several kinds' windows is made once
        kinds = {}
        for key, rows in self.kinds.items():
            if rows:
                for _, run_id in rows:
                    if run_id not in made:
                        made[run_id] = _sample(self.runs[run_id])
                kinds[tuple(key.split(SEP))] = [made[run_id] for _, run_id in rows]
        return model.Model.of_kinds(kinds, self.window, min_samples, timeout)


def _row(sample: model.Sample) -> list:
    return [sample.rig, sample.issue_type, list(sample.labels), sample.runtime, sample.censored,
            sample.tokens]


def _sample(row: list) -> model.Sample:
    _, rig, issue_type, labels, runtime, censored, tokens = row
    return model.Sample(rig, issue_type, tuple(labels), runtime, censored, tokens)


def path(town: Town) -> Path:
    return town.runtime / "runs-samples.json"


_memo: dict[Path, Samples] = {}


def samples(town: Town, window: int = model.DEFAULT_WINDOW) -> Samples:
    """The windows caught up with the run log: the kept copy plus the lines appended since its mark."""
    source = log.log_path(town)
    try:
        fh = open(source, "rb")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        return Samples(window)
    with fh:
        st = os.fstat(fh.fileno())
        kept = _memo.get(source)
        if not _continues(kept, fh, st, window):
            kept = _load(town)
        if not _continues(kept, fh, st, window):
            kept = Samples(window, inode=st.st_ino)
        if kept.offset == st.st_size:
            _memo[source] = kept
            return kept
        fh.seek(kept.offset)
        data = fh.read()
    records, used = log._parse(source, data, kept.lines + 1)  # the log's own line reader
    numbers = [n for n, raw in enumerate(data[:used].split(b"\n")[:-1], start=kept.lines + 1) if raw.strip()]
    for number, record in zip(numbers, records, strict=True):  # a run's place is its first line's number
        kept.apply(record, number)
    kept.offset += used
    kept.lines += data[:used].count(b"\n")
    kept.guard = (kept.guard + data[:used])[-GUARD:]
    if kept.written < 0 or worth_rewriting(kept.lines - kept.written, len(kept.ended) + len(kept.runs)):
        _write(town, kept)  # no file fits (none yet, or one of another log): one is written at once
    _memo[source] = kept
    return kept


def keep_written(town: Town, inode: int, data: bytes, records: list[dict],
                 window: int = model.DEFAULT_WINDOW) -> None:
    """Keep the samples of a run log just written whole (compaction) as ``data``, one line per record.

    They are what a whole read of that file would keep, made from the records
    compaction holds instead of parsing the file again: the first forecast
    after a compaction of 100,000 runs then reads no line of it.  ``inode``
    is the file's, as compaction found it under the lock (by now another
    compaction may have replaced it: then these samples fit no file).
    """
    source = log.log_path(town)
    kept = Samples(window, inode=inode)
    for number, record in enumerate(records, start=1):
        kept.apply(record, number)
    kept.offset, kept.lines, kept.guard = len(data), len(records), data[-GUARD:]
    _write(town, kept)
    _memo[source] = kept


def _continues(kept: Samples | None, fh, st: os.stat_result, window: int) -> bool:
    if not (kept is not None and kept.window == window and kept.inode == st.st_ino
            and st.st_size >= kept.offset and len(kept.guard) == min(kept.offset, GUARD)):
        return False
    fh.seek(kept.offset - len(kept.guard))
    return fh.read(len(kept.guard)) == kept.guard


def _write(town: Town, kept: Samples) -> None:
    document = {"version": VERSION, "window": kept.window, "inode": kept.inode, "offset": kept.offset,
                "lines": kept.lines, "guard": kept.guard.hex(), "runs": kept.runs, "kinds": kept.kinds,
                "pending": kept.pending,
                "ended": "\n".join(sorted(kept.ended))}
    fsutil.write_cache(path(town), json.dumps(document, separators=(",", ":")).encode("utf-8"))
    kept.written = kept.lines


def _load(town: Town) -> Samples | None:
    try:
        data = json.loads(path(town).read_bytes())
        if data.get("version") != VERSION:
            return None
        ended = data["ended"]
        return Samples(window=int(data["window"]), inode=data["inode"], offset=int(data["offset"]),
                       lines=int(data["lines"]), guard=bytes.fromhex(data["guard"]),
                       runs=dict(data["runs"]), kinds=dict(data["kinds"]),
                       pending=dict(data["pending"]), ended=set(ended.split("\n")) if ended else set(),
                       written=int(data["lines"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # no cache, or one cut short: read the log
