"""Removing a rig from a town without losing anything.

``rig remove`` unregisters a rig: its name and prefix stop routing.  What it
must never do is lose data or reach into the repository:

* **Queued work refuses the removal.**  An open sling context in the rig's
  store, or an open context in any other rig whose work item routes to this
  rig, is work someone asked for.  Without ``--force`` the command says which
  and changes nothing; with ``--force`` each one is closed with reason
  ``rig-removed`` (a ``ContextClosed`` event each), never dropped silently.
* **The rig's own store is moved aside, not deleted**: ``.sluice/rigs/NAME``
  becomes ``.sluice/removed/NAME-<UTC stamp>/`` and the result says where, so
  its items can be imported again (``sluice item import``).  Only the derived
  index under ``runtime/index`` is deleted (it is rebuilt from the JSONL).
* **The repository is not touched**, nor a beads export it was read from:
  git hooks installed there stay until ``sluice hooks uninstall``.

The dispatch lock is held throughout, so no cycle launches from the rig
while it goes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sluice.errors import InvalidOperation
from sluice.store import contexts as ctxs
from sluice.store import events, fsutil
from sluice.store.rigstore import Stores
from sluice.store.town import Town

RIG_REMOVED = "rig-removed"  # close reason of contexts closed by a forced removal
REMOVED_DIR = "removed"  # under .sluice/: stores of removed rigs, kept


def removed_dir(town: Town) -> Path:
    return town.dir / REMOVED_DIR


def remove_rig(town: Town, name: str, force: bool = False) -> dict:
    """Unregister rig ``name``: its store moves to ``.sluice/removed/``; queued work refuses unless forced."""
    town.reload_config()
    rig = town.rig(name)  # unknown ⇒ UnknownRig, nothing changed
    with fsutil.file_lock(town.lock_path("dispatch")):
        stores = Stores(town)
        queued = [
            c for c in ctxs.open_contexts(stores, fresh=True)
            if c.rig == name or (c.work_id and (owner := town.rig_for_id(c.work_id)) and owner.name == name)
        ]
        if queued and not force:
            shown = ", ".join(f"{c.work_id or c.id} ({c.id} in {c.rig})" for c in queued[:5])
            more = f" and {len(queued) - 5} more" if len(queued) > 5 else ""
            raise InvalidOperation(
                f"rig {name!r} has {len(queued)} queued context(s): {shown}{more}; nothing was changed"
                f" (clear them first, or override with force, which closes them as {RIG_REMOVED!r})"
            )
        closed = []
        for context in queued:
            if ctxs.close(town, stores.rig(context.rig), context.id, RIG_REMOVED):
                closed.append({"context_id": context.id, "item_id": context.work_id, "rig": context.rig})
        stores.rig(name).refresh()  # let go of the index before its file is deleted

        def unregister(config):
            rigs = dict(config.rigs)
            rigs.pop(name, None)
            return config.model_copy(update={"rigs": rigs})

        town.update_config(unregister)
        kept = _move_store_aside(town, name)
        _drop_index(town, name)
        result = {
            "name": rig.name,
            "prefix": rig.prefix,
            "repo": str(rig.repo),
            "items": str(rig.items) if rig.items else None,
            "store": str(kept) if kept else None,
            "closed": closed,
        }
        payload = {k: result[k] for k in ("name", "prefix", "repo", "store")} | {"closed": len(closed)}
        events.emit_event(town, events.RIG_REMOVED, payload)
    return result


def _move_store_aside(town: Town, name: str) -> Path | None:
    """``rigs/NAME`` → ``removed/NAME-<stamp>`` (a rename on one file system: all or nothing)."""
    own = town.rig_dir(name)
    if not own.exists():
        return None
    parent = removed_dir(town)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = parent / f"{name}-{stamp}"
    serial = 1
    while target.exists():  # removed twice in one second: never overwrite an earlier copy
        serial += 1
        target = parent / f"{name}-{stamp}-{serial}"
    os.rename(own, target)
    return target


def _drop_index(town: Town, name: str) -> None:
    base = town.runtime / "index" / f"{name}.sqlite"
    for path in (base, base.with_name(base.name + "-wal"), base.with_name(base.name + "-shm")):
        try:
            path.unlink()
        except FileNotFoundError:
            pass
