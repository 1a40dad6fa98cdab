"""Reading the machine for the host guard: load per core, free memory, free disk.

The load and the disks come from the standard library (``os.getloadavg``,
``shutil.disk_usage``), portable across Linux and macOS; free memory from
psutil's ``virtual_memory().available`` (what a new process can have without
swapping), imported only here and only when a memory limit is set, so a town
without the guard never pays for the import.  Nothing here reads ``/proc``.

:class:`HostProbe` is the protocol the scheduler reads through; tests and
other machines can hand it their own.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable
from typing import Protocol

from sluice.core.gates import HostLimits, HostReading


class HostProbe(Protocol):
    def read(self, limits: HostLimits, paths: Iterable[str]) -> HostReading:
        """The readings ``limits`` needs (only those), disks at ``paths``."""
        ...


def free_disks(paths: Iterable[str]) -> dict[str, int]:
    """Free bytes on each distinct filesystem among ``paths`` (the first path names it)."""
    out: dict[str, int] = {}
    seen: set[int] = set()
    for path in paths:
        try:
            device = os.stat(path).st_dev
            if device in seen:
                continue
            seen.add(device)
            out[path] = shutil.disk_usage(path).free
        except OSError:
            continue  # a rig repository gone: the guard has nothing to say about it
    return out


class LocalHost:
    """The machine this process runs on."""

    def read(self, limits: HostLimits, paths: Iterable[str]) -> HostReading:
        load = cores = memory = None
        if limits.max_load is not None:
            cores = os.cpu_count() or 1
            load = os.getloadavg()[0] / cores
        if limits.min_free_memory is not None:
            import psutil

            memory = int(psutil.virtual_memory().available)
        disks = free_disks(paths) if limits.min_free_disk is not None else {}
        return HostReading(at=time.time(), load=load, cores=cores, free_memory=memory, disks=disks)
