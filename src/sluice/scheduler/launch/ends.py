"""The end of a run: recorded once, from the executor's own record of the exit, and acted on.

* **Settling** (:func:`settle`): any command that looks — the cycle, the
  daemon tick, ``runs``, ``polecat list``, a sling, the views — compares the
  running run records with the executor's polecats (local ``.exit`` files,
  tmux supervisors, Ray job states) and records each end with its outcome
  (:func:`sluice.scheduler.launch.runs.outcome_of`).  ``runtime_seconds`` runs from
  the launch to the exit the executor saw, not to the moment someone looked.
* **Follow-ups**, once per end (the run log hands each ended record to one
  caller only): a ``PolecatExited`` event; for ``throttled`` a throttle on
  the rig and the item queued again (:func:`sluice.scheduler.launch.throttles.throttle_exit`);
  for a failed, timed-out or vanished run, with ``scheduler.retry_failed_runs
  = N``, the item queued again with the launch backoff up to N times, then
  broken (``run_failures``, :mod:`sluice.scheduler.launch.breaker`).
* **Polecat control with its runs**: ``polecat list`` with the runs that
  ended in the last hour, ``polecat stop`` recording ``stopped``, ``polecat
  logs ITEM`` finding the item's latest run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import chain
from typing import TYPE_CHECKING

from sluice.core.items import parse_ts
from sluice.core.records import SlingContextFields
from sluice.errors import ExecutorError, ExecutorUnavailable, SluiceError, UnknownPolecat
from sluice.scheduler.launch import polecats as control
from sluice.scheduler.launch.breaker import trip_breaker
from sluice.scheduler.launch.runs import check_listing, history, outcome_of, running_records, stamp
from sluice.scheduler.launch.throttles import throttle_exit
from sluice.scheduler.queue.requeue import queue_again, sling_params
from sluice.scheduler.session import Session
from sluice.store.database import contexts as ctxs
from sluice.store.database import events
from sluice.store.database import runs as log
from sluice.store.items.rigstore import Stores

if TYPE_CHECKING:
    from sluice.executors.base import Executor, Polecat
    from sluice.store.files.town import Town


def _end_fields(record: dict, outcome: str, code: int | None, ended: float | None, started: float | None,
                now: float) -> dict:
    start = started if started is not None else parse_ts(record.get("started_at"))
    runtime = round(max(ended - start, 0.0), 3) if ended is not None and start is not None else None
    return {"ended_at": stamp(ended if ended is not None else now), "runtime_seconds": runtime,
            "exit_code": code, "outcome": outcome}


def settle(town: Town, executor: Executor, stores: Stores | None = None,
           now: float | None = None) -> list[dict]:
    """Record the end of every running run whose polecat has ended; act on each end once.

    An executor that cannot be reached leaves the runs as they are (they are
    settled when it answers).  A run whose polecat the executor no longer
    knows at all vanished, unless the run belongs to another executor (the
    town switched executors, or an in-memory one of another process).
    """
    now = time.time() if now is None else now
    running = running_records(town)
    if not running:
        return []
    try:
        polecats = {p.id: p for p in executor.listing()}
        if any(pid not in polecats for pid in running):
            finished = getattr(executor, "finished", None)
            for polecat in (finished() if finished is not None else []):
                polecats.setdefault(polecat.id, polecat)
    except (ExecutorUnavailable, SluiceError, OSError):
        return []
    code = town.config.scheduler.throttle_exit_code
    ends: dict[str, dict] = {}
    placed: dict[str, str] = {}
    for polecat_id, record in running.items():
        polecat = polecats.get(polecat_id)
        if polecat is None:
            if record.get("executor") != executor.kind or executor.kind == "memory":
                continue
            ends[record["run_id"]] = _end_fields(record, log.VANISHED, None, None, None, now)
            continue
        ended = outcome_of(polecat, code)
        node = str(polecat.detail.get("node_id") or "") if polecat.executor == "ray" else ""
        if ended is None:
            if node and record.get("host") != node:
                placed[record["run_id"]] = node  # Ray placed it: the record names the node from now on
            continue
        fields = _end_fields(record, *ended, polecat.detail.get("ended_ts"), polecat.detail.get("started_ts"),
                             now)
        ended_boot, ended_ts = polecat.detail.get("ended_boot"), polecat.detail.get("ended_ts")
        if ended_boot is not None and ended_ts is not None and polecat.detail.get("start_time") is not None:
            # the process's own start and exit on the boot clock: a date step during the run moves nothing
            own = control.polecat_runtime(polecat, ended_ts, ended_boot)
            if own is not None:
                fields["runtime_seconds"] = round(own, 3)
        if node:
            fields["host"] = node
        if polecat.detail.get("reason"):
            fields["reason"] = str(polecat.detail["reason"])  # e.g. the clone a Ray job could not make
        ends[record["run_id"]] = fields
    for run_id, node in placed.items():
        log.update(town, run_id, {"host": node})
    return finish(town, ends, stores)


def end_polecat(town: Town, polecat: Polecat, outcome: str, now: float | None = None) -> list[dict]:
    """Record that ``polecat`` ended with ``outcome`` now (``polecat stop``, the stall timeout)."""
    now = time.time() if now is None else now
    record = running_records(town).get(polecat.id)
    if record is None:
        return []
    return finish(town, {record["run_id"]: _end_fields(record, outcome, polecat.detail.get("exit_code"),
                                                        now, None, now)})


def finish(town: Town, ends: dict[str, dict], stores: Stores | None = None) -> list[dict]:
    """Append the ends and do each one's follow-ups; the records this call ended."""
    ended = log.end(town, ends)
    if not ended:
        return []
    events.emit_events(town, [(events.POLECAT_EXITED, exited_payload(r)) for r in ended])
    stores = stores or Stores(town)
    for record in ended:
        try:
            record["requeued"] = follow_up(town, stores, record)
        except SluiceError as err:  # a follow-up that cannot run never loses the end itself
            record["requeued"] = None
            record["follow_up_error"] = str(err)
        if record.get("workspace"):
            _end_workspace(town, record)
    return ended


def _end_workspace(town: Town, record: dict) -> None:
    """Retire or keep the run's workspace, and say which on its record (``workspace_kept``: why, or
    null when it is gone)."""
    from sluice.scheduler.launch import workspaces  # here: the views that settle ends need no git or sockets

    try:
        record["workspace_kept"] = workspaces.after_end(town, record)
        log.update(town, record["run_id"], {"workspace_kept": record["workspace_kept"]})
    except (SluiceError, OSError) as err:  # the end stays recorded; the workspace stays where it is
        record["workspace_kept"] = f"not retired: {err}"


def exited_payload(record: dict) -> dict:
    return {k: record.get(k) for k in ("run_id", "polecat_id", "item_id", "rig", "context_id", "exit_code",
                                       "outcome", "runtime_seconds", "attempt")}


# -- follow-ups ------------------------------------------------------------------------


def _context_fields(stores: Stores, record: dict) -> SlingContextFields | None:
    """The fields of the context that launched the run (a direct launch has none)."""
    context_id = record.get("context_id")
    if not context_id:
        return None
    found = ctxs.record(stores.town, context_id)
    return SlingContextFields.from_description(found.get("description")) if found else None


def follow_up(town: Town, stores: Stores, record: dict) -> dict | None:
    """Throttle and requeue a throttled run; retry or break a failed one.  The requeue row, if any."""
    outcome = record["outcome"]
    if outcome not in (log.THROTTLED, *log.FAILURES):
        return None
    sched = town.config.scheduler
    fields = _context_fields(stores, record)
    params = sling_params(fields) if fields is not None else {}
    so_far = fields.run_failures if fields is not None else 0
    item_id, rig = record["item_id"], record["rig"]
    if outcome == log.THROTTLED:
        return {**throttle_exit(town, stores, record, params, so_far), "why": "throttle-exit"}
    if sched.retry_failed_runs <= 0:
        return None
    failures = so_far + 1
    error = describe_end(record)
    if failures <= sched.retry_failed_runs:
        again = queue_again(town, stores, item_id, rig, params, 0, run_failures=failures,
                            last_failure=error, last_failure_at=record["ended_at"])
        payload = {"item_id": item_id, "rig": rig, "context_id": again["id"] if again else None,
                   "why": "run-failed", "run_failures": failures, "run_id": record["run_id"]}
        events.emit_event(town, events.REQUEUED, payload)
        return payload
    base = fields or SlingContextFields(work_bead_id=item_id, target_rig=rig,
                                        enqueued_at=record["started_at"])
    trip_breaker(town, base, error, time.time(), run_failures=failures)
    events.emit_event(town, events.CIRCUIT_BROKEN, {
        "item_id": item_id, "rig": rig, "context_id": record.get("context_id"),
        "failures": base.dispatch_failures, "run_failures": failures, "broken_by": "runs",
        "last_failure": error})
    return None


def describe_end(record: dict) -> str:
    """``run r-… failed (exit 3)``: one phrase for an ended run, with its reason when it has one."""
    code = record.get("exit_code")
    status = f" (exit {code})" if code is not None else ""
    reason = f": {record['reason']}" if record.get("reason") else ""
    return f"run {record['run_id']} {record['outcome']}{status}{reason}"


# -- what the commands show ---------------------------------------------------------------------


RECENT_RUNS = 3600.0  # ended runs `polecat list` shows under the running polecats


def runs_listing(where: Town | Session, executor: Executor | None = None, *, item: str | None = None,
                 rig: str | None = None, outcome: str | None = None, since: float | None = None,
                 limit: int = 100) -> list[dict]:
    """``sluice runs``: record what has ended, then the history."""
    session = Session.of(where, executor)
    settle(session.files, session.require_executor(), session.stores, now=session.now)
    return history(session.files, item=item, rig=rig, outcome=outcome, since=since, limit=limit,
                   now=session.now)


def latest_runs(where: Town | Session, executor: Executor | None = None, *, rig: str | None = None,
                since: float | None = None) -> dict[str, dict]:
    """Each item's latest run (of those :func:`runs_listing` lists), newest first: one listing, read
    once, since the first run of an item in it is its latest."""
    latest: dict[str, dict] = {}
    for run in runs_listing(where, executor, rig=rig, since=since, limit=0):
        if isinstance(run.get("item_id"), str):
            latest.setdefault(run["item_id"], run)
    return latest


def run_item_ids(where: Town | Session, executor: Executor | None = None, *, rig: str | None = None,
                 outcome: str | None = None, since: float | None = None, limit: int = 100) -> list[str]:
    """The items whose latest run ended ``outcome`` (any, when None), newest first, at most ``limit``.

    So ``--outcome failed`` gives the items still failed: one that ran again
    since (and succeeded, or is running) is left out, and a pipe into ``sluice
    sling -`` queues only work that needs it.
    """
    check_listing(outcome, limit)
    ids = [item_id for item_id, run in latest_runs(where, executor, rig=rig, since=since).items()
           if outcome is None or run.get("outcome") == outcome]
    return ids[:limit] if limit else ids


def polecat_listing(where: Town | Session, executor: Executor | None = None, running_only: bool = False,
                    now: float | None = None) -> list[dict]:
    """``polecat list``: the running polecats (oldest first), finished ones the executor still keeps,
    then the runs that ended in the last hour (newest first), each with its outcome.

    Ends are recorded first, so a polecat that has just exited shows how it ended.
    """
    session = Session.of(where, executor, now)
    town, executor, now = session.files, session.require_executor(), session.now
    settle(town, executor, session.stores, now=now)
    polecats = sorted(executor.listing(), key=lambda p: (p.started_at, p.id))
    recent = history(town, since=RECENT_RUNS, limit=0, now=now)
    by_polecat = {**{r.get("polecat_id"): r for r in recent[::-1]}, **running_records(town)}
    live = [control.polecat_row(p, by_polecat.get(p.id)) for p in polecats
            if p.state in control.RUNNING_STATES]
    if running_only:
        return live
    kept = [control.polecat_row(p, by_polecat.get(p.id)) for p in polecats
            if p.state not in control.RUNNING_STATES]
    shown = {row["id"] for row in live + kept}
    ended = [control.run_row(r) for r in recent
             if r.get("outcome") != log.RUNNING and r.get("polecat_id") not in shown]
    return live + kept + ended


def stop_polecats(where: Town | Session, ref: str, executor: Executor | None = None,
                  actor: str | None = None) -> list[dict]:
    """``polecat stop``: stop polecat ``ref``, or every running polecat of item ``ref``; rows say what was
    stopped.  Each stop ends its run ``stopped`` and is a ``PolecatStopped`` event naming who asked
    (``actor``, default the user)."""
    from sluice.store.database.state import detect_actor

    session = Session.of(where, executor)
    town, executor = session.files, session.require_executor()
    found = control.resolve(executor, ref)
    rows = []
    for polecat in [p for p in found if p.state in control.RUNNING_STATES] or found[:1]:
        row = control.polecat_row(polecat)
        row["stopped"] = executor.stop(polecat.id)
        if row["stopped"]:
            ended = end_polecat(town, polecat, log.STOPPED)
            row.update(state="stopped", outcome=log.STOPPED, run_id=ended[0]["run_id"] if ended else None)
            events.emit_event(town, events.POLECAT_STOPPED, {
                "polecat_id": polecat.id, "item_id": polecat.item_id, "rig": polecat.rig,
                "by": actor or detect_actor()})
        rows.append(row)
    return rows


def polecat_logs(where: Town | Session, ref: str, follow: bool = False,
                 executor: Executor | None = None) -> Iterator[str]:
    """``polecat logs``: by polecat id, else the item's polecat, else the item's latest run, line by line.

    An id missing from the listing is still tried: a reaped polecat's log stays.
    """
    session = Session.of(where, executor)
    executor = session.require_executor()
    unknown: UnknownPolecat | None = None
    try:
        polecat_id = control.resolve(executor, ref)[0].id
    except UnknownPolecat as err:
        latest = history(session.files, item=ref, limit=1)  # an item whose polecat the executor forgot
        polecat_id, unknown = (latest[0]["polecat_id"] if latest else ref), err
    try:  # an executor may be lazy: its "no such polecat" may come only with the first line
        lines = iter(executor.logs(polecat_id, follow=follow))
        first = next(lines)
    except StopIteration:
        return iter(())
    except ExecutorError:
        if unknown is not None:
            raise unknown from None
        raise
    return chain([first], lines)
