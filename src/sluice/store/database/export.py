"""``sluice export``: the town's own records in the shapes other tools read.

The database is sluice's, but what it holds stays readable without sluice:
a rig's ephemeral records come out as beads JSONL, exactly the record shape
of sluice 0.1's ``ephemeral.jsonl`` lines (so beads tools, ``jq`` and backups
keep working), and the run records as JSON lines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.store.database import contexts, runs

if TYPE_CHECKING:
    from sluice.store.files.town import Town


def ephemeral_records(town: Town, rig: str | None = None, open_only: bool = False) -> list[dict]:
    """A rig's (or every rig's) ephemeral records, closed ones included unless ``open_only``, oldest first."""
    if rig is not None:
        rig = town.rig(rig).name  # an unknown rig is an error, never an empty export
    return contexts.records(town, rig, open_only=open_only)


def run_records(town: Town) -> list[dict]:
    """Every run record, the archived ones (older) first, in launch order."""
    return [*runs.archived(town), *runs.read_runs(town).values()]
