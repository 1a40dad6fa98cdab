"""Polecat control, and the two clocks the dispatcher keeps on polecats.

* **Control** (the rows and the lookup behind ``sluice polecat list|stop|logs``,
  which :mod:`sluice.scheduler.launch.ends` runs with their run records): every
  call goes through :func:`sluice.executors.get_executor`, so the same commands
  work for local processes, tmux sessions and Ray jobs.  A polecat is named by
  its id or by the item it works on.
* **Stall timeout** (``scheduler.polecat_timeout``, ``0`` = none): a polecat
  that has held a slot longer than the timeout is stopped and a
  ``PolecatTimedOut`` event is logged.  Only the polecat is touched: the item
  keeps whatever state the agent left it in (scheduling never writes an
  item), so a person decides whether to re-sling it.
* **Retry backoff** (``scheduler.retry_base``/``retry_max``): after a failed
  launch a context waits ``min(retry_base·2^(failures−1), retry_max)`` from
  its ``last_failure_at`` before it is tried again (:func:`sluice.core.plan.retry_delay`),
  so a short outage does not burn the whole failure budget in a few cycles.

Times are epoch seconds (``time.time()``) or aware datetimes; both are accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from sluice.core.clock import boot_seconds, iso_epoch, runtime_seconds
from sluice.core.items import parse_ts
from sluice.core.plan import next_attempt_at
from sluice.errors import UnknownPolecat, UsageError
from sluice.executors.procs import seconds_from_boot
from sluice.store.database import events

if TYPE_CHECKING:
    from sluice.core.records import SlingContextFields
    from sluice.executors.base import Executor, Polecat
    from sluice.store.files.town import Town

RUNNING_STATES = ("running", "pending")


def _epoch(now: float | datetime) -> float:
    return now.timestamp() if isinstance(now, datetime) else float(now)


# -- control -----------------------------------------------------------------------


def polecat_row(polecat: Polecat, run: dict | None = None) -> dict:
    """The row of ``sluice polecat list --json`` (``outcome``/``run_id`` from its run record)."""
    return {
        "id": polecat.id, "item_id": polecat.item_id, "rig": polecat.rig, "context_id": polecat.context_id,
        "executor": polecat.executor, "started_at": polecat.started_at, "state": polecat.state,
        "pid": polecat.pid,
        "exit_code": polecat.detail.get("exit_code"),  # None while running, or when unknown
        "log_path": polecat.log_path, "attach": polecat.detail.get("attach"),
        "outcome": run.get("outcome") if run else ("running" if polecat.state in RUNNING_STATES else None),
        **{key: run.get(key) if run else None for key in ("run_id", "ended_at", "runtime_seconds")},
    }


#: The executor's state word for a run that ended with each outcome (rows of reaped polecats).
STATE_OF_OUTCOME = {"ok": "exited", "failed": "failed", "throttled": "failed", "timed-out": "stopped",
                    "stopped": "stopped", "vanished": "lost"}


def run_row(run: dict) -> dict:
    """An ended run as a ``polecat list`` row, in the same shape as a live polecat's."""
    return {
        "id": run.get("polecat_id"), **{k: run.get(k) for k in ("item_id", "rig", "context_id", "executor",
                                                                 "started_at")},
        "state": STATE_OF_OUTCOME.get(run.get("outcome"), "exited"), "pid": None,
        "exit_code": run.get("exit_code"), "log_path": None, "attach": None,
        **{k: run.get(k) for k in ("outcome", "run_id", "ended_at", "runtime_seconds")},
    }


def resolve(executor: Executor, ref: str) -> list[Polecat]:
    """The polecat with id ``ref``, else item ``ref``'s polecats (running first, then newest first)."""
    if not ref.strip():  # would match the polecats that have no item (unrecorded tmux sessions)
        raise UsageError("name a polecat by its id or by the id of its item (see `sluice polecat list`)")
    known = executor.listing()
    exact = [p for p in known if p.id == ref]
    if exact:
        return exact
    by_item = [p for p in known if p.item_id == ref]
    if not by_item:  # reaped polecats keep their logs: find them by item too
        finished = getattr(executor, "finished", None)
        reaped = finished() if finished is not None else []
        exact = [p for p in reaped if p.id == ref]
        by_item = exact or [p for p in reaped if p.item_id == ref]
    if not by_item:
        raise UnknownPolecat(f"no polecat with id or item id {ref!r} (see `sluice polecat list`)")
    by_item.sort(key=lambda p: (p.state in RUNNING_STATES, p.started_at, p.id), reverse=True)
    return by_item


# -- stall timeout ------------------------------------------------------------------


def polecat_runtime(polecat: Polecat, now: float | datetime, now_boot: float | None = None) -> float | None:
    """How long ``polecat`` has run, in seconds: from its process start on the boot clock when the
    executor recorded one (a local polecat), else from ``started_at`` by the wall clock.

    ``now_boot`` is :func:`sluice.core.clock.boot_seconds` read with ``now``
    (None: no boot clock, measure by the wall clock).
    """
    return runtime_seconds(parse_ts(polecat.started_at), _epoch(now),
                           seconds_from_boot(polecat.detail.get("start_time")), now_boot)


def overdue_polecats(executor: Executor, timeout_seconds: float, now: float | datetime,
                     now_boot: float | None = None) -> list[Polecat]:
    """Active polecats that have run ``timeout_seconds`` or more at ``now`` (none when the timeout is 0).

    Runtimes are measured as :func:`polecat_runtime` does, so a step of the
    wall clock (forward: every polecat would look overdue at once; backward:
    none ever would) changes nothing for a polecat with a recorded process
    start.  A polecat whose start time is unknown (e.g. a tmux session
    without a record) is never judged overdue: there is nothing to measure from.
    """
    if timeout_seconds <= 0:
        return []
    runtimes = [(polecat, polecat_runtime(polecat, now, now_boot)) for polecat in executor.active()]
    return [polecat for polecat, runtime in runtimes if runtime is not None and runtime >= timeout_seconds]


def stop_overdue(town: Town, executor: Executor, now: float | datetime,
                 on_stop: Callable[[Polecat], object] | None = None) -> list[Polecat]:
    """Stop every polecat past ``scheduler.polecat_timeout`` and log ``PolecatTimedOut`` for each.

    ``on_stop`` is called for each right after it stopped (the daemon records its run ``timed-out``
    there, before anyone else could take the stop for a plain ``stopped``).
    """
    scheduler = town.load_config().scheduler  # fresh: a long-lived daemon sees `config set` at once
    timeout = scheduler.seconds("polecat_timeout")
    stopped = []
    for polecat in overdue_polecats(executor, timeout, now, boot_seconds()):
        if not executor.stop(polecat.id):
            continue  # it ended on its own meanwhile
        if on_stop is not None:
            on_stop(polecat)
        events.emit_event(town, events.POLECAT_TIMED_OUT, {
            "polecat_id": polecat.id, "item_id": polecat.item_id, "rig": polecat.rig,
            "context_id": polecat.context_id, "executor": polecat.executor, "started_at": polecat.started_at,
            "timeout": scheduler.polecat_timeout})
        polecat.state = "stopped"
        stopped.append(polecat)
    return stopped


# -- retry backoff --------------------------------------------------------------------


def retry_window(sched) -> tuple[float, float]:
    """A scheduler config's retry backoff: (``retry_base``, ``retry_max``) in seconds."""
    return sched.seconds("retry_base"), sched.seconds("retry_max")


def retry_epoch(fields: SlingContextFields, base: float, maximum: float) -> float | None:
    """Failed launches and failed runs (a retried run) back off alike, counted together."""
    failures = fields.dispatch_failures + fields.run_failures
    if failures <= 0:
        return None
    last = parse_ts(fields.last_failure_at)
    if last is None:
        return None  # a failure without a time (older contexts): nothing to wait from
    return next_attempt_at(last, failures, base, maximum)


def retry_due_at(fields: SlingContextFields, base: float, maximum: float) -> str | None:
    """When a failed context may be tried again (UTC ISO), or None if it need not wait."""
    at = retry_epoch(fields, base, maximum)
    return None if at is None else iso_epoch(at)


def is_retry_due(fields: SlingContextFields, now: float | datetime, base: float, maximum: float) -> bool:
    """True unless the context failed and its backoff has not yet passed at ``now``."""
    at = retry_epoch(fields, base, maximum)
    return at is None or _epoch(now) >= at
