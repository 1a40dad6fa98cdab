"""The results of :class:`sluice.api.Town`'s methods: one frozen record per command's ``--json`` document.

Each result keeps the document it was read from (``to_json`` returns it as
is, so it is the CLI's output byte for byte) and exposes its parts as typed
attributes.  The fields of a class are the one place that says which keys
the document has: a field without a default must be there, so a key renamed
on one side is a ``KeyError`` when the result is made, never a silent None.
Lists of rows are converted on first access only: a queue of 100,000
contexts printed as JSON never pays for 100,000 objects.  Parts left as
plain JSON (a dict, a list of dicts) are declared with :func:`part` (a key
the document always has) or :func:`optional` (one it may leave out), and
lists of typed rows with :func:`rows_of`: they are read from the document on
access, under the attribute's own name.

Documents shaped like records (an item, the snapshot, a polecat row) are
also read-only mappings of that document (``result["id"]``, ``get``,
``in``, ``keys``), and lists of rows are sequences of typed rows, so code
written against the plain JSON reads them unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar

from sluice.core.recordclass import MISSING, FrozenInstanceError, field, frozen

# The results: sluice.api's __all__ takes this list, and a test keeps sluice's lazy names equal to it.
__all__ = [
    "BrokenItem", "BrokenItems", "ClearResult", "CompactResult", "Decision", "Decisions", "DependencyAdded",
    "Explanation", "Export", "ExportedRecord", "Feed", "FeedEntry", "Forecast", "ImportResult", "Item",
    "ItemDetail", "ItemForecast", "ItemRows", "Items", "PatrolReport", "PauseState", "PolecatRow",
    "Polecats", "PolicyInfo", "Promotion", "Queue", "QueueEntry", "QueueStatus", "ResetResult", "RigInfo",
    "RigRefreshed", "RigRemoved", "RunRecord", "Runs", "ScheduleStatus", "Snapshot", "ThrottleState",
    "UsageReport",
]

# -- frozen records, made without code generation (:mod:`sluice.core.recordclass`) ----------------

result = frozen

def _scalars(cls, doc: dict) -> dict:
    """The document's values of the class's fields: a field without a default must be there.

    A key renamed on one side raises ``KeyError`` at once instead of reading as None.
    """
    return {name: doc[name] for name, f in cls._spec.items()
            if name != "document" and ((f.default is MISSING and f.factory is MISSING) or name in doc)}


class _Part:
    """A part of the document read by key on each access, so nothing is copied when the result is made."""

    def __init__(self, doc: str | None, required: bool, empty: Any, row: Any = None) -> None:
        self.__doc__, self.required, self.empty, self.row, self.key = doc, required, empty, row, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name  # the attribute's name is the document's key: it cannot be misspelt in one

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        if self.row is not None:  # typed rows, made on the first access only
            if self.key not in obj.__dict__:
                obj.__dict__[self.key] = [self.row.from_json(row) for row in obj.document[self.key]]
            return obj.__dict__[self.key]
        if self.required:
            return obj.document[self.key]
        value = obj.document.get(self.key)
        return self.empty() if self.empty is not None and not value else value

    def __set__(self, obj: Any, value: Any) -> None:  # a data descriptor, as a property is
        raise FrozenInstanceError(f"cannot assign to field {self.key!r}")


def part(doc: str | None = None) -> Any:
    """A key the document always has, read on access (a missing one is a ``KeyError`` then)."""
    return _Part(doc, True, None)


def optional(doc: str | None = None, *, empty: Any = None) -> Any:
    """A key the document may leave out: None when absent, or ``empty()`` when absent or empty."""
    return _Part(doc, False, empty)


def rows_of(row: type) -> Any:
    """A list the document always has, read on first access as rows of the result class ``row``."""
    return _Part(None, True, None, row)


@result
class _Document:
    document: Any = field(repr=False, compare=False, kw_only=True)

    def to_json(self) -> Any:
        """The command's ``--json`` document (the result's own data: copy it before changing it)."""
        return self.document

    @classmethod
    def from_json(cls, doc: Any):  # a list document (``_Rows``) has no fields but itself
        return cls(**_scalars(cls, doc), document=doc)


@result
class _Rows(_Document, Sequence):
    """A list document: iterate it (or index it) for typed rows; ``to_json`` is the list itself."""

    row: ClassVar[Any]  # the class of one row

    @cached_property
    def rows(self) -> list:
        return [self.row.from_json(doc) for doc in self.document]

    def __len__(self) -> int:
        return len(self.document)

    def __getitem__(self, index: int):
        return self.rows[index]


def _rows_named(doc: str) -> property:
    """A list result's rows under a name of its own (``queue.entries``), read-only like ``rows``."""
    return property(lambda self: self.rows, doc=doc)


@result
class QueueEntry(_Document):
    """One queued item, as a row of ``scheduler list``."""

    id: str
    title: str
    status: str
    target_rig: str
    blocked: bool
    context_id: str
    enqueued_at: str
    dispatch_failures: int
    last_failure: str | None
    retry_at: str | None
    score: float | None
    # When the item is expected to start and finish (``scheduler list``; None: it cannot start yet).
    start_at: str | None = None
    done_at: str | None = None


@result
class Queue(_Rows):
    """``scheduler list``: queued items, ready ones in dispatch order, then blocked ones."""

    row: ClassVar[Any] = QueueEntry

    entries = _rows_named("The queued items, one QueueEntry each (the same list as ``rows``).")


@result
class QueueStatus(_Document):
    """``scheduler status``: pause state, queue size, polecats and capacity."""

    paused: bool
    paused_by: str | None
    queued_total: int
    queued_ready: int
    active_polecats: int | None  # None when the executor could not be asked (see executor_error)
    capacity: int
    max_polecats: int
    mode: str
    last_dispatch_at: str | None
    last_dispatch_count: int
    executor_error: str | None = None

    binding: dict | None = optional(
        'The one limit that stops the next launch now, ``{"code", "detail"}``; None when none does.')
    host: dict | None = optional(
        "The hold file and the host guard: limits, the last reading and its time, what holds.")
    forecast: dict | None = optional(
        'The last forecast kept: ``{"at", "drain_at", "drain_p90_at", "items_total"}``, or None.')
    items: list[QueueEntry] = rows_of(QueueEntry)


@result
class Explanation(_Document):
    """``scheduler explain``: would the next cycle launch the item, and every reason it would not."""

    item_id: str
    queued: bool
    context_id: str | None
    would_dispatch: bool
    score: float | None
    # When it is expected to start and finish, and what that stands on (None when it cannot start).
    start_at: str | None = None
    done_at: str | None = None
    done_p90_at: str | None = None

    basis: dict | None = optional(
        '``{"level", "samples", "kind"}`` of the forecast, as in ``scheduler forecast``.')
    budget: dict | None = optional(
        "Whether its p90 tokens fit what is left of the token budget, as in ``scheduler forecast``.")
    reasons: list[dict] = part(
        '``[{"code", "detail"}]`` with codes from :data:`sluice.core.admission.CODES`.')

    @property
    def codes(self) -> list[str]:
        return [r["code"] for r in self.document["reasons"]]


@result
class PauseState(_Document):
    """``scheduler pause`` / ``resume``: the flag now, and whether this call changed it."""

    paused: bool
    changed: bool
    paused_by: str | None = None
    paused_at: str | None = None


@result
class ClearResult(_Document):
    """``scheduler clear``: how many contexts were closed (``contexts`` lists them)."""

    item_id: str | None
    cleared: int

    contexts: list[dict] = part()
    errors: list[dict] = part()


@result
class Decision(_Document):
    """One scored choice of ``schedule next`` (or a launch logged by the dispatcher)."""

    decision_id: str
    at: str
    graph_id: str | None
    node_id: str
    score: float | None
    skipped: bool
    sling_command: str

    reasons: list[str] = part()
    dispatch_hints: dict = part()


@result
class Decisions(_Rows):
    """``schedule next``: the decisions, best first (iterate it, or index it)."""

    row: ClassVar[Any] = Decision

    decisions = _rows_named("The decisions, best first, one Decision each (the same list as ``rows``).")


@result
class ScheduleStatus(_Document):
    """``schedule status``: the policy, the ready count, recent decisions, merge pressure."""

    ready_count: int

    policy: dict = part()
    merge_pressure: dict[str, int] = part()
    recent_decisions: list[Decision] = rows_of(Decision)


@result
class PolicyInfo(_Document):
    """``schedule policy show|set``: the policy in force."""

    merge_queue_threshold: int
    merge_pressure_penalty: float
    skip_on_merge_pressure: bool

    weights: dict[str, float] = part()
    graph_overrides: dict[str, dict] = part()


@result
class PatrolReport(_Document):
    """``patrol RIG``: one rig's queue health (rows as documented in docs/surfaces.md)."""

    rig: str
    ready: int
    blocked: int
    executor_error: str | None = None

    def rows(self, kind: str) -> list[dict]:
        """``queued``, ``failing``, ``stale``, ``duplicates``, ``orphaned``, ``polecats`` or ``fixed``."""
        return self.document.get(kind, [])


@result
class ThrottleState(_Document):
    """``scheduler throttle``: the throttle set (``until``, ``reason``, ``by``) or whether one was
    ``cleared``, and every throttle running now."""

    rig: str | None
    until: str | None = None
    reason: str | None = None
    by: str | None = None
    cleared: bool | None = None

    throttles: list[dict] = part()


@result
class BrokenItem(_Document):
    """One circuit-broken item of ``scheduler broken``; ``next_attempt_at`` None: never by itself."""

    item_id: str
    rig: str | None
    failures: int | None
    last_error: str | None
    broken_at: str | None
    trips: int | None
    next_attempt_at: str | None
    half_open: bool


@result
class BrokenItems(_Rows):
    """``scheduler broken``: every circuit-broken item, oldest first (iterate it)."""

    row: ClassVar[Any] = BrokenItem

    items = _rows_named("The circuit-broken items, one BrokenItem each (the same list as ``rows``).")


@result
class ItemForecast(_Document):
    """One queued item's expected start and finish (None: it cannot start, see ``why``)."""

    item_id: str
    rig: str
    position: int
    start_at: str | None
    done_at: str | None
    done_p90_at: str | None
    runtime_p50: float
    runtime_p90: float
    tokens_p50: int | None
    tokens_p90: int | None = None

    budget: dict | None = optional(
        'Budget fit: ``{"tokens_p90", "fits", "scope", "budget", "remaining", "window", "room_at"}``;'
        " None when no token budget applies to the item.")


@result
class Forecast(_Document):
    """``scheduler forecast``: when each queued item starts and finishes, and when the queue drains."""

    at: str
    drain_at: str | None
    drain_p90_at: str | None

    items: list[ItemForecast] = rows_of(ItemForecast)


@result
class ResetResult(_Document):
    """``scheduler reset``: the item queued again, in which rig, under which open context."""

    item_id: str
    rig: str
    context_id: str | None
    reset: bool


@result
class UsageReport(_Document):
    """``polecat usage``: the tokens booked for a launch; ``counted`` false when no launch was found."""

    polecat_id: str | None
    item_id: str | None
    tokens: int
    counted: bool


@result
class CompactResult(_Document):
    """``compact``: the retention used and one row per rig compacted (lines kept, removed, archived)."""

    retention: str

    rigs: list[dict] = part()


@result
class RigRemoved(_Document):
    """``rig remove``: the rig unregistered, where its own store was moved (``store``), and the
    contexts a forced removal closed."""

    name: str
    prefix: str
    repo: str
    items: str | None
    store: str | None

    closed: list[dict] = part()


@result
class ItemRows:
    """``item ready`` / ``item blocked``: item records, kept as the JSON text they were read as.

    A large rig's ready list is printed without decoding and re-encoding
    every record; iterate (or call ``to_json``) to get the records as dicts.
    """

    lines: list[str] = field(repr=False)

    @cached_property
    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.lines]

    def to_json(self) -> list[dict]:
        return self.records

    def __iter__(self) -> Iterator[dict]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.lines)


@result
class RigInfo(_Document):
    """A registered rig, as ``rig add`` / ``rig list`` print it."""

    name: str
    prefix: str
    repo: str
    items: str
    read_only: bool
    source: str  # own, export or command
    items_command: list[str] | None = None
    source_stale: dict | None = None  # why its items may be behind its beads store (docs/items.md)
    remote: str | None = None  # the URL workspaces on other machines clone it from


# -- records and lists of rows ----------------------------------------------------------------


class _Mapping(Mapping):
    """A read-only mapping view of ``to_json()``, for code written against the plain document
    (``get``, ``in``, ``keys``, ``items`` and ``values`` come with :class:`~collections.abc.Mapping`)."""

    document: Any

    def __getitem__(self, key: str) -> Any:
        return self.document[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.document)

    def __len__(self) -> int:
        return len(self.document)


@result
class Item(_Mapping, _Document):
    """An item's beads record (``item show --json``); every key of the record is in the mapping view.

    An export may carry any key, so only the ones sluice reads are attributes;
    ``id`` is the one every record has.
    """

    id: str
    title: str | None = None
    status: str | None = None
    priority: int | None = None
    issue_type: str | None = None
    assignee: str | None = None
    created_at: str | None = None
    updated_at: str | None = None

    labels: list[str] = optional(empty=list)
    dependencies: list[dict] = optional(empty=list)


@result
class Items(_Rows):
    """``item list``: item records (iterate it for :class:`Item` rows)."""

    row: ClassVar[Any] = Item


@result
class RigRefreshed(_Mapping, _Document):
    """``rig refresh``: how many records the rig's items command printed, and when it last succeeded."""

    rig: str
    records: int
    ok_at: str | None


@result
class DependencyAdded(_Mapping, _Document):
    """``item dep add``: the edge, and ``status`` ``added`` or ``exists`` (it was there already)."""

    issue_id: str
    depends_on_id: str
    type: str
    status: str


@result
class ImportResult(_Mapping, _Document):
    """``item import``: records added and updated in the rig's store, tombstones left out."""

    rig: str
    added: int
    updated: int
    skipped_tombstones: int


@result
class Promotion(_Mapping, _Document):
    """``scheduler promote``: the context moved to the head of the queue (or back, ``promoted`` false)."""

    item_id: str
    context_id: str
    rig: str
    promoted: bool
    promoted_at: str | None
    changed: bool


@result
class PolecatRow(_Mapping, _Document):
    """One row of ``polecat list`` (a live polecat, one the executor keeps, or an ended run)."""

    id: str | None
    item_id: str | None
    rig: str | None
    context_id: str | None
    executor: str | None
    started_at: str | None
    state: str
    pid: int | None
    exit_code: int | None
    log_path: str | None
    attach: str | None
    outcome: str | None
    run_id: str | None
    ended_at: str | None
    runtime_seconds: float | None
    stopped: bool | None = None  # ``polecat stop``: whether this call stopped it


@result
class Polecats(_Rows):
    """``polecat list`` (or ``polecat stop``): :class:`PolecatRow` rows."""

    row: ClassVar[Any] = PolecatRow


@result
class RunRecord(_Mapping, _Document):
    """One run of ``sluice runs`` (the fields of :data:`sluice.store.database.runs.FIELDS` that it has)."""

    run_id: str
    polecat_id: str | None = None
    item_id: str | None = None
    rig: str | None = None
    context_id: str | None = None
    executor: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    runtime_seconds: float | None = None
    exit_code: int | None = None
    outcome: str | None = None


@result
class Runs(_Rows):
    """``sluice runs``: :class:`RunRecord` rows, newest first."""

    row: ClassVar[Any] = RunRecord


@result
class ExportedRecord(_Mapping, _Document):
    """One line of ``sluice export``: a rig's ephemeral issue record in beads' shape (``id``), or with
    ``runs`` a run record (``run_id``)."""

    id: str | None = None
    run_id: str | None = None


@result
class Export(_Rows):
    """``sluice export``: :class:`ExportedRecord` rows, oldest first."""

    row: ClassVar[Any] = ExportedRecord


@result
class FeedEntry(_Mapping, _Document):
    """One line of ``sluice feed``: the event in words, and the event itself."""

    at: str | None
    type: str | None
    text: str

    event: dict = part()


@result
class Feed(_Rows):
    """``sluice feed --json``: :class:`FeedEntry` rows, oldest first."""

    row: ClassVar[Any] = FeedEntry


@result
class Snapshot(_Mapping, _Document):
    """``sluice snapshot --json``: the town's state, as ``top`` and ``web`` show it (docs/surfaces.md)."""

    version: int
    at: str
    town: str
    executor: str

    scheduler: dict = part("``scheduler status`` without its rows.")
    forecast: dict = part()
    polecats: list[dict] = part(
        "Rows of ``polecat list`` that still run, with ``runtime_seconds``, ``logs_command``, ``title``.")
    rigs: dict[str, dict] = part()
    decisions: list[dict] = part()
    events: list[dict] = part()
    queue: list[QueueEntry] = rows_of(QueueEntry)
    runs: list[RunRecord] = rows_of(RunRecord)


@result
class ItemDetail(_Mapping, _Document):
    """One item as the dashboard's item page shows it: record, queue row, score and reasons, blockers."""

    rig: str
    queued: bool
    blocked: bool | None  # None when the item is not queued
    score: float | None
    graph_id: str | None
    tokens: int | None
    estimated_minutes: float | None
    due_at: str | None
    due: str | None  # in words: "due in 3h"
    executor_error: str | None = None

    gate: Any = part()
    blocked_by: list = part()
    reasons: list[str] = part()
    polecats: list[dict] = part()
    decisions: list[dict] = part()
    runs: list[RunRecord] = rows_of(RunRecord)

    @cached_property
    def item(self) -> Item:
        return Item.from_json(self.document["item"])

    @cached_property
    def queue_row(self) -> QueueEntry | None:
        row = self.document["queue_row"]
        return QueueEntry.from_json(row) if row is not None else None
