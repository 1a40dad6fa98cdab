"""What a live view watches to know the town changed: the signature of every file a snapshot reads.

``top`` and the web feed used to compute the whole snapshot (a survey of
the queue) every second, changed or not: about half a core on a few
thousand queued items.  Now they compute it again when this signature
moves — the config, the policy, the event, decision and run logs, the
polecat records (their directory), each rig's ephemeral log and items
file, and the versions of the scheduler and admission state in the town
database — and
otherwise only every :data:`BACKSTOP` seconds, for what moves with the
clock alone (a deferral or a backoff ending, a host reading); polecat
runtimes tick on screen without a new snapshot.  A change waits out a rest
in proportion to what the last snapshot cost (:class:`Pace`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.errors import SluiceError
from sluice.store.database import admission_state, state
from sluice.store.files.fsutil import file_signature

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.store.files.town import Town

#: The versions of the town database a snapshot depends on (each advanced by its writers).
VERSIONS = ("queue", "runs", state.VERSION, admission_state.VERSION)

#: Seconds between snapshots when no watched file changed.
BACKSTOP = 30.0

#: After a snapshot that took ``t`` seconds, a change waits until ``REST × t`` seconds have passed since
#: it ended before the next: a view of a town that changes all the time spends at most a fifth of a core
#: on its snapshots (while each takes under ``MOST_REST / REST`` seconds; past that, the rest is capped).
REST = 4.0
#: But a view is never more than this many seconds behind a change for it.
MOST_REST = 15.0


class Pace:
    """When a live view may take its next snapshot after a change.

    A daemon draining a long queue changes the town at every tick, and a
    snapshot of 100,000 queued items takes most of a second after a change:
    a view that took one per change would keep a core busy.  The rest after
    each snapshot is in proportion to what that snapshot cost, so a small
    town shows a change at once (a snapshot of a few hundred items takes a
    few hundredths of a second) and a large one every few seconds.
    """

    def __init__(self):
        self.calm_at = 0.0

    def took(self, started: float, ended: float) -> None:
        """Note a snapshot taken from ``started`` to ``ended`` (a monotonic clock)."""
        self.calm_at = ended + min(MOST_REST, REST * max(0.0, ended - started))

    def ready(self, now: float) -> bool:
        """Whether a change seen at ``now`` may be shown now."""
        return now >= self.calm_at


class Sources:
    """The signature of a town's sources, cheap enough to take several times a second (stat calls)."""

    def __init__(self, town: Town):
        self.town = town
        self._config: str | None = None
        self._rig_paths: tuple[Path, ...] = ()

    def _paths(self) -> tuple[Path, ...]:
        town = self.town
        config = file_signature(town.config_path)
        if config != self._config:  # the rigs, and where their items are, come from the config
            self._config = config
            try:
                self._rig_paths = tuple(town.rig_items(rig) for rig in town.rigs())
            except SluiceError:  # a broken config: the view shows the error and watches for the fix
                self._rig_paths = ()
        # Files, not the runtime directory: read commands keep caches there, and a view that
        # counted their writes as changes would survey again after its own snapshot.
        return (town.config_path, town.events_path, town.workers_dir,
                town.policy_path, town.decisions_path, *self._rig_paths)

    def signature(self) -> tuple:
        files = tuple(file_signature(path) for path in self._paths())
        try:  # one indexed read: what the database holds moves its versions
            versions = tuple(self.town.db.versions(*VERSIONS).values())
        except SluiceError:  # the view shows the error the snapshot meets, and watches on
            versions = ()
        return (*files, versions)
