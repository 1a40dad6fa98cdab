"""Queueing an item again with the parameters it was slung with: the breaker, throttle exits, reset.

A re-queue is a sling of one item by the scheduler itself, so it checks and
creates in one write transaction, as a sling does: a sling of the same item
meanwhile cannot add a second open context (nor could it, by the database's
one-open-context-per-item constraint).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.clock import iso
from sluice.core.records import SlingContextFields
from sluice.scheduler.queue import pending
from sluice.store.database import contexts as ctxs

if TYPE_CHECKING:
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import Stores


def sling_params(fields: SlingContextFields) -> dict:
    """The parameters a re-queued item is slung with again (everything but the failure record)."""
    keep = ("formula", "args", "vars", "agent", "force")
    return {k: getattr(fields, k) for k in keep if getattr(fields, k)}


def queue_again(
    town: Town, stores: Stores, item_id: str, rig: str, params: dict, failures: int, **carried
) -> dict | None:
    """A new open context for ``item_id`` with ``params``; None if one is open already (idempotent).

    ``carried`` are further context fields (a retried run's ``run_failures``
    and ``last_failure_at``, from which its backoff runs).
    """
    with town.db.transaction():
        if ctxs.find_open(stores.town, item_id):
            return None
        found = pending.item_store(stores, item_id)
        if found is None or rig not in {r.name for r in town.rigs()}:
            return None
        stamp = iso()
        fields = SlingContextFields(
            work_bead_id=item_id, target_rig=rig, enqueued_at=stamp, dispatch_failures=failures,
            **params, **carried,
        )
        [record] = ctxs.create(stores.rig(rig), [(found[1], fields, stamp)])
    return record
