"""Process identity, liveness, trees and stopping, through psutil on every platform.

A recorded polecat is a pid *and* the moment its process started
(:func:`sluice.executors.watch.start_time`: seconds from boot, which no
clock change moves); a pid only counts as the polecat while the process
under it started at that moment, so a reused pid is never mistaken for it,
on Linux and macOS alike.

Stopping takes the whole tree.  A polecat that starts helpers in sessions
of their own (``setsid``) puts them out of reach of its process group; and a
helper whose parent exits is reparented — on Linux to the watcher, which
makes itself a child subreaper (:mod:`sluice.executors.watch`), so it stays
a descendant of something sluice knows.  :func:`stop_tree` signals the
polecat, every descendant of it, and every descendant of its watcher except
the watcher itself, then waits and kills what is left.

psutil is imported inside each function: only a launch on another system, a
stop or a host reading pays for the import, never a hot read.  On Linux a
liveness check reads ``/proc/PID/stat`` itself (what psutil reads there), so
a cycle or a view that looks at every running polecat does not import it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

from sluice.executors.watch import _CLOCK_TICKS, proc_stat, start_time

__all__ = ["alive", "group_alive", "same_start", "seconds_from_boot", "signal_group", "start_time",
           "stop_tree"]

#: Start times are kept to 0.01 s (the clock tick of Linux); closer than this is the same moment.
_SAME = 0.006


def _ticks_per_second() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100.0


def seconds_from_boot(recorded: object) -> float | None:
    """A recorded start time in seconds from boot (old records hold Linux clock ticks); None if unreadable."""
    if isinstance(recorded, bool) or not isinstance(recorded, (int, float)):
        return None
    return recorded / _ticks_per_second() if isinstance(recorded, int) else float(recorded)


def same_start(recorded: float | int, now: float) -> bool:
    """Whether a recorded start time names the process that started at ``now`` (seconds from boot).

    Records written before sluice used psutil hold Linux clock ticks as an
    integer; they are read as ticks, so polecats running across an upgrade
    are still recognised.
    """
    seconds = seconds_from_boot(recorded)
    return seconds is not None and abs(seconds - now) < _SAME


def _process(pid: int, started: float | int | None):
    """The psutil process at ``pid`` if it runs (not a zombie) and started at ``started``, else None."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        if started is not None:
            now = round(proc.create_time() - psutil.boot_time(), 2)
            if not same_start(started, now):
                return None
        return proc
    except (psutil.Error, ValueError):
        return None


def alive(pid: int, started: float | int | None) -> bool:
    """True when ``pid`` runs (not a zombie) and, where known, started at ``started``."""
    if _CLOCK_TICKS:
        return _alive_in_proc(pid, started)
    return _process(pid, started) is not None


def _alive_in_proc(pid: int, started: float | int | None) -> bool:
    """:func:`alive` from the kernel's ``/proc/PID/stat``: its state (Z zombie, X dead) and start tick."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    fields = proc_stat(pid)
    if fields is None:  # no such process
        return False
    try:
        state, ticks = fields[0], int(fields[19])  # fields 3 and 22: state, starttime
    except (IndexError, ValueError):
        return False
    if state in (b"Z", b"X", b"x"):
        return False
    try:
        return started is None or same_start(started, round(ticks / _CLOCK_TICKS, 2))
    except (TypeError, ValueError):  # a start time on record that is no number: not this process
        return False


def _running(proc) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


def tree(pid: int, started: float | int | None, watcher: tuple[int, float | int | None] | None = None):
    """The polecat's process and every descendant of it and of its watcher (not the watcher itself)."""
    import psutil

    found: dict[int, object] = {}
    roots = [(pid, started, True)]
    if watcher is not None:
        roots.append((watcher[0], watcher[1], False))
    for root_pid, root_start, include in roots:
        root = _process(root_pid, root_start)
        if root is None:
            continue
        if include:
            found[root.pid] = root
        try:
            for child in root.children(recursive=True):
                found.setdefault(child.pid, child)
        except psutil.Error:
            continue
    if watcher is not None:
        found.pop(watcher[0], None)
    return list(found.values())


def _signal_all(procs: Iterable, sig: int) -> None:
    import psutil

    for proc in procs:
        try:
            proc.send_signal(sig)  # psutil refuses a pid that now names another process
        except psutil.Error:
            pass


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_tree(pid: int, started: float | int | None, grace: float,
              watcher: tuple[int, float | int | None] | None = None) -> bool:
    """SIGTERM the polecat's whole tree (and its process group), SIGKILL what outlives ``grace``.

    False when the polecat was not running.  Waits (at most ``grace`` plus
    five seconds) until none of the tree runs.
    """
    if not alive(pid, started):
        return False
    procs = tree(pid, started, watcher)
    signal_group(pid, signal.SIGTERM)  # the polecat's own session: what it started before the walk
    _signal_all(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_running(p) for p in procs):
        time.sleep(0.05)
    # Anything started during the grace period belongs to the tree too.
    procs += [p for p in tree(pid, started, watcher) if all(p.pid != q.pid for q in procs)]
    left = [p for p in procs if _running(p)]
    if left:
        signal_group(pid, signal.SIGKILL)
        _signal_all(left, signal.SIGKILL)
        while any(_running(p) for p in left) and time.monotonic() < deadline + 5:
            time.sleep(0.02)
    return True


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group ``pgid`` still runs; zombies (already dead) do not count."""
    import psutil

    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False
