"""The Python API: open a town and drive it, as the CLI and the MCP server do.

::

    import sluice

    town = sluice.open_town("/path/to/town")        # or sluice.init_town(path)
    town.sling(["api-1"], rig="api", formula="fix")  # -> SlingResult
    town.run_cycle(dry_run=True)                     # -> CycleReport
    print(town.status().queued_ready)                # -> QueueStatus

Every method is one command of the CLI, and every result is a dataclass
whose ``to_json()`` is exactly the document that command prints with
``--json`` (the CLI and the MCP tools print nothing else).  Errors are
:class:`sluice.errors.SluiceError` subclasses; a lock that stays busy is
:class:`~sluice.errors.LockBusy`.

The executor is the town's configured one (``executor.kind``), looked up on
each call, unless one is handed to :func:`open_town`: then every call of that
town uses it.  :class:`sluice.executors.memory.MemoryExecutor` runs a whole
town in memory, without processes, for tests.

The results are defined in :mod:`sluice.results` and re-exported here.  An
item is an :class:`~sluice.results.Item`: its beads record, of which every
key an export carries is kept, as a read-only mapping with the keys sluice
reads as attributes.

A town kept between calls answers :meth:`Town.next` and
:meth:`Town.schedule_status` from its rig indexes kept open
(:mod:`sluice.store.items.kept`): before each call it re-checks the config file and
every rig's items and ephemeral log, so an answer is never older than the
files, and a repeated call costs a few milliseconds, not a re-open.

The facade imports the machinery of a command inside its method, so a call
pays only for what it uses (``schedule next`` never loads the dispatcher or
an executor): every CLI command starts here, and start-up time is measured.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from os import PathLike, fspath
from pathlib import Path
from types import FunctionType
from typing import TYPE_CHECKING, Any

from sluice import results
from sluice.core.defaults import NEXT_LIMIT, READY_LIMIT
from sluice.core.text import printable, unencodable_problem
from sluice.errors import TextRefused, UsageError
from sluice.results import *  # noqa: F403 -- every result, re-exported (see __all__)

if TYPE_CHECKING:
    from sluice.executors.base import Executor
    from sluice.scheduler.launch.launching import CycleReport
    from sluice.scheduler.launch.sling import SlingResult
    from sluice.scheduler.session import Session
    from sluice.scheduler.views.mergequeue import MergeQueue
    from sluice.store.files.town import Town as TownFiles
    from sluice.store.items.kept import KeptReads

__all__ = ["CycleReport", "SlingResult", "Town", "init_town", "open_town"]
__all__ += results.__all__


def __getattr__(name: str) -> Any:
    # The dispatcher's and sling's own result types, re-exported lazily (see the module docstring).
    if name == "CycleReport":
        from sluice.scheduler.launch.launching import CycleReport

        return CycleReport
    if name == "SlingResult":
        from sluice.scheduler.launch.sling import SlingResult

        return SlingResult
    raise AttributeError(f"module 'sluice.api' has no attribute {name!r}")


# -- the facade -------------------------------------------------------------------------------


class Town:
    """One town, opened: every operation of the CLI as a method.  Make one with :func:`open_town`."""

    def __init__(self, files: TownFiles, executor: Executor | None = None):
        self.files = files  # where everything lives (paths, config, rigs): sluice.store.files.town.Town
        self.executor = executor  # None: the configured executor, looked up on each call
        self._kept: KeptReads | None = None  # next() and schedule_status(): stores kept open between calls

    def __repr__(self) -> str:
        return f"sluice.Town({str(self.root)!r})"

    @property
    def root(self) -> Path:
        return self.files.root

    def _session(self) -> Session:
        """This call's context (sluice.scheduler.session): the config read once, one ``now``."""
        from sluice.scheduler.session import Session

        return Session(self.files, self.executor)

    @contextmanager
    def _kept_session(self) -> Iterator[Session]:
        """A session over the kept town and stores, re-checked against the files first, under their lock."""
        from sluice.scheduler.session import Session
        from sluice.store.items.kept import KeptReads

        if self._kept is None:
            self._kept = KeptReads(self.files.root)
        with self._kept.lock:
            files, stores = self._kept.fresh()
            yield Session(files, self.executor, stores=stores)

    # -- rigs and configuration --------------------------------------------------------------
    def add_rig(self, name: str, repo: str | Path, prefix: str | None = None,
                items: str | Path | None = None, *, items_command: str | Sequence[str] | None = None,
                watch: Iterable[str | Path] = (), own_store: bool = False,
                remote: str | None = None) -> results.RigInfo:
        """Register git repository ``repo`` as rig ``name`` (ids ``<prefix>-…`` route to it).

        ``items`` names a beads export to read items from (read-only); a
        ``.beads/issues.jsonl`` in the repository is found without it.
        ``items_command`` (text split like a shell would, never run by one, or
        an argv list) prints the items instead, refreshed when a ``watch``
        path changes (default ``REPO/.beads``).  A repository with a beads
        store but no export is refused unless one of these or ``own_store``
        says what to do.  ``remote`` is the URL a workspace on another machine
        clones the rig from (default: the repository's ``origin``, if any).
        """
        from sluice.store.items.rigs import add_rig, rig_row

        command = list(items_command) if items_command is not None and not isinstance(items_command, str) \
            else items_command
        rig = add_rig(self.files, name, Path(repo), prefix, Path(items) if items is not None else None,
                      items_command=command, watch=tuple(Path(w) for w in watch), own_store=own_store,
                      remote=remote)
        return results.RigInfo.from_json(rig_row(self.files, rig))

    def refresh_rig(self, name: str) -> results.RigRefreshed:
        """Run rig ``name``'s items command now; a failure is a SourceFailed naming rig and command."""
        from sluice.store.items.sources import refresh

        rig = self.files.rig(name)
        if rig.command is None:
            from sluice.errors import InvalidOperation

            raise InvalidOperation(f"rig {name!r} does not read its items through a command")
        state = refresh(self.files, rig)
        row = {"rig": name, "records": state["records"], "ok_at": state["ok_at"]}
        return results.RigRefreshed.from_json(row)

    def remove_rig(self, name: str, force: bool = False) -> results.RigRemoved:
        """Unregister rig ``name``; queued contexts refuse it unless ``force`` (then they close as
        ``rig-removed``).  The rig's store moves to ``.sluice/removed/`` (``store`` in the result)."""
        from sluice.store.items.rigs import remove_rig

        return results.RigRemoved.from_json(remove_rig(self.files, name, force))

    def rigs(self) -> list[results.RigInfo]:
        from sluice.store.items.rigs import rig_rows

        return [results.RigInfo.from_json(row) for row in rig_rows(self.files)]

    def config_get(self, key: str) -> Any:
        """One config value (``scheduler.max_polecats``, ``executor.command``, …)."""
        from sluice.core import models

        value = models.get_config_value(self.files.load_config(), key)
        duration = "duration" in models.CONFIG_KEYS.get(models.config_pattern(key), "")
        if key.startswith("scheduler.") and isinstance(value, str) and duration:
            value = models.format_duration(models.parse_duration(value))
        return value

    def config_set(self, key: str, value: Any) -> None:
        """Set one config value; text is parsed as ``sluice config set`` parses it."""
        from sluice.core.models import apply_config_value, parse_config_value

        parsed = parse_config_value(key, value) if isinstance(value, str) else value
        self.files.update_config(lambda config: apply_config_value(config, key, parsed))

    # -- items (the small tracker; scheduling itself never writes an item) -----------------
    def create_item(self, rig: str, title: str, *, priority: int = 2, issue_type: str = "task",
                    labels: Iterable[str] = (), deps: Iterable[str] = (), parent: str | None = None,
                    description: str = "", tokens: int | None = None, assignee: str = "",
                    touches: Iterable[str] = ()) -> results.Item:
        """Create an item in ``rig``'s own store; ``deps`` are ``ID`` (blocks) or ``TYPE:ID``.

        ``touches`` are the path globs the work will edit (``metadata.touches``, the overlap gate).
        """
        from sluice.store.items.tracker import NewItem, create_item

        spec = NewItem(title=title, priority=priority, issue_type=issue_type, labels=tuple(labels),
                       deps=tuple(deps), parent=parent, description=description, tokens=tokens,
                       assignee=assignee, touches=tuple(touches))
        return results.Item.from_json(create_item(self.files, rig, spec))

    def item(self, item_id: str) -> results.Item:
        from sluice.store.items.tracker import show_item

        return results.Item.from_json(show_item(self.files, item_id))

    def items(self, rig: str | None = None, status: str | None = None,
              labels: Iterable[str] = ()) -> results.Items:
        from sluice.store.items.tracker import list_items

        return results.Items.from_json(list_items(self.files, rig, status, tuple(labels)))

    def ready(self, rig: str | None = None, limit: int = READY_LIMIT, *, labels: Iterable[str] = (),
              labels_any: Iterable[str] = (), assignee: str | None = None, unassigned: bool = False,
              issue_type: str | None = None, priority: int | None = None,
              sort: str = "priority") -> results.ItemRows:
        """Ready items by beads' rules, most urgent first (``limit`` 0 = all).

        The filters are ``bd ready``'s: every label of ``labels``, at least one
        of ``labels_any``, exactly ``assignee`` (or ``unassigned``), type and
        priority; ``sort="oldest"`` orders by creation time instead.
        """
        from sluice.core.items import ReadyFilter
        from sluice.store.items.tracker import ready

        where = ReadyFilter(tuple(labels), tuple(labels_any), assignee, unassigned, issue_type, priority)
        return results.ItemRows(ready(self.files, rig, limit, where=where, sort=sort))

    def blocked(self, rig: str | None = None) -> results.ItemRows:
        """Blocked items, each with ``blocked_by`` (what blocks it) and ``blocked_by_count``."""
        from sluice.store.items.tracker import blocked_json

        return results.ItemRows(blocked_json(self.files, rig))

    def update_item(self, item_id: str, *, status: str | None = None, priority: int | None = None,
                    assignee: str | None = None, add_labels: Iterable[str] = ()) -> results.Item:
        from sluice.store.items.tracker import update_item

        row = update_item(self.files, item_id, status, priority, assignee, tuple(add_labels))
        return results.Item.from_json(row)

    def close_item(self, item_id: str, reason: str = "Closed") -> results.Item:
        from sluice.store.items.tracker import close_item

        return results.Item.from_json(close_item(self.files, item_id, reason))

    def add_dependency(self, source: str, target: str, dep_type: str = "blocks") -> results.DependencyAdded:
        """``source`` depends on ``target`` (for ``blocks``: is blocked by it); cycles are refused."""
        from sluice.store.items.tracker import add_dependency

        return results.DependencyAdded.from_json(add_dependency(self.files, source, target, dep_type))

    def import_items(self, rig: str, path: str | Path) -> results.ImportResult:
        from sluice.store.items.tracker import import_items

        return results.ImportResult.from_json(import_items(self.files, rig, Path(path)))

    # -- the dispatcher ---------------------------------------------------------------------
    def sling(self, items: Sequence[str], rig: str | None = None, *, formula: str = "", args: str = "",
              vars: Iterable[str] = (), agent: str = "", force: bool = False,
              dry_run: bool = False, rig_last: bool = False) -> SlingResult:
        """Queue ``items`` (deferred mode) or launch them now (direct mode).

        Each item goes to ``rig``, or to the rig its prefix routes to.  Epics
        and convoys sling their open items.  ``force`` overrides the
        cross-rig and status guards (never a closed item).  An item already
        queued or running is reported under ``already``; per-item refusals
        are in ``errors`` (``result.ok`` is False when any item was refused).
        With ``rig_last``, ``items`` is the command line's ``ITEM... [RIG]``:
        its last entry is the rig when it names one.
        """
        from sluice.scheduler.launch.sling import SlingOptions, parse_targets, sling_items

        if isinstance(items, str):
            items = [items]
        options = SlingOptions(formula=formula, args=args, vars=tuple(vars), agent=agent, force=force,
                               dry_run=dry_run)
        session = self._session()
        if rig_last:
            if rig is not None:
                raise UsageError("give the rig last among the items or as rig, not both",
                                 parameters=("rig",))
            items, rig = parse_targets(session, list(items))
        return sling_items(session, list(items), rig, options)

    def sling_ready(self, rig: str | None = None, labels: Iterable[str] = (), *, formula: str = "",
                    args: str = "", vars: Iterable[str] = (), agent: str = "", force: bool = False,
                    dry_run: bool = False) -> SlingResult:
        """Queue (or launch) every ready item of ``rig`` (None: of every rig) carrying every label of
        ``labels``.  The guards skip what they refuse (``skipped``, with the reason) instead of
        failing the sling: nobody named those items."""
        from sluice.scheduler.launch.sling import SlingOptions, sling_ready

        if rig is not None:
            self.files.rig(rig)  # an unknown rig is an error before anything is read
        options = SlingOptions(formula=formula, args=args, vars=tuple(vars), agent=agent, force=force,
                               dry_run=dry_run)
        return sling_ready(self._session(), rig, tuple(labels), options)

    def retry(self, items: Sequence[str] = (), *, since: str | None = None, formula: str = "", args: str = "",
              vars: Iterable[str] = (), agent: str = "", dry_run: bool = False) -> SlingResult:
        """Sling again the items whose latest run failed, timed out or vanished: ``items``, or with none
        every such item (``since``: whose latest run started that recently, e.g. ``1d``).  A named item
        whose latest run did not fail is an InvalidOperation saying how it ended."""
        from sluice.scheduler.launch.sling import SlingOptions, retry

        if items and since is not None:
            raise UsageError("since goes with retrying every failed item, not named ones",
                             parameters=("since",))
        options = SlingOptions(formula=formula, args=args, vars=tuple(vars), agent=agent, dry_run=dry_run)
        return retry(self._session(), list(items), _duration(since, "since"), options)

    def run_cycle(self, *, dry_run: bool = False, batch: int | None = None,
                  ignore_backoff: bool = False, item: str | None = None) -> CycleReport:
        """One dispatch cycle now (``dry_run``: what it would do, changing nothing).

        Failed launches wait out their retry backoff unless ``ignore_backoff``.
        With ``item``, only that item is launched, if every cap, budget and gate
        allows; otherwise :class:`~sluice.errors.NotAdmitted` (exit 1)
        carries the reasons ``explain`` gives.
        """
        from sluice.scheduler.launch.dispatch import run_cycle

        return run_cycle(self._session(), batch=batch, dry_run=dry_run, ignore_backoff=ignore_backoff,
                         item=item)

    def promote(self, item: str, undo: bool = False) -> results.Promotion:
        """Move ``item``'s queued context to the head of the dispatch order; ``undo`` puts it back.

        Several promoted items go in the order they were promoted; caps and
        gates still apply. Recorded on the context, so it survives restarts.
        """
        from sluice.scheduler.queue.promote import promote

        return results.Promotion.from_json(promote(self._session(), item, undo=undo))

    def status(self, limit: int = 50) -> results.QueueStatus:
        """Pause state, queue size, polecats and capacity, with the queue's first ``limit`` rows (0: all)."""
        from sluice.scheduler.queue.views import status

        return results.QueueStatus.from_json(status(self._session(), limit=limit))

    def list(self, limit: int = 0, offset: int = 0) -> results.Queue:
        """The queue: ready items in dispatch order, then blocked ones; ``limit`` rows from ``offset``."""
        from sluice.scheduler.views.forecast import list_queue

        return results.Queue.from_json(list_queue(self._session(), limit=limit, offset=offset))

    def pause(self, actor: str | None = None) -> results.PauseState:
        """Stop dispatch cycles from launching (slinging still queues); ``actor`` is who paused."""
        from sluice.scheduler.queue.control import pause

        return results.PauseState.from_json(pause(self._session(), actor))

    def resume(self, actor: str | None = None) -> results.PauseState:
        """Let cycles launch again; ``actor`` is who resumed (the ``Resumed`` event's ``by``)."""
        from sluice.scheduler.queue.control import resume

        return results.PauseState.from_json(resume(self._session(), actor))

    def clear(self, item: str | None = None, actor: str | None = None) -> results.ClearResult:
        """Close every queued context, or only ``item``'s (in every rig); no item is touched."""
        from sluice.scheduler.queue.control import clear

        return results.ClearResult.from_json(clear(self._session(), item, actor))

    def patrol(self, rig: str, fix: bool = False) -> results.PatrolReport:
        """One rig's queue health; ``fix`` closes its stale and duplicate contexts only."""
        from sluice.scheduler.unattended.patrol import patrol

        return results.PatrolReport.from_json(patrol(self._session(), rig, fix))

    def explain(self, item: str) -> results.Explanation:
        """Would the next cycle launch ``item``, and every reason (code and detail) it would not."""
        from sluice.scheduler.views.forecast import explain

        return results.Explanation.from_json(explain(self._session(), item))

    def forecast(self, limit: int = 0) -> results.Forecast:
        """When each queued item is expected to start and finish, from the run history (0: every item)."""
        from sluice.scheduler.views.forecast import forecast

        return results.Forecast.from_json(forecast(self._session(), limit=limit))

    def throttle(self, until: str | None = None, rig: str | None = None, reason: str = "",
                 clear: bool = False, actor: str | None = None) -> results.ThrottleState:
        """Hold new launches of ``rig`` (or the town) until ``until`` (``10m`` or ISO); ``clear`` lifts it."""
        from sluice.scheduler.launch.throttles import throttle

        return results.ThrottleState.from_json(
            throttle(self._session(), until=until, rig=rig, reason=reason, clear=clear, actor=actor))

    def broken(self) -> results.BrokenItems:
        """Circuit-broken items: failures, last error, next attempt (``scheduler broken``)."""
        from sluice.scheduler.launch.breaker import broken_rows

        return results.BrokenItems.from_json(broken_rows(self._session()))

    def reset(self, item: str) -> results.ResetResult:
        """Queue a circuit-broken item again now with a fresh failure count (``scheduler reset``)."""
        from sluice.scheduler.launch.breaker import reset

        return results.ResetResult.from_json(reset(self._session(), item))

    def polecat_usage(self, ref: str, tokens: int) -> results.UsageReport:
        """Report what polecat (or item) ``ref`` really used; it replaces the estimate in the budget."""
        from sluice.scheduler.launch.usage import report_usage

        return results.UsageReport.from_json(report_usage(self._session(), ref, tokens))

    def compact(self, rig: str | None = None) -> results.CompactResult:
        """Compact the run log: one line per run, runs ended before ``scheduler.compact_retention``
        archived.

        Closed sling contexts are rows of the town database and need no
        compaction; ``rig`` is only checked to name a rig.
        """
        from sluice.scheduler.queue.control import compact

        return results.CompactResult.from_json(compact(self._session(), rig))

    def hooks_report(self, rig: str | None = None, repo: str | Path | None = None,
                     hook: str = "") -> MergeQueue:
        """A rig's merge-queue depth (name ``rig`` or its ``repo``), logged as a ``MergeQueueDepth`` event."""
        from sluice.scheduler.views.mergequeue import report

        return report(self.files, rig, Path(repo) if repo is not None else None, hook)

    # -- watching ---------------------------------------------------------------------------
    def snapshot(self, limit: int = 0) -> results.Snapshot:
        """The town's state as one document: what ``sluice snapshot --json``, ``top`` and ``web`` show.

        ``limit`` keeps the queue's first rows only (0: all); counts stay exact.
        """
        from sluice.scheduler.views.snapshot import snapshot

        return results.Snapshot.from_json(snapshot(self._session(), limit=limit))

    def item_detail(self, item_id: str) -> results.ItemDetail:
        """One item as the dashboard's item page shows it: record, queue row, score and reasons, blockers."""
        from sluice.scheduler.views.snapshot import item_detail

        return results.ItemDetail.from_json(item_detail(self._session(), item_id))

    def daemon(self, interval: float = 180.0, once: bool = False, timeout: float = 300.0) -> int:
        """Run dispatch cycles every ``interval`` seconds until signalled (or one, with ``once``).

        Each cycle runs in a child process that is killed after ``timeout``
        seconds, except with an executor handed to :func:`open_town`: then
        cycles run in this process (the child could not see its polecats).
        """
        from sluice.scheduler.unattended.daemon import run_daemon

        return run_daemon(self.files, interval=interval, once=once, timeout=timeout, executor=self.executor)

    # -- polecats ---------------------------------------------------------------------------
    def polecats(self, running: bool = False) -> results.Polecats:
        """The running polecats, then finished ones and the runs that ended in the last hour.

        ``running`` keeps only the live ones.  Ended rows carry ``outcome`` and ``exit_code``.
        """
        from sluice.scheduler.launch.ends import polecat_listing

        return results.Polecats.from_json(polecat_listing(self._session(), running_only=running))

    def export(self, rig: str | None = None, *, runs: bool = False,
               open_only: bool = False) -> results.Export:
        """The town's own records as beads tools read them (``sluice export``): a rig's (or every rig's)
        ephemeral records in the shape of beads JSONL, oldest first, or with ``runs`` the run records."""
        from sluice.store.database.export import ephemeral_records, run_records

        if runs:
            return results.Export.from_json(run_records(self.files))
        return results.Export.from_json(ephemeral_records(self.files, rig, open_only=open_only))

    def runs(self, *, item: str | None = None, rig: str | None = None, outcome: str | None = None,
             since: str | None = None, limit: int = 100) -> results.Runs:
        """Run records, newest first (``sluice runs``); ``since`` a duration such as ``1h``; limit 0 = all."""
        from sluice.scheduler.launch.ends import runs_listing

        return results.Runs.from_json(runs_listing(self._session(), item=item, rig=rig, outcome=outcome,
                                           since=_duration(since, "since"), limit=limit))

    def run_item_ids(self, *, rig: str | None = None, outcome: str | None = None, since: str | None = None,
                     limit: int = 100) -> list[str]:
        """The items whose latest run ended ``outcome`` (any: None), newest first, at most ``limit`` of
        them (``sluice runs --ids``): ``outcome="failed"`` gives the items still failed, ready to sling
        again."""
        from sluice.scheduler.launch.ends import run_item_ids

        return run_item_ids(self._session(), rig=rig, outcome=outcome, since=_duration(since, "since"),
                            limit=limit)

    def feed(self, *, rig: str | None = None, kind: str | None = None, since: str | None = None,
             limit: int = 100) -> results.Feed:
        """The event log in words, oldest first (``sluice feed --json``): ``{at, type, text, event}`` rows."""
        from sluice.scheduler.views.feed import feed

        rows = feed(self.files, rig=rig, kind=kind, since=_duration(since, "since"), limit=limit)
        return results.Feed.from_json(rows)

    def stop_polecat(self, ref: str, actor: str | None = None) -> results.Polecats:
        """Stop polecat ``ref``, or every running polecat of item ``ref``; ``actor`` is who asked."""
        from sluice.scheduler.launch.ends import stop_polecats

        return results.Polecats.from_json(stop_polecats(self._session(), ref, actor=actor))

    def polecat_logs(self, ref: str, follow: bool = False) -> Iterator[str]:
        from sluice.scheduler.launch.ends import polecat_logs

        return polecat_logs(self._session(), ref, follow=follow)

    # -- advisory scoring -------------------------------------------------------------------
    def next(self, limit: int = NEXT_LIMIT, graph_id: str | None = None,
             preview: bool = False) -> results.Decisions:
        """Score the ready items and say which should go next; ``preview`` records nothing."""
        from sluice.scheduler.views.advisor import next_decisions

        with self._kept_session() as session:
            decisions = next_decisions(session, graph_id=graph_id, limit=limit, preview=preview)
        return results.Decisions.from_json(decisions)

    def schedule_status(self, recent: int = 10) -> results.ScheduleStatus:
        from sluice.scheduler.views.advisor import status

        with self._kept_session() as session:
            return results.ScheduleStatus.from_json(status(session, recent=recent))

    def policy(self) -> results.PolicyInfo:
        """The scoring policy in force (the defaults when there is no policy file)."""
        from sluice.scheduler.views.advisor import policy_show

        return results.PolicyInfo.from_json(policy_show(self.files))

    def set_policy(self, **changes: Any) -> results.PolicyInfo:
        """Change policy fields (``priority``, ``merge_queue_threshold``, … ``graph_id``); None keeps one."""
        from sluice.scheduler.views.advisor import policy_set

        return results.PolicyInfo.from_json(policy_set(self.files, **changes))

    def unset_policy(self, graph_id: str) -> results.PolicyInfo:
        """Remove graph ``graph_id``'s weight overrides (its items use the base weights again)."""
        from sluice.scheduler.views.advisor import policy_unset

        return results.PolicyInfo.from_json(policy_unset(self.files, graph_id))


# -- the text every method takes ---------------------------------------------------------------
#
# Every public method of Town (and open_town, init_town) passes its text arguments through
# _check_text first: text no encoding can hold (a lone surrogate, as JSON's "\ud800" or a command
# line argument of bad bytes decodes) is refused, and so is text longer than its cap, before anything
# is read or written.  The refusal is a TextRefused (a usage error) naming the argument; it never
# repeats the text.  Every surface calls these methods, so this is the one place the rule lives.

ID_MOST = 200  #: an item, polecat or graph id, a rig name or prefix, a label, a status, an actor
REASON_MOST = 1_000  #: a throttle's or a close's reason
PATH_MOST = 4_096  #: a path (PATH_MAX), a URL, a watched path or glob
TITLE_MOST = 500  #: an item's title (beads allows 500)
DESCRIPTION_MOST = 64 * 1024  #: an item's description, a sling's args, a config value
TEXT_MOST = 4_096  #: any other text argument
ENTRIES_MOST = 100_000  #: the entries of a list argument (items to sling, labels, deps)

_MOST = {
    **dict.fromkeys(("name", "prefix", "rig", "item", "item_id", "items", "ref", "graph_id", "parent",
                     "source", "target", "dep_type", "deps", "labels", "labels_any", "add_labels",
                     "status", "assignee", "issue_type", "actor", "sort", "outcome", "kind", "since",
                     "until", "hook", "key", "formula", "agent"), ID_MOST),
    "reason": REASON_MOST,
    **dict.fromkeys(("repo", "path", "watch", "touches", "remote"), PATH_MOST),
    "title": TITLE_MOST,
    **dict.fromkeys(("description", "args", "value", "items_command"), DESCRIPTION_MOST),
}
#: Where one method's argument is not what the name means elsewhere (``add_rig``'s items is a path).
_MOST_IN = {("add_rig", "items"): PATH_MOST}
#: Arguments the command line always takes as an option of the same name (``--title``): a refusal
#: names them as parameters, so the command line says the flag.
_FLAGGED = frozenset(("title", "description", "reason", "actor", "graph_id", "until", "since", "kind",
                      "outcome", "assignee", "labels", "labels_any", "add_labels", "touches", "formula",
                      "args", "agent", "vars", "deps", "parent", "hook", "remote", "prefix"))


def _check_text(method: str, name: str, value: Any) -> None:
    """Refuse ``value`` (argument ``name`` of ``method``) if it holds text no encoding can hold or is
    longer than its cap; lists, tuples and sets are checked entry by entry, paths as their text."""
    if value is None or isinstance(value, (bool, int, float)):
        return
    most = _MOST_IN.get((method, name)) or _MOST.get(name, TEXT_MOST)
    parameters = (name,) if name in _FLAGGED else ()
    if isinstance(value, (list, tuple, set, frozenset)):
        if len(value) > ENTRIES_MOST:
            raise TextRefused(f"{name} has {len(value):,} entries; at most {ENTRIES_MOST:,} are taken",
                              parameters=parameters)
        for index, entry in enumerate(value):
            _check_one(f"{name}[{index}]", entry, most, parameters)
        return
    if isinstance(value, dict):  # a config value given as JSON
        problem = unencodable_problem(value, name)
        if problem is not None:
            raise TextRefused(problem, parameters=parameters)
        return
    if isinstance(value, PathLike):
        value = fspath(value)
    _check_one(name, value, most, parameters)


def _check_one(where: str, value: Any, most: int, parameters: tuple[str, ...]) -> None:
    if isinstance(value, PathLike):
        value = fspath(value)
    if not isinstance(value, str):
        return
    if len(value) > most:
        raise TextRefused(f"{printable(where)} is {len(value):,} characters long; at most {most:,} are taken",
                          parameters=parameters)
    problem = unencodable_problem(value, where)
    if problem is not None:
        raise TextRefused(problem, parameters=parameters)


def _checked(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with its text arguments checked (:func:`_check_text`) before it runs."""
    code = function.__code__
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    method = function.__name__

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for name, value in zip(names, args, strict=False):
            _check_text(method, name, value)
        for name, value in kwargs.items():
            _check_text(method, name, value)
        return function(*args, **kwargs)

    return checked


for _name, _function in [*vars(Town).items()]:
    if not _name.startswith("_") and isinstance(_function, FunctionType):
        setattr(Town, _name, _checked(_function))
del _name, _function


def _duration(text: str | None, name: str) -> float | None:
    """A duration argument (``1h``, ``30m``) in seconds; a bad one is a usage error naming it."""
    if text is None:
        return None
    from sluice.core.clock import parse_duration

    try:
        return parse_duration(text)
    except ValueError:
        raise UsageError(f"{name} {text!r} is not a duration (e.g. 30m, 1h, 2h30m)",
                         parameters=(name,)) from None


@_checked
def open_town(path: str | Path | None = None, executor: Executor | None = None) -> Town:
    """The town at ``path`` (or from ``SLUICE_TOWN``, or the cwd upwards); TownNotFound if none.

    ``executor`` replaces the configured executor for every call through
    the returned town (e.g. an in-memory one in tests).
    """
    from sluice.store.database.migrate import ensure
    from sluice.store.files.town import find_town

    files = find_town(path)
    ensure(files)
    return Town(files, executor)


@_checked
def init_town(path: str | Path, executor: Executor | None = None) -> Town:
    """Create a town at ``path`` (an existing one is left as it is) and open it."""
    from sluice.store.files.town import init_town as create

    return Town(create(Path(path)), executor)
