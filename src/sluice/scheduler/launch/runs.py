"""Run records: what each launch froze, read back for admission, history and the views.

* **At launch** (:func:`launch_record`, from the one launch path) a run record
  freezes what admission needs about running work — rig, labels, touches,
  token estimate — so caps never consult an item file that changed since.
* **Outcomes** (:func:`outcome_of`): ``ok`` (exit 0), ``throttled``
  (``scheduler.throttle_exit_code``), ``failed`` (another status), ``stopped``,
  ``timed-out`` (the stall timeout stopped it) or ``vanished`` (it ended with
  no recorded status: a lost node, a reboot).  Ends are recorded, and acted
  on, by :mod:`sluice.scheduler.launch.ends`.

A launch that crash recovery settles as never started has no run record: only
:func:`launch_record` makes them, after the executor said the polecats run,
and reconciliation (:func:`record_reconciled`) writes one for a polecat that
was found running.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.clock import iso_epoch, random_id
from sluice.core.items import effective_tokens, labels_of, parse_ts, touches_of
from sluice.errors import UsageError
from sluice.scheduler.launch.polecats import RUNNING_STATES
from sluice.scheduler.queue.pending import item_store
from sluice.store.database import runs as log

if TYPE_CHECKING:
    from sluice.executors.base import Polecat
    from sluice.executors.workspace import Workspace
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import Stores

stamp = iso_epoch


def host_of(polecat: Polecat) -> str:
    """Where the polecat runs: this machine, or the Ray node once the cluster names it."""
    if polecat.executor == "ray":
        return str(polecat.detail.get("node_id") or polecat.detail.get("address") or "")
    import socket  # here: the views that import this module never ask (about 4 ms)

    return socket.gethostname()


# -- writing records --------------------------------------------------------------


def launch_record(item: dict, rig: str, polecat: Polecat, *, started: float, tokens: int, attempt: int,
                  workspace: Workspace | None = None) -> dict:
    """The run record of a launch that just succeeded, with outcome ``running``.

    ``attempt`` is 1 for the first run after a sling and one more for each retry of a failed run.
    A run in a workspace of its own names it (``workspace``, ``branch``).
    """
    record = {
        "run_id": random_id(),
        "polecat_id": polecat.id,
        "item_id": item.get("id") or polecat.item_id,
        "rig": rig,
        "context_id": polecat.context_id or None,
        "executor": polecat.executor,
        "host": host_of(polecat),
        "started_at": stamp(started),
        "ended_at": None,
        "runtime_seconds": None,
        "exit_code": None,
        "outcome": log.RUNNING,
        "tokens_estimated": tokens,
        "tokens_used": None,
        "labels": sorted(labels_of(item)),
        "touches": list(touches_of(item)),
        "attempt": attempt,
        "issue_type": item.get("issue_type") or None,  # the forecast's kind: rig, type, label
        "reason": None,  # why it ended, when the executor says more than the exit status
    }
    if workspace is not None:
        record.update(workspace=str(workspace.path), branch=workspace.branch)
    return record


def record_reconciled(town: Town, stores: Stores, found: list[tuple]) -> list[dict]:
    """Run records for polecats an interrupted launch had started (none is written twice).

    A polecat the executor reports ``lost`` never started: crash recovery
    settles its launch, and it is not a run.
    """
    found = [(context, polecat) for context, polecat in found if polecat.state != "lost"]
    if not found:
        return []
    known = log.known_polecats(town, [polecat.id for _, polecat in found])
    out = []
    for context, polecat in found:
        if polecat.id in known:
            continue
        hit = item_store(stores, context.work_id)
        item = hit[1] if hit else {"id": context.work_id}
        started = parse_ts(polecat.started_at) or time.time()
        record = launch_record(item, context.rig, polecat, started=started, tokens=effective_tokens(item),
                               attempt=(context.fields.run_failures if context.fields else 0) + 1)
        out.append(record | _workspace_of(town, polecat))
    log.append(town, out)
    return out


def _workspace_of(town: Town, polecat: Polecat) -> dict:
    """A found polecat started in a workspace (its launch was cut short before its run record): name
    it, so the workspace is the run's, never taken for a leftover while the polecat works in it."""
    from sluice.executors.workspace import root_dir

    cwd = polecat.detail.get("cwd")
    if not cwd or not Path(cwd).is_relative_to(root_dir(town)):
        return {}
    return {"workspace": str(cwd)}


def running_records(town: Town) -> dict[str, dict]:
    """Runs still running, by polecat id."""
    return {r["polecat_id"]: r for r in log.running(town).values()}


# -- outcomes ---------------------------------------------------------------------------


def outcome_of(polecat: Polecat, throttle_code: int) -> tuple[str, int | None] | None:
    """(outcome, exit code) of an ended polecat; None while it runs."""
    if polecat.state in RUNNING_STATES:
        return None
    code = polecat.detail.get("exit_code")
    if polecat.state == "stopped":
        return log.STOPPED, code
    if polecat.state == "lost":
        return log.VANISHED, code
    if code is None:
        # Ray reports a succeeded job without always naming the driver's status.
        if polecat.executor == "ray" and polecat.detail.get("status") == "SUCCEEDED":
            return log.OK, 0
        return log.VANISHED, None
    if code == 0:
        return log.OK, 0
    if code == throttle_code:
        return log.THROTTLED, code
    return log.FAILED, code


# -- reading --------------------------------------------------------------------------


def check_listing(outcome: str | None, limit: int) -> None:
    """Refuse an outcome no run can have, or a negative limit, as usage errors naming them."""
    if outcome is not None and outcome not in log.OUTCOMES:
        raise UsageError(f"outcome {outcome!r} is not one of {', '.join(log.OUTCOMES)}",
                         parameters=("outcome",))
    if limit < 0:
        raise UsageError(f"limit must be >= 0 (got {limit})", parameters=("limit",))


def history(town: Town, *, item: str | None = None, rig: str | None = None, outcome: str | None = None,
            since: float | None = None, limit: int = 100, now: float | None = None) -> list[dict]:
    """Run records newest first (by start), filtered; ``since`` in seconds (running, or started or ended
    that recently); ``limit`` 0 for all of them."""
    check_listing(outcome, limit)
    now = time.time() if now is None else now
    return log.recent(town, item=item, rig=rig, outcome=outcome,
                      since=now - since if since is not None else None, limit=limit)


def count_new(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """Ends by outcome recorded between two readings of the run log's totals (a compaction in between
    counts none)."""
    return {o: n - before.get(o, 0) for o, n in now.items() if n > before.get(o, 0)}


def counts_text(counts: dict[str, int]) -> str:
    """``3 ok, 1 failed`` in the order of the outcomes."""
    return ", ".join(f"{counts[o]} {o}" for o in log.ENDED if counts.get(o))
