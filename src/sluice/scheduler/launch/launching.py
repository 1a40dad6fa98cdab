"""The one launch path: the dispatch cycle and sling's direct mode both launch through :class:`Launcher`.

Intent first, then the executor: the launch intent is written on the sling
context before the executor is asked, so a process killed at any point
leaves either nothing launched or an intent the next survey settles with the
executor's ``find``.  The token budget is charged between the intent and
the executor too, and taken back when the launch does not happen, so no
lost write lets a budget be overspent.  Each outcome is booked once — the
``Dispatched`` event and the decision log, the context closed
``dispatched`` — or, for a failure, the ``DispatchFailed`` event, the
failure count and, at the threshold, the breaker
(:mod:`sluice.scheduler.launch.breaker`).

A run that gets a workspace of its own (``executor.workspace = "clone"``)
has it cloned between the intent and the executor
(:mod:`sluice.scheduler.launch.workspaces`); a clone that fails is a launch failure
of the item like any other, with git's words as the failure.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from sluice.core.clock import iso
from sluice.core.items import effective_tokens
from sluice.core.recordclass import asdict, field, recordclass
from sluice.errors import ConfigError, ExecutorError, ExecutorUnavailable, LockBusy, SluiceError
from sluice.executors import workspace as git_workspace
from sluice.executors.base import LaunchRequest, substitute
from sluice.scheduler.launch import runs, workspaces
from sluice.scheduler.launch.admission import needs_spend
from sluice.scheduler.launch.breaker import trip_breaker
from sluice.scheduler.queue.signals import Graphs
from sluice.store.database import admission_state as kept
from sluice.store.database import contexts as ctxs
from sluice.store.database import events
from sluice.store.database import runs as runlog
from sluice.store.database.decisions import append_decisions, make_decision

if TYPE_CHECKING:
    from sluice.core.records import SlingContextFields
    from sluice.executors.base import Executor
    from sluice.executors.workspace import Workspace
    from sluice.scheduler.queue.ranking import Work
    from sluice.scheduler.session import Session
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import Stores

CLOSE_RETRY_WAITS = (0.5, 1.0)  # three attempts to close a dispatched context


@recordclass
class CycleReport:
    """What one cycle planned and did; ``to_json`` is the ``scheduler run --json`` document."""

    planned: list[dict] = field(default_factory=list)
    dispatched: int = 0
    failed: int = 0
    skipped: int = 0
    reason: str = "none"
    capacity: int = 0
    batch: int = 0
    ready: int = 0
    dry_run: bool = False
    paused: bool = False
    mode: str = "deferred"
    launched: list[dict] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    closed: list[dict] = field(default_factory=list)
    backing_off: int = 0
    held: list[dict] = field(default_factory=list)
    why: dict[str, int] = field(default_factory=dict)  # reason code -> queued items it holds back
    requeued: list[dict] = field(default_factory=list)  # breaker cooldowns, throttle exits, run retries
    ended: list[dict] = field(default_factory=list)  # runs whose end this cycle recorded
    messages: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def command_template(town: Town, executor: Executor) -> tuple[str, ...]:
    """The polecat argv template: ``executor.command``, else the executor's own default."""
    command = tuple(town.config.executor.command) or getattr(executor, "default_command", None) or ()
    if not command and executor.kind == "local":
        raise ConfigError(
            "executor.command is not set, so no polecat can be launched; set it with"
            ' `sluice config set executor.command \'["my-agent", "{item_id}"]\'`'
            " (or use executor.kind demo)"
        )
    return tuple(command)


def make_request(
    town: Town, template: tuple[str, ...], item: dict, rig_name: str, context_id: str, fields=None,
    workspace: Workspace | None = None,
) -> LaunchRequest:
    """The launch of one polecat: argv substituted per element, context parameters in the env.

    ``formula``, ``args``, ``vars`` and ``agent`` of the sling reach the polecat as
    ``SLUICE_FORMULA`` … ``SLUICE_AGENT`` (only those that are set); a run with a
    ``workspace`` gets ``SLUICE_WORKSPACE`` and ``SLUICE_BRANCH`` and its
    ``{workspace}`` and ``{branch}`` placeholders filled.
    """
    rig = town.rig(rig_name)
    title = str(item.get("title") or "")
    values = {"item_id": item["id"], "rig": rig.name, "title": title, "context_id": context_id,
              "repo": str(rig.repo)}
    env = {f"SLUICE_{key.upper()}": getattr(fields, key) for key in ("formula", "args", "vars", "agent")
           if fields is not None and getattr(fields, key)}
    place = {}
    if workspace is not None:
        place = {"workspace": str(workspace.path), "branch": workspace.branch}
        values.update(place)
        env.update(SLUICE_WORKSPACE=place["workspace"], SLUICE_BRANCH=place["branch"])
    return LaunchRequest(
        item_id=item["id"], rig=rig.name, title=title, context_id=context_id, repo=str(rig.repo),
        town=str(town.root), argv=substitute(list(template), values), env=env, **place,
        template=tuple(template), values=values,
        attempt=_attempt(fields),
    )


class Started:
    """A launch between :meth:`Launcher.start` and :meth:`Launcher.finish_many`: what finishing books."""

    def __init__(self, work: Work, store, fields: SlingContextFields | None):
        self.work, self.store, self.fields = work, store, fields
        self.context_id: str | None = work.payload.id if work.payload is not None else None
        self.charge: str | None = None
        self.made: Workspace | None = None
        self.started = 0.0
        self.wait: Callable[[], Any] = lambda: None
        self.error: BaseException | None = None  # what the first half raised, raised again by the second
        self.held = ExitStack()  # the workspaces' lock, when the run gets a workspace of its own
        self.locked = False

    @property
    def alone(self) -> bool:
        """Whether it must be finished before another launch begins: it holds the workspaces' lock, or
        its first half failed (an error that is nobody's item's fault stops the cycle there)."""
        return self.locked or self.error is not None


class Launcher:
    """The one launch path: the dispatch cycle and sling's direct mode both launch through it.

    For one piece of work it records the launch intent on the sling context
    (when there is one), builds the request, asks the executor, logs the
    ``Dispatched`` event and the decision, and closes the context
    ``dispatched``; or it books the failure: a ``DispatchFailed`` event and,
    on a context, the failure count and the breaker at ``max_failures``.
    Outcomes go into ``report`` (``launched``/``dispatched``,
    ``failures``/``failed``, ``messages``).  An unavailable executor, a busy
    lock or a refusal of the disk is nobody's item's fault: the intent and
    the budget charge are withdrawn and the error propagates.

    The town, stores and executor are the call's ``session``'s; the clock is
    read afresh at each launch, since launches follow one another.
    """

    def __init__(self, session: Session, template, max_failures, report: CycleReport,
                 sleep: Callable[[float], None] = time.sleep):
        self.town = session.files
        self.stores = session.stores
        self.executor = session.require_executor()
        self.template = template
        self.max_failures = max_failures
        self.report = report
        self.sleep = sleep

    def launch(self, work: Work, fields: SlingContextFields | None = None) -> bool:
        """Launch ``work``; True when its polecat runs (and its context, if any, is closed).

        ``work.payload`` is the sling context, or None for a direct launch,
        which then takes its parameters from ``fields``.
        """
        started = self.start(work, fields)
        return self.finish_many([started])[0] if started is not None else False

    def start(self, work: Work, fields: SlingContextFields | None = None) -> Started | None:
        """The first half of :meth:`launch`: the intent, the charge, the workspace and the executor's
        start; None when the context was cleared or closed since the survey.

        An executor with a ``start`` of its own (the local one) is only
        asked to begin here, and :meth:`finish_many` waits for its answer, so a
        cycle can begin a batch's launches before it waits for the first.
        Any other executor launches here whole.
        """
        context = work.payload
        store = self.stores.rig(context.rig) if context is not None else None
        if context is not None:
            fields = context.fields
        launch = Started(work, store, fields)
        held = ExitStack()
        try:
            # The intent and the budget charge are one commit: a crash leaves both or neither.
            with self.town.db.transaction():
                if context is not None and ctxs.mark_launch(store, context.id) is None:
                    launch = None  # cleared or closed since the survey
                else:
                    launch.charge = self._charge(work, launch.context_id)
        except Exception as err:  # booked by finish, as a refusal of the disk
            launch.error = err
            launch.held = held
            return launch
        if launch is None:
            self.report.skipped += 1
            return None
        try:
            if self._clones(work.rig):
                held.enter_context(workspaces.launching(self.town))
                launch.locked = True
                launch.made = workspaces.prepare(self.town, work.rig, work.item["id"], _attempt(fields))
            request = make_request(self.town, self.template, work.item, work.rig, launch.context_id or "",
                                   fields, launch.made)
            launch.started = time.time()  # the run starts with the polecat, not with its clone
            begin = getattr(self.executor, "start", None) if launch.made is None else None
            if begin is not None:
                launch.wait = begin(request)
            else:
                polecat = self.executor.launch(request)
                launch.wait = lambda: polecat
        except Exception as err:  # booked by finish (a clone discarded under its lock), as if raised there
            launch.error = err
        except BaseException:
            held.close()
            self._withdraw(launch.charge)
            raise
        launch.held = held
        return launch

    def finish_many(self, launches: list[Started]) -> list[bool]:
        """The second half of :meth:`launch` for launches begun together: the executor's answers, and each
        launch booked as made or as failed, True when its polecat runs and its context is closed.  Every
        answer is waited for in order, then the launches made are booked together, one write per log (the
        run records, the events, the decisions, each rig's closes).

        What stops one answer (the executor gone, a refused write) stops
        the cycle, but only once the others are waited for and booked: their
        polecats run.  A crash among the writes leaves what a crash after a
        single launch leaves, an open context with its intent and its
        polecat on record, which the next survey closes as dispatched.
        """
        answered: list[tuple[Started, Any]] = []
        error: BaseException | None = None
        with ExitStack() as held:
            for launch in launches:
                held.enter_context(launch.held)  # a clone stays locked until its run record names it
            for launch in launches:
                try:
                    polecat = self._answer(launch)
                except BaseException as err:  # raised again once the others are booked
                    error = error or err
                    continue
                if polecat is not None:
                    answered.append((launch, polecat))
            runs_of = self._record_runs(answered)
        made = self._book(answered, runs_of)
        if error is not None:
            raise error
        return [id(launch) in made for launch in launches]

    def _answer(self, launch: Started):
        """The executor's answer to a launch begun: its polecat, or None when the launch failed (booked as
        the item's failure); an error that is nobody's item's fault withdraws the launch and is raised."""
        work, context, store = launch.work, launch.work.payload, launch.store
        try:
            if launch.error is not None:
                raise launch.error
            return launch.wait()
        except (ExecutorUnavailable, LockBusy, OSError):  # nobody's item's fault: nothing is counted
            _discard(launch.made)
            self._withdraw(launch.charge)
            if context is not None:
                with contextlib.suppress(OSError, SluiceError):  # else the next survey settles it
                    ctxs.clear_launch(store, [context.id])
            raise
        except ExecutorError as err:
            _discard(launch.made)
            self._withdraw(launch.charge)
            self._failed(work, store, f"launch failed: {err}")
            return None
        except BaseException:
            self._withdraw(launch.charge)
            raise

    def _record_runs(self, answered: list[tuple[Started, Any]]) -> list[dict | None]:
        """The run records of the launches made, in one append; Nones (and a warning each) if refused."""
        records = [runs.launch_record(launch.work.item, launch.work.rig, polecat, started=launch.started,
                                      tokens=_tokens(launch.work), attempt=_attempt(launch.fields),
                                      workspace=launch.made)
                   for launch, polecat in answered]
        if not records:
            return []
        written = self._after_launch([launch.work for launch, _ in answered], "its run record",
                                     lambda: runlog.append(self.town, records))
        return records if written else [None] * len(records)

    def _book(self, answered: list[tuple[Started, Any]], records: list[dict | None]) -> set[int]:
        """The launches made, booked: their ``Dispatched`` events, decisions, budget charges, breakers and
        closes; the ``id`` of each whose context is closed (or that had none)."""
        if not answered:
            return set()
        payloads = []
        for (launch, polecat), run in zip(answered, records, strict=True):
            work = launch.work
            payload = {"context_id": launch.context_id, "item_id": work.item["id"], "rig": work.rig,
                       "polecat_id": polecat.id, "run_id": run["run_id"] if run is not None else None}
            direct = {} if work.payload is not None else {"direct": True}
            scored = {"score": work.score} if work.score is not None else {}
            payloads.append((payload, {**payload, **direct, **scored}))
        events.emit_events(self.town, [(events.DISPATCHED, event) for _, event in payloads])
        works = [launch.work for launch, _ in answered]
        self._after_launch(works, "its decision", lambda: append_decisions(
            self.town, [decision_of(self.town, launch.work, polecat.id, self.stores)
                        for launch, polecat in answered]))
        for launch, polecat in answered:
            work, charge = launch.work, launch.charge
            if charge is not None:
                running = time.time()  # at or after the executor's own stamp of the start
                self._after_launch([work], "its polecat on its budget charge",
                                   lambda c=charge, p=polecat.id, r=running:
                                   kept.name_charge(self.town, c, p, r))
            self._after_launch([work], "its breaker healing",
                               lambda i=work.item["id"]: kept.heal(self.town, i))
        self.report.launched += [payload for payload, _ in payloads]
        closes: dict[str, list[tuple[Started, str]]] = {}
        made = set()
        for launch, polecat in answered:
            if launch.work.payload is None:
                made.add(id(launch))
            else:
                closes.setdefault(launch.store.rig.name, []).append((launch, polecat.id))
        for group in closes.values():
            contexts = [(launch.work.payload, polecat_id) for launch, polecat_id in group]
            if self._close_dispatched(group[0][0].store, contexts):
                made.update(id(launch) for launch, _ in group)
        self.report.dispatched += len(made)
        self.report.failed += len(answered) - len(made)
        return made

    def _clones(self, rig_name: str) -> bool:
        """A workspace is made here for local and tmux polecats; an executor whose polecats run on other
        machines (``makes_workspaces``) makes its own there."""
        return workspaces.uses_clone(self.town, rig_name) and not getattr(self.executor, "makes_workspaces",
                                                                          False)

    def _after_launch(self, works: list[Work], what: str, write: Callable[[], Any]) -> bool:
        """Bookkeeping after launches: the polecats run whatever happens here, so the cycle reports them
        launched, and a record the disk refuses is a warning in the report, not a failure of the cycle."""
        try:
            write()
            return True
        except OSError as err:
            self.report.messages += [f"warning: {work.item['id']} launched, but {what} was not written: {err}"
                                     for work in works]
            return False

    def _charge(self, work: Work, context_id: str | None) -> str | None:
        """Charge the launch to the token budgets before the executor is asked; None when none applies.

        Charging first is what makes a budget hold: a charge written after
        the polecat started is lost to a full disk or a killed process, and
        the next cycle would launch into tokens already spent.  A charge the
        disk refuses stops this launch like any refusal of the disk (its
        intent withdrawn, the error propagates, nobody's item is blamed); a
        charge whose launch does not happen is withdrawn.
        """
        config = self.town.config
        if not needs_spend(config):
            return None
        return kept.record_launch(self.town, rig=work.rig, item_id=work.item["id"],
                                  context_id=context_id or "", polecat_id="", tokens=_tokens(work),
                                  now=time.time(), window=config.scheduler.seconds("budget_window"))

    def _withdraw(self, charge: str | None) -> None:
        """Take back the charge of a launch that did not happen; a charge left standing only holds back."""
        if charge is not None:
            try:
                kept.withdraw_charge(self.town, charge)
            except (OSError, SluiceError):
                self.report.messages.append("warning: a launch that did not happen stays charged to the"
                                            " token budget until the window passes")

    def _close_dispatched(self, store, launched: list[tuple[Any, str]]) -> bool:
        """Close the contexts of one rig's launches ``dispatched`` (each with its polecat), in one append;
        False when even the last resort failed (their intents still keep them from launching again)."""
        closes = [(context.id, ctxs.DISPATCHED, {"polecat_id": polecat_id})
                  for context, polecat_id in launched]
        last_error: Exception | None = None
        for attempt in range(len(CLOSE_RETRY_WAITS) + 1):
            try:
                ctxs.close_many(self.town, store, closes)
                return True
            except (OSError, SluiceError) as err:
                last_error = err
                if attempt < len(CLOSE_RETRY_WAITS):
                    self.sleep(CLOSE_RETRY_WAITS[attempt])
        message = f"dispatch succeeded but closing its context failed: {last_error}"
        for context, _polecat_id in launched:
            self.report.messages.append(f"warning: {context.work_id}: {message}")
        try:  # last resort; failing that, the intent on the context still prevents a relaunch
            ctxs.close_many(self.town, store, [(cid, ctxs.DISPATCH_CLOSE_FAILED, extra)
                                               for cid, _reason, extra in closes])
        except (OSError, SluiceError):
            for context, _polecat_id in launched:
                self.report.messages.append(
                    f"warning: {context.id} is still open with a launch intent; the next cycle will settle it"
                )
        return False

    def _failed(self, work: Work, store, error: str) -> None:
        context = work.payload
        self.report.failed += 1
        if context is None:  # a direct launch: no context to count the failure on or to break
            failures = 1
        else:
            updated = ctxs.record_failure(store, context.id, error)
            failures = updated.failures if updated is not None else context.failures + 1
        row = {"context_id": context.id if context is not None else None, "item_id": work.item["id"],
               "rig": work.rig, "error": error, "failures": failures, "circuit_broken": False}
        payload = {k: v for k, v in row.items() if k != "circuit_broken"}
        events.emit_event(self.town, events.DISPATCH_FAILED, payload)
        if context is not None and failures >= self.max_failures:
            ctxs.close(self.town, store, context.id, ctxs.CIRCUIT_BROKEN, {"last_failure": error})
            if updated is not None and updated.fields is not None:
                trip_breaker(self.town, updated.fields, error)
            events.emit_event(self.town, events.CIRCUIT_BROKEN, {
                "context_id": context.id, "item_id": work.item["id"], "rig": work.rig,
                "failures": failures, "last_failure": error})
            row["circuit_broken"] = True
            self.report.messages.append(
                f"{work.item['id']}: context {context.id} failed {failures} times, circuit-broken"
            )
        self.report.failures.append(row)


def decision_of(town: Town, work: Work, polecat_id: str, stores: Stores) -> dict:
    """A launch as ``decisions.jsonl`` logs it, in the advisor's decision shape, so fairness sees it."""
    item = work.item
    graph_id = work.graph_id if work.score is not None else Graphs(town, stores).of_record(item)
    return make_decision(
        item, town.rig(work.rig), graph_id=graph_id, score=work.score, reasons=work.reasons, at=iso(),
        source="dispatch", context_id=getattr(work.payload, "id", None), polecat_id=polecat_id,
    )


def _tokens(work: Work) -> int:
    return work.tokens if work.tokens is not None else effective_tokens(work.item)


def _discard(made: Workspace | None) -> None:
    """A workspace whose launch failed: nothing ran in it, so it goes (unless, somehow, it holds work)."""
    if made is not None:
        git_workspace.retire(made.path)


def _attempt(fields: SlingContextFields | None) -> int:
    """1 for the first run after a sling, one more for each retry of a failed run."""
    return (fields.run_failures if fields is not None else 0) + 1
