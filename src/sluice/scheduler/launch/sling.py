"""``sluice sling ITEM... [RIG]``: queue work items for dispatch, or launch them now.

In deferred mode (``scheduler.max_polecats > 0``) each item gets a sling
context in its target rig's store and waits for a dispatch cycle; in direct
mode it is launched at once through the executor and no context is kept.

Guards, in order, per item: it exists and is work (not a context, not a type
that is never dispatched); the rig its prefix routes to is the target (else
``force``); it is not closed or tombstoned (``force`` does not help); it
is not hooked, in progress or pinned (else ``force``, which the context
remembers so the dispatcher honours it); its latest run did not end ``ok``
with the item unchanged since (``already-ran``, else ``force``: sluice never
marks an item, so it remembers runs instead).  Then idempotency: an item with an
open context in *any* rig, or with a running polecat, is "already" queued.

Idempotency holds across processes: in deferred mode the check and the
create are one write transaction of the town database, which looks up the
items' open contexts through an index and writes every new one (10,000 items
are one transaction), and the database holds at most one open context per
item whoever writes.  A direct launch checks the executor's running polecats
and launches inside a write transaction too, so two slings never launch one
item twice: the second waits for the first, then finds its polecat.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from sluice.core.clock import iso, now_utc
from sluice.core.items import DONE_STATUSES, is_context, labels_of, parse_ts, tracked_ids
from sluice.core.readiness import NOT_WORK_TYPES, id_prefix
from sluice.core.recordclass import asdict, field, recordclass
from sluice.core.records import SlingContextFields
from sluice.errors import InvalidOperation, SluiceError, UnknownItem, UsageError
from sluice.scheduler.launch import gates as gate_view
from sluice.scheduler.launch.launching import CycleReport, Launcher, command_template
from sluice.scheduler.queue.ranking import Work
from sluice.scheduler.session import Session
from sluice.store.database import contexts as ctxs
from sluice.store.database import events
from sluice.store.database import runs as runlog

if TYPE_CHECKING:
    from sluice.executors.base import Executor
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import Stores


@recordclass
class SlingOptions:
    formula: str = ""
    args: str = ""
    vars: tuple[str, ...] = ()
    agent: str = ""
    force: bool = False
    dry_run: bool = False


@recordclass
class _Work:
    item: dict
    rig: str
    stamp: str = ""

    @property
    def id(self) -> str:
        return self.item["id"]


@recordclass
class SlingResult:
    scheduled: list[dict] = field(default_factory=list)
    already: list[dict] = field(default_factory=list)
    dispatched: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    mode: str = "deferred"
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        """False when any item failed, even with others queued (the command then exits 1): a sling done
        in part is not acknowledged as done; the result says which items went and which did not."""
        return not self.errors

    def to_json(self) -> dict:
        return asdict(self)


def split_args(town: Town, args: list[str]) -> tuple[list[str], str | None]:
    """Item ids and the target rig: the last argument is the rig iff it names a registered one."""
    args = [a.rstrip("/") for a in args if a.strip()]
    if not args:
        raise UsageError("sling needs at least one item id")
    rigs = town.config.rigs
    if args[-1] in rigs:
        if len(args) == 1:
            raise UsageError(
                f"{args[0]!r} is a rig; name the item(s) to sling to it: sluice sling ITEM {args[0]}"
            )
        return args[:-1], args[-1]
    return args, None


def _refuse_misspelt_rig(town: Town, stores: Stores, last: str) -> None:
    """A last argument that no rig routes and no rig holds is a misspelt rig, not an item.

    Taking it for an item would sling (or, in direct mode, launch) the other
    items where their prefixes route, which is not what was asked.
    """
    if town.rig_for_id(last) is not None:
        return
    try:
        stores.find(last)
    except UnknownItem:
        known = ", ".join(sorted(town.config.rigs)) or "none registered"
        raise UsageError(f"{last!r} is neither a registered rig (known: {known}) nor an item;"
                         " nothing was slung") from None


def check_vars(values: tuple[str, ...]) -> None:
    for value in values:
        key, sep, _ = value.partition("=")
        if not sep or not key.strip() or "\n" in value:
            raise UsageError(f"vars {value!r}: expected KEY=VALUE on one line", parameters=("vars",))


def parse_targets(where: Town | Session, args: list[str]) -> tuple[list[str], str | None]:
    """``ITEM... [RIG]`` (the command line's form) as item ids and the rig, if the last names one."""
    session = Session.of(where)
    item_ids, rig = split_args(session.files, args)
    if rig is None and len(item_ids) > 1:
        _refuse_misspelt_rig(session.files, session.stores, item_ids[-1])
    return item_ids, rig


def sling(where: Town | Session, args: list[str], options: SlingOptions | None = None,
          executor: Executor | None = None) -> SlingResult:
    """:func:`sling_items` over arguments in the command line's form ``ITEM... [RIG]``."""
    session = Session.of(where, executor)
    item_ids, rig = parse_targets(session, args)
    return sling_items(session, item_ids, rig, options)


def sling_items(where: Town | Session, item_ids: list[str], rig: str | None = None,
                options: SlingOptions | None = None, executor: Executor | None = None) -> SlingResult:
    """Queue (deferred mode) or launch (direct mode) the items, each to ``rig`` or to its own rig.

    See the module docstring for the guards.
    """
    options = options or SlingOptions()
    session = Session.of(where, executor)
    town, config = session.files, session.config
    check_vars(options.vars)
    item_ids = [i for i in item_ids if i.strip()]
    if not item_ids:
        raise UsageError("sling needs at least one item id")
    if rig is not None:
        town.rig(rig)  # an unknown rig is an error before anything is looked up
    result = SlingResult(mode="deferred" if config.scheduler.deferred else "direct", dry_run=options.dry_run)
    return _go(session, _expand(session, item_ids, rig, options, result), options, result)


def sling_ready(where: Town | Session, rig: str | None = None, labels: tuple[str, ...] = (),
                options: SlingOptions | None = None) -> SlingResult:
    """Queue (or launch) every ready item of ``rig`` (None: of every rig) that carries every label of
    ``labels``, each to its own rig.

    Nobody named these items one by one, so the guards treat them as an
    epic's members: an item they refuse (one that already ran, is hooked,
    routes to no rig) is skipped with its reason, not an error, and what is
    already queued is reported as such.  An epic or convoy that is ready is
    skipped: its own ready items are among those slung.
    """
    from sluice.core.items import ReadyFilter, normalise
    from sluice.store.items.tracker import ready

    session = Session.of(where)
    raws = ready(session.files, rig, 0, where=ReadyFilter(labels=tuple(labels)) if labels else None)
    return _sling_selected(session, [normalise(json.loads(raw)) for raw in raws], options or SlingOptions())


def retry(where: Town | Session, item_ids: list[str], since: float | None = None,
          options: SlingOptions | None = None) -> SlingResult:
    """Sling again the items whose latest run failed, timed out or vanished: those of ``item_ids``, or
    with none named every such item (whose latest run started in the last ``since`` seconds).

    A named item whose latest run did not fail is an error saying how it
    ended; of every failed item, one the guards now refuse (closed since,
    say) is skipped with its reason, as in a bulk sling.
    """
    options = options or SlingOptions()
    session = Session.of(where)
    town = session.files
    if item_ids:
        from sluice.scheduler.launch.ends import settle

        settle(town, session.require_executor(), session.stores, now=session.now)  # how each last run ended
        for item_id in item_ids:
            latest = runlog.latest(town, item=item_id)
            if latest is None or latest.get("outcome") not in runlog.FAILURES:
                how = "has no run" if latest is None else f"last ran {latest.get('outcome')}"
                raise InvalidOperation(f"item {item_id} {how}, so there is nothing to retry (`sluice sling"
                                       f" {item_id}` queues it{'' if latest is None else ', with force'})")
        return sling_items(session, item_ids, None, options)
    from sluice.scheduler.launch.ends import latest_runs

    latest = latest_runs(session, since=since)
    failed = [item_id for item_id, run in latest.items() if run.get("outcome") in runlog.FAILURES]
    found = session.stores.find_many(failed)
    result = _sling_selected(session, [found[i][1] for i in failed if i in found], options)
    result.skipped += [{"item_id": i, "reason": "not found in any rig"} for i in failed if i not in found]
    return result


def _sling_selected(session: Session, items: list[dict], options: SlingOptions) -> SlingResult:
    """Sling ``items`` that nobody named one by one: what the guards refuse is skipped (an epic's
    members' rule), an epic or convoy among them too (its own items are there)."""
    check_vars(options.vars)
    result = SlingResult(mode="deferred" if session.config.scheduler.deferred else "direct",
                         dry_run=options.dry_run)
    works: list[_Work] = []
    ran = _Ran(session)

    def add(item: dict, target: str) -> None:
        works.append(_Work(item, target))

    for item in items:
        kind = _kind(item)
        if kind != "task":
            result.skipped.append({"item_id": item["id"], "reason": f"a ready {kind}: its items are slung"
                                                                    " themselves"})
            continue
        _add_member(session.files, item, options, result, add, ran)
    return _go(session, works, options, result)


def _go(session: Session, works: list[_Work], options: SlingOptions, result: SlingResult) -> SlingResult:
    """Queue ``works`` (deferred mode) or launch them (direct mode), into ``result``."""
    if not works:
        return result
    if result.mode == "direct":
        _launch_now(session, works, options, result)
    else:
        _schedule(session, works, options, result)
    return result


# -- expanding arguments into (item, rig) pairs -------------------------------------


def _kind(item: dict) -> str:
    issue_type = item.get("issue_type")
    labels = labels_of(item)
    if issue_type == "epic" or "gt:epic" in labels:
        return "epic"
    if issue_type == "convoy" or "gt:convoy" in labels:
        return "convoy"
    return "task"


def _expand(session: Session, item_ids: list[str], rig: str | None, options: SlingOptions,
            result: SlingResult) -> list[_Work]:
    town, stores = session.files, session.stores
    works: list[_Work] = []
    seen: set[str] = set()

    def add(item: dict, target: str) -> None:
        if item["id"] not in seen:
            seen.add(item["id"])
            works.append(_Work(item, target))

    found = stores.find_many(item_ids)  # a few queries per rig, not one per item
    ran = _Ran(session)
    epics = [i for i in item_ids if rig is None and i in found and _kind(found[i][1]) == "epic"]
    children = _children(stores, epics)  # one scan per rig for every epic named
    for item_id in item_ids:
        if item_id not in found:
            message = f"item {item_id} not found in any rig"
            if rig is None and len(item_ids) > 1 and item_id == item_ids[-1]:
                message += f" (nor is {item_id!r} a registered rig)"
            result.errors.append({"item_id": item_id, "error": message})
            continue
        item = found[item_id][1]
        kind = _kind(item)
        if kind == "task":
            try:
                target = rig or _routed_rig(town, item_id)
            except SluiceError as err:
                result.errors.append({"item_id": item_id, "error": str(err)})
                continue
            refusal = _refusal(town, item, target, options.force, ran)
            if refusal is None:
                add(item, target)
            else:
                extra = {"reason": refusal.reason, "run_id": refusal.run_id} if refusal.reason else {}
                result.errors.append({"item_id": item_id, "error": refusal.message, **extra})
            continue
        if rig is not None:
            result.errors.append({"item_id": item_id, "error": (
                f"{kind} {item_id} cannot be slung to an explicit rig; each of its items goes to the rig"
                f" its prefix routes to (run: sluice sling {item_id})")})
            continue
        members = children.get(item_id, []) if kind == "epic" else _tracked(stores, item, result)
        if not members:
            result.skipped.append({"item_id": item_id, "reason": f"{kind} has no open items to sling"})
        for member in members:
            _add_member(town, member, options, result, add, ran)
    return works


def _add_member(town: Town, member: dict, options: SlingOptions, result: SlingResult, add, ran: _Ran) -> None:
    """An epic's child or a convoy's tracked item: refused members are skipped, not errors."""
    member_id = member["id"]
    home = town.rig_for_id(member_id)
    if home is None:
        result.skipped.append({"item_id": member_id, "reason": (
            f"cannot resolve a rig from its prefix {id_prefix(member_id).rstrip('-')!r} (no rig has it)")})
        return
    refusal = _refusal(town, member, home.name, options.force, ran)
    if refusal is not None:
        result.skipped.append({"item_id": member_id, "reason": refusal.brief})
        return
    add(member, home.name)


def _routed_rig(town: Town, item_id: str) -> str:
    home = town.rig_for_id(item_id)
    if home is None:
        prefix = id_prefix(item_id).rstrip("-")
        raise UsageError(
            f"item {item_id}: its prefix {prefix!r} routes to no rig: name the rig that holds it"
            f" (`sluice sling {item_id} RIG`), or register that rig with `--prefix {prefix}`"
        )
    return home.name


@recordclass(frozen=True)
class _Refusal:
    message: str  # the error of an item named on the command line
    brief: str  # the skip reason of an epic's or convoy's member
    reason: str = ""  # a code for the error row (``already-ran``)
    run_id: str | None = None


class _Ran:
    """Each item's latest run, read only if an item gets that far.

    A run still recorded as running may have ended unseen: then its end is
    recorded first (once per sling), as any command that looks does.
    """

    def __init__(self, session: Session):
        self.session = session
        self._settled = False

    def latest(self, item_id: str) -> dict | None:
        from sluice.scheduler.launch.ends import settle

        run = runlog.latest(self.session.files, item=item_id)
        if run is not None and run.get("outcome") == "running" and not self._settled:
            self._settled = True
            try:
                settle(self.session.files, self.session.require_executor())
            except SluiceError:  # an executor that cannot be asked: the run counts as running
                return run
            run = runlog.latest(self.session.files, item=item_id)
        return run


def _already_ran(item: dict, ran: _Ran) -> _Refusal | None:
    """Refuse an item whose latest run ended ``ok`` and which has not changed since.

    sluice never marks the item (it never writes one), so this is how an agent
    that succeeded but left its item open is not run a second time.  A later
    ``updated_at`` (someone touched the item) or a failed last run lets it go.
    """
    run = ran.latest(item["id"])
    if run is None or run.get("outcome") != "ok":
        return None
    ended, updated = parse_ts(run.get("ended_at")), parse_ts(item.get("updated_at"))
    if ended is None or (updated is not None and updated > ended):
        return None
    item_id = item["id"]
    return _Refusal(f"item {item_id} already ran: run {run['run_id']} ended ok at {run['ended_at']} and the"
                    " item has not changed since (override with force)",
                    f"already ran (run {run['run_id']} ended ok at {run['ended_at']})",
                    "already-ran", run["run_id"])


def _refusal(town: Town, item: dict, target: str, force: bool, ran: _Ran) -> _Refusal | None:
    """The guards of the module docstring, written once; None when the item may go to ``target``.

    Idempotency, the fourth guard, is :func:`_already`: it needs the queue,
    read under the sling lock.
    """
    item_id = item["id"]
    if is_context(item) or item.get("ephemeral"):
        return _Refusal(f"{item_id} is an ephemeral record, not a work item", "ephemeral record, not work")
    issue_type = item.get("issue_type")
    if issue_type in NOT_WORK_TYPES:
        return _Refusal(f"item {item_id} is a {issue_type}, which is never dispatched as work",
                        f"a {issue_type}, never dispatched")
    home = town.rig_for_id(item_id)
    prefix = id_prefix(item_id).rstrip("-")
    if not force and home is None:  # most often a rig added with the wrong prefix: say which
        takes = town.rig(target).prefix + "-"
        message = (f"item {item_id} (prefix {prefix!r}) routes to no registered rig; rig {target!r} takes"
                   f" ids starting {takes!r}. If the rig that holds it should take {prefix + '-'!r}, add it"
                   f" again with `--prefix {prefix}`; to run it in {target!r} as it is, override with force")
        return _Refusal(message, f"prefix {prefix!r} routes to no rig")
    if not force and home is not None and home.name != target:
        message = (f"cross-rig mismatch: item {item_id} (prefix {prefix!r}) belongs to rig {home.name!r},"
                   f" but the target is rig {target!r}: sling it to {home.name!r} (`sluice sling {item_id}"
                   f" {home.name}`), or override with force to run it in rig {target!r}")
        return _Refusal(message, f"belongs to rig {home.name!r}")
    status = item.get("status", "open")
    if status in DONE_STATUSES:
        return _Refusal(f"item {item_id} is {status} (work already completed)", status)
    if status in ctxs.PROTECTED_STATUSES and not force:
        who = f" to {item['assignee']}" if item.get("assignee") else ""
        return _Refusal(f"item {item_id} is already {status}{who} (override with force)",
                        f"{status} (override with force)")
    return None if force else _already_ran(item, ran)


def _children(stores: Stores, epic_ids: list[str]) -> dict[str, list[dict]]:
    """epic id → the items with a parent-child edge to it and the epic's own id prefix.

    A cross-prefix edge is external in beads and makes no one a child (the
    readiness rules say the same), so an epic's children share its prefix.
    Each rig's index is scanned once for all the epics.
    """
    out: dict[str, list[dict]] = {}
    if not epic_ids:
        return out
    wanted = set(epic_ids)
    for store in stores.all():
        for record in store.durable_with_edge("parent-child", wanted):
            prefix = id_prefix(record["id"])
            for dep in record.get("dependencies") or ():
                parent = dep.get("depends_on_id")
                if dep.get("type") == "parent-child" and parent in wanted and id_prefix(parent) == prefix:
                    members = out.setdefault(parent, [])
                    if not members or members[-1] is not record:
                        members.append(record)
    return out


def _tracked(stores: Stores, convoy: dict, result: SlingResult) -> list[dict]:
    """The convoy's tracked items that some rig holds.

    A tracked id whose prefix routes to no rig is skipped with a message, as
    an epic's child is: convoys track work across projects, and work of a
    project this town has no rig for is not an error of this sling.
    """
    out = []
    for target in tracked_ids(convoy):
        try:
            out.append(stores.find(target)[1])
        except UnknownItem:
            if stores.town.rig_for_id(target) is None:
                prefix = id_prefix(target).rstrip("-")
                result.skipped.append({"item_id": target, "reason": (
                    f"cannot resolve a rig from its prefix {prefix!r} (no rig has it)")})
                continue
            message = f"item {target} (tracked by {convoy['id']}) not found"
            result.errors.append({"item_id": target, "error": message})
    return out


# -- deferred: contexts ----------------------------------------------------------------


def _fields(work: _Work, options: SlingOptions) -> SlingContextFields:
    return SlingContextFields(
        work_bead_id=work.id, target_rig=work.rig, formula=options.formula, args=options.args,
        vars="\n".join(options.vars), enqueued_at=work.stamp, agent=options.agent, force=options.force,
    )


def _stamp_in_order(works: list[_Work]) -> None:
    """Strictly increasing ``enqueued_at`` in the order given, so FIFO is the user's order."""
    base = now_utc()
    for offset, work in enumerate(works):
        work.stamp = iso(base + timedelta(microseconds=offset))


def _running_items(session: Session) -> dict[str, str]:
    """item id → polecat id of running polecats (the executor may be unreachable: then none)."""
    return {p.item_id: p.id for p in session.active or ()}


def _schedule(session: Session, works: list[_Work], options: SlingOptions, result: SlingResult) -> None:
    town, stores = session.files, session.stores
    _stamp_in_order(works)
    running = _running_items(session)
    enqueued: list[tuple[str, dict]] = []
    # In one write transaction (a dry run only reads): what is queued now, in every rig, decides, and
    # no other writer comes between the check and the contexts made.
    with contextlib.nullcontext() if options.dry_run else town.db.transaction():
        by_item = ctxs.open_of_items(town, [work.id for work in works])
        new: dict[str, list[_Work]] = {}
        for work in works:
            row = _already(work, by_item, running)
            if row is not None:
                result.already.append(row)
            elif options.dry_run:
                result.scheduled.append({"item_id": work.id, "context_id": None, "rig": work.rig})
            else:
                new.setdefault(work.rig, []).append(work)
        for rig_name in sorted(new):
            works_here = new[rig_name]
            specs = [(work.item, _fields(work, options), work.stamp) for work in works_here]
            created = ctxs.create(stores.rig(rig_name), specs)  # all rigs' or none: one transaction
            for work, record in zip(works_here, created, strict=True):
                row = {"item_id": work.id, "context_id": record["id"], "rig": work.rig}
                result.scheduled.append(row)
                enqueued.append((events.ENQUEUED, {"context_id": record["id"], "item_id": work.id,
                                                   "rig": work.rig}))
        events.emit_events(town, enqueued)  # with the contexts they tell of, in their transaction
    position = {w.id: n for n, w in enumerate(works)}  # report in the order the user gave
    for rows in (result.scheduled, result.already):
        rows.sort(key=lambda row: position.get(row["item_id"], 0))


def _already(work: _Work, by_item: dict, running: dict[str, str]) -> dict | None:
    """The "already" row of an item that has an open context (the oldest) or a running polecat."""
    existing = by_item.get(work.id)
    if existing:
        oldest = existing[0]
        return {"item_id": work.id, "context_id": oldest.id, "rig": oldest.rig}
    if work.id in running:
        return {"item_id": work.id, "context_id": None, "rig": work.rig, "polecat_id": running[work.id]}
    return None


# -- direct: launch now ----------------------------------------------------------------


def _launch_now(session: Session, works: list[_Work], options: SlingOptions, result: SlingResult) -> None:
    """Launch each item at once through the dispatcher's launch path (no context is kept).

    Each launch asks the executor afresh what runs, under the item's lock: a
    polecat another sling started meanwhile counts.
    """
    town = session.files
    executor = session.require_executor()
    # An item still queued from deferred mode is "already" handled here too: launching it now
    # would leave that context to launch it a second time once deferred mode is back.
    queued = ctxs.open_of_items(town, [work.id for work in works])
    if options.dry_run:
        running = _running_items(session)
        held = gate_view.current(town).reasons  # the last cycle's reading: a dry run reads only
        for work in works:
            row = _already(work, queued, running)
            if row is not None:
                result.already.append(row)
            elif held:
                result.skipped.append({"item_id": work.id, "reason": f"{held[0].code}: {held[0].detail}"})
            else:
                result.dispatched.append({"item_id": work.id, "rig": work.rig, "polecat_id": None})
        return
    sched = town.config.scheduler
    booked = CycleReport(mode="direct")
    launcher = Launcher(session, command_template(town, executor), sched.max_dispatch_failures, booked)
    delay = sched.seconds("spawn_delay")
    for work in works:
        with town.db.transaction():  # two slings never launch one item twice: the second waits here
            row = _already(work, queued, {p.item_id: p.id for p in executor.active()})
            if row is not None:
                result.already.append(row)
                continue
            # The one gate for every launch path: a hold file or the host guard holds a direct launch too.
            held = gate_view.current(town, fresh=True).reasons
            if held:
                result.errors.append({"item_id": work.id, "code": held[0].code,
                                      "error": f"not launched, {held[0].code}: {held[0].detail}"})
                continue
            if booked.launched and delay > 0:
                time.sleep(delay)
            work.stamp = iso()
            order = str(work.item.get("created_at", ""))
            launcher.launch(Work(item=work.item, rig=work.rig, order=order), _fields(work, options))
    result.dispatched += [{"item_id": row["item_id"], "rig": row["rig"], "polecat_id": row["polecat_id"]}
                          for row in booked.launched]
    result.errors += [{"item_id": row["item_id"], "error": row["error"]} for row in booked.failures]
