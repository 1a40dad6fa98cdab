"""The town-wide gates as the scheduler reads them: the hold file and the host guard.

:mod:`sluice.core.gates` decides; this module looks.  The hold file
(``scheduler.hold_file``) is checked afresh by every caller: one ``open``.
The machine (``scheduler.host.*``) is read afresh only by a real dispatch
cycle and a direct-mode sling, just before they launch, and the cycle keeps
what it read in the town database; the read commands
(``status``, ``list``, ``explain``, the dry run, the views) show that last
reading with its time, and read the machine themselves only when no cycle
has run yet (or the limits ask for a reading it lacks).  So a hot read costs
no psutil import and says what the cycle that admitted work saw.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.core.admission import Reason, stamp
from sluice.core.gates import HostLimits, HostReading, hold_reason, host_reasons, parse_size
from sluice.core.recordclass import field, recordclass
from sluice.core.text import printable

if TYPE_CHECKING:
    from sluice.executors.host import HostProbe
    from sluice.store.files.town import Town

READING = "host-reading"  # the last cycle's reading of the machine, kept in the town database
#: How much of a hold file's first line a reason shows.
_FIRST_LINE = 200


def _field(section: Any, name: str) -> Any:
    """A field of a config section, whether the validated model or its plain copy (a dict)."""
    return section.get(name) if isinstance(section, Mapping) else getattr(section, name, None)


def host_limits(config) -> HostLimits:
    host = getattr(config.scheduler, "host", None) or {}
    memory, disk = _field(host, "min_free_memory"), _field(host, "min_free_disk")
    load = _field(host, "max_load")
    return HostLimits(
        max_load=float(load) if load is not None else None,
        min_free_memory=parse_size(memory) if memory is not None else None,
        min_free_disk=parse_size(disk) if disk is not None else None,
    )


def hold_path(town: Town) -> Path | None:
    name = getattr(town.config.scheduler, "hold_file", "") or ""
    if not name:
        return None
    path = Path(name).expanduser()
    return path if path.is_absolute() else town.root / path


def hold_line(path: Path) -> str | None:
    """The hold file's first line ("" for an empty or unreadable one); None when it does not exist."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except FileNotFoundError:
        return None
    except OSError:
        return ""  # it exists (a directory, unreadable): it holds, with nothing to say
    line = head.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    return printable(line[:_FIRST_LINE])


@recordclass
class Gates:
    """What holds every launch now, and what the machine read (``reading``, None: guard off)."""

    reasons: list[Reason] = field(default_factory=list)
    limits: HostLimits = field(default_factory=HostLimits)
    reading: HostReading | None = None
    fresh: bool = False  # read just now, not the last cycle's reading
    hold_file: str | None = None

    def to_json(self) -> dict:
        """``scheduler status``'s ``host`` section."""
        reading, limits = self.reading, self.limits
        return {
            "guard": limits.on,
            "limits": {"max_load": limits.max_load, "min_free_memory": limits.min_free_memory,
                       "min_free_disk": limits.min_free_disk},
            "reading": reading.to_json() if reading is not None else None,
            "read_at": stamp(reading.at) if reading is not None else None,
            "fresh": self.fresh,
            "hold_file": self.hold_file,
            "held": [r.to_json() for r in self.reasons],
        }


def last_reading(town: Town) -> HostReading | None:
    """What the last cycle read, or None when no cycle has read the machine."""
    try:
        kept = town.db.kept(READING)
        return HostReading.from_json(json.loads(kept)) if kept is not None else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _covers(reading: HostReading, limits: HostLimits) -> bool:
    return not (
        (limits.max_load is not None and reading.load is None)
        or (limits.min_free_memory is not None and reading.free_memory is None)
        or (limits.min_free_disk is not None and not reading.disks)
    )


def disk_paths(town: Town) -> list[str]:
    """The town's directory and every rig's repository: each filesystem the guard watches; and where
    workspaces are made, when a rig's runs get them (its nearest existing directory)."""
    from sluice.executors import workspace  # only a town with the disk guard on reads it

    paths = [str(town.root), *(str(rig.repo) for rig in town.rigs())]
    if workspace.any_clone(town):
        root = workspace.root_dir(town)
        while not root.exists() and root != root.parent:
            root = root.parent
        paths.append(str(root))
    return paths


def current(town: Town, *, fresh: bool = False, probe: HostProbe | None = None) -> Gates:
    """The gates now; ``fresh`` reads the machine (and keeps the reading for the read commands)."""
    out = Gates(limits=host_limits(town.config))
    path = hold_path(town)
    if path is not None:
        out.hold_file = str(path)
        held = hold_reason(str(path), hold_line(path))
        if held is not None:
            out.reasons.append(held)
    if not out.limits.on:
        return out
    reading = None if fresh else last_reading(town)
    if reading is None or not _covers(reading, out.limits):
        if probe is None:
            from sluice.executors.host import LocalHost

            probe = LocalHost()
        reading = probe.read(out.limits, disk_paths(town))
        out.fresh = True
        if fresh:  # kept for the read commands; a refused write keeps the last one
            with contextlib.suppress(OSError):
                town.db.keep(READING, json.dumps(reading.to_json()))
    out.reading = reading
    out.reasons.extend(host_reasons(out.limits, reading))
    return out
