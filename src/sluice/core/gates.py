"""Town-wide gates and the one limit that binds: the host guard, the hold file, ``binding``.

A gate holds *every* new launch at once, whatever the item: the machine is
too loaded (``host-load``), short of memory (``host-memory``) or of disk
(``host-disk``), or an operator's hold file exists (``hold-file``).  Gas
Town's polecats died five at a time at load 30 because nothing looked at the
machine before launching; these gates are that look, decided here on plain
readings so the rules are table-tested, and read by the scheduler
(:mod:`sluice.scheduler.launch.gates`).  Running polecats are never stopped by a
gate: it only decides whether a new one starts.

:func:`binding` names the single limit that stops the next launch right now,
from the same admission every surface shows, so ``scheduler status``, the
views and the next cycle cannot disagree about it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sluice.core.admission import (
    CAPACITY,
    HOLD_FILE,
    HOST_DISK,
    HOST_LOAD,
    HOST_MEMORY,
    PAUSED,
    Admission,
    Reason,
)
from sluice.core.recordclass import field, frozen

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:I?B)?\s*$", re.IGNORECASE)
#: Larger than any disk or memory, small enough that every comparison stays exact.
MAX_SIZE = 1 << 80


def parse_size(text: str | int) -> int:
    """``2GiB``, ``500M``, ``1000TiB`` or a plain byte count as bytes (binary units); ValueError if not."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE.match(str(text))
        if match is None:
            raise ValueError(f"not a size: {text!r} (e.g. 2GiB, 500MiB, 1073741824)")
        number, unit = match.groups()
        scale = _UNITS[unit.upper()]
        # Whole numbers stay integers: a float would round byte counts past 2**53.
        value = int(number) * scale if "." not in number else int(float(number) * scale)
    if not 0 <= value <= MAX_SIZE:
        raise ValueError(f"size out of range: {text!r}")
    return value


def format_size(size: int) -> str:
    """Bytes as the largest binary unit that keeps one decimal (``1.5GiB``)."""
    for unit in ("P", "T", "G", "M", "K"):
        scale = _UNITS[unit]
        if size >= scale:
            return f"{size / scale:.1f}{unit}iB".replace(".0", "")
    return f"{size}B"


@frozen
class HostLimits:
    """The host guard's limits; None leaves that reading unchecked (the guard is off by default)."""

    max_load: float | None = None  # 1-minute load average per core
    min_free_memory: int | None = None  # bytes
    min_free_disk: int | None = None  # bytes, on the town's filesystem and every rig's

    @property
    def on(self) -> bool:
        return any(v is not None for v in (self.max_load, self.min_free_memory, self.min_free_disk))


@frozen
class HostReading:
    """What the machine looked like at ``at`` (epoch seconds); a None reading was not taken.

    ``disks`` maps each path looked at (the town, every rig) to its free bytes.
    """

    at: float
    load: float | None = None  # 1-minute load average per core
    cores: int | None = None
    free_memory: int | None = None
    disks: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"at": self.at, "load_per_core": self.load, "cores": self.cores,
                "free_memory": self.free_memory, "free_disk": dict(self.disks)}

    @classmethod
    def from_json(cls, data: Mapping) -> HostReading:
        """The reading a cycle recorded; ValueError when it is not one."""
        disks = data.get("free_disk") or {}
        load, memory = data.get("load_per_core"), data.get("free_memory")
        if not isinstance(data.get("at"), (int, float)) or not isinstance(disks, Mapping):
            raise ValueError("not a host reading")
        return cls(at=float(data["at"]), load=float(load) if load is not None else None,
                   cores=data.get("cores"), free_memory=int(memory) if memory is not None else None,
                   disks={str(k): int(v) for k, v in disks.items()})


def host_reasons(limits: HostLimits, reading: HostReading | None) -> list[Reason]:
    """Every host limit the reading breaks, each with the reading and the limit in its detail."""
    if reading is None or not limits.on:
        return []
    out = []
    if limits.max_load is not None and reading.load is not None and reading.load > limits.max_load:
        out.append(Reason(HOST_LOAD, f"load {reading.load:.2f} per core ({reading.cores} cores)"
                                     f" is above scheduler.host.max_load {limits.max_load:g}"))
    if (limits.min_free_memory is not None and reading.free_memory is not None
            and reading.free_memory < limits.min_free_memory):
        limit = format_size(limits.min_free_memory)
        out.append(Reason(HOST_MEMORY, f"{format_size(reading.free_memory)} of memory free,"
                                       f" below scheduler.host.min_free_memory {limit}"))
    if limits.min_free_disk is not None:
        limit = format_size(limits.min_free_disk)
        for path, free in sorted(reading.disks.items()):
            if free < limits.min_free_disk:
                out.append(Reason(HOST_DISK, f"{format_size(free)} free on {path},"
                                             f" below scheduler.host.min_free_disk {limit}"))
    return out


def hold_reason(path: str, first_line: str | None) -> Reason | None:
    """``hold-file`` while the operator's file exists (``first_line`` None: it does not)."""
    if first_line is None:
        return None
    why = first_line.strip()
    return Reason(HOLD_FILE, f"{path} exists" + (f": {why}" if why else ""))


def binding(admission: Admission, ranked_keys: Sequence[str], paused: bool,
            paused_by: str | None = None) -> Reason | None:
    """The one limit that stops the next launch now, or None when nothing does.

    Its code is the plan's reason (``capacity``, ``batch``, ``rig-cap``, a
    gate, …) whenever the plan names a limit, and ``paused`` over all of them;
    None when the plan stops only because nothing (more) is ready.  The
    detail is that limit's sentence for the best-ranked item it holds.
    """
    if paused:
        return Reason(PAUSED, f"the scheduler is paused (by {paused_by or 'unknown'})")
    code = admission.reason
    if code in ("none", "ready"):
        return None
    for key in ranked_keys:
        for reason in admission.held.get(key, ()):
            if reason.code == code:
                return reason
    if code == CAPACITY:
        return Reason(CAPACITY, "no free polecat slot")
    return Reason(code, "")
