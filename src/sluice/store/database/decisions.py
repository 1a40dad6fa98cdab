"""The decision log, ``<town>/.sluice/schedule/decisions.jsonl``, and what is read back from it.

Every scoring decision (``schedule next``) and every launch the dispatcher
makes is one JSON line, put in the town database's outbox in the transaction
that makes the decision and written to the log after it commits
(:mod:`sluice.store.database.outbox`).  Fairness reads per-rig counts from the
``decision_counts`` table, which the same transaction advances, so the log is
never read whole; :func:`recent_decisions` seeks from the end and parses only
the last lines.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.clock import random_id
from sluice.core.text import json_text
from sluice.store.database import outbox
from sluice.store.files.jsonlog import all_objects, tail_objects

if TYPE_CHECKING:
    from sluice.store.files.town import Rig, Town



def sling_command(item_id: str, rig: Rig) -> str:
    """The command that queues the item where the decision says, as typed.

    An item whose id does not carry its rig's prefix (an export holding
    another project's ids) needs ``--force`` past sling's cross-rig guard.
    """
    argv = ["sluice", "sling", item_id, rig.name]
    if not item_id.startswith(rig.prefix + "-"):
        argv.append("--force")
    return shlex.join(argv)


def make_decision(
    item: dict, rig: Rig, *, graph_id: str | None, score: float | None, reasons, at: str,
    skipped: bool = False, **extra,
) -> dict:
    """One decision in the shape ``schedule next`` prints and the dispatcher logs (docs/formats.md)."""
    return {
        "decision_id": random_id(),
        "at": at,
        "graph_id": graph_id,
        "node_id": item["id"],
        "score": score,
        "reasons": list(reasons),
        "dispatch_hints": {
            "title": item.get("title"),
            "project": rig.name,
            "repository": str(rig.repo),
            "agent_id": item.get("assignee") or None,
            "priority": item.get("priority"),
        },
        "sling_command": sling_command(item["id"], rig),
        "skipped": skipped,
        **extra,
    }


def append_decisions(town: Town, decisions: list[dict]) -> None:
    """Record decisions: their lines for the log and the per-rig counts, in one transaction."""
    if not decisions:
        return
    lines = [json_text(d) for d in decisions]
    with town.db.transaction() as conn:
        outbox.put(town, outbox.DECISIONS, lines)
        conn.executemany("INSERT INTO decision_counts (rig, n) VALUES (?, ?)"
                         " ON CONFLICT (rig) DO UPDATE SET n = decision_counts.n + excluded.n",
                         sorted(_per_rig(decisions).items()))


def _per_rig(decisions: Iterable[dict]) -> dict[str, int]:
    return dict(Counter(filter(None, map(_rig_of, decisions))))


def _rig_of(decision: dict) -> str | None:
    hints = decision.get("dispatch_hints")
    rig = hints.get("project") if isinstance(hints, dict) else None
    return rig.strip() if isinstance(rig, str) and rig.strip() else None


# -- reading the newest lines ------------------------------------------------------


def recent_decisions(town: Town, count: int) -> list[dict]:
    """The last ``count`` decisions, newest first, reading only the end of the log.

    A torn last line (an append in progress or interrupted) is not there yet.
    """
    outbox.flush_if_pending(town)
    return list(reversed(tail_objects(town.decisions_path, count, "decision")))


# -- per-rig counts for fairness --------------------------------------------------


def decision_counts(town: Town) -> dict[str, int]:
    """Decisions per rig (``dispatch_hints.project``) over the whole log, skipped ones included."""
    return dict(town.db.query("SELECT rig, n FROM decision_counts"))


def count_log(path: Path) -> dict[str, int]:
    """Decisions per rig in a decision log file, read whole (a town's first open under this sluice)."""
    return _per_rig(all_objects(path, "decision"))
