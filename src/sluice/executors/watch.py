"""The watcher of one local polecat: start it, report its pid, record how it exited.

A polecat is usually started by a dispatch cycle that ends long before the
polecat does (the daemon runs each cycle as a short-lived process), so no
sluice process is its parent and its exit status would be lost.  The local
executor therefore starts this small watcher (in a session of its own), which
starts the polecat in *another* new session, writes the polecat's pid to a
pipe the launcher reads, waits, and writes ``{"exit_code": N}`` atomically
to the file named by its first argument, with the moment it saw the exit
(``finished_ts``, epoch seconds: the run's own end, whenever sluice looks).
The exit code is what lets a polecat ask for a throttle by exiting with
``scheduler.throttle_exit_code``.

Before it reports the pid, it writes ``STARTED_FILE`` (both pids and their
start times): a launcher killed between starting the watcher and recording
the pid leaves a polecat the executor still finds, watches and can stop, so
the next cycle settles its context as dispatched instead of launching the
item a second time.  Room for that record is taken before the polecat starts,
so a full disk refuses the launch instead of leaving a polecat running that
no record names (whose launch the cycle would count as failed and retry).

Run as a script by path (``python -I watch.py EXIT_FILE STARTED_FILE PIPE_FD -- ARGV...``).
Every launch waits for it to report, so before it does it imports only
``os``, ``sys``, ``time``, ``_signal`` and ``ctypes`` (for the subreaper):
the polecat is spawned with ``os.posix_spawnp`` (not ``subprocess``), start
times are read from ``/proc`` on Linux (psutil, sluice's own dependency,
elsewhere) and its two small records are written without ``json`` —
together those imports cost more than the interpreter's own start.  It
cannot be broken by the environment of the town.  On Linux it makes itself
a child subreaper, so descendants the polecat orphans stay under it, where
``polecat stop`` finds them.  The argv is executed directly, never through a
shell.  Stopping the polecat signals its whole tree but never the watcher,
which stays to record the signal as a negative exit code.
"""

from __future__ import annotations

import os
import sys
import time

try:  # the C module itself: ``signal`` wraps it in enums, whose import costs a third of the start
    import _signal as signals
except ImportError:  # pragma: no cover - an interpreter without it
    import signal as signals


def start_time(pid: int) -> float | None:
    """When ``pid`` started, in seconds from boot to 0.01 s; None if there is no such process.

    Seconds from boot, not wall-clock time, so that a clock change never makes
    a running polecat look like another process.  The local executor reads
    pids the same way (it imports this), so the time written here is the one
    it compares to tell a reused pid.  On Linux the kernel's own count of
    clock ticks in ``/proc/PID/stat`` (what psutil reads too, without its
    import); elsewhere psutil.
    """
    if _CLOCK_TICKS:
        fields = proc_stat(pid)
        if fields is None:  # no such process
            return None
        try:
            return round(int(fields[19]) / _CLOCK_TICKS, 2)  # field 22, starttime
        except (IndexError, ValueError):
            return None
    import psutil

    try:
        proc = psutil.Process(pid)
        return round(proc.create_time() - psutil.boot_time(), 2)
    except (psutil.Error, ValueError):
        return None


def proc_stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the process's name (``[0]`` is field 3, its state);
    None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat.rpartition(b")")[2].split()  # the name before it may hold spaces and ")"


def _clock_ticks() -> int:
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/stat"):
        return 0
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 0


_CLOCK_TICKS = _clock_ticks()


def become_subreaper() -> None:
    """On Linux, adopt the polecat's orphaned descendants (``PR_SET_CHILD_SUBREAPER``).

    A helper the polecat started in a session of its own, whose parent then
    exits, is reparented to this watcher instead of to init, so ``polecat
    stop`` still finds it among the watcher's descendants.  Elsewhere a no-op.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


_PR_SET_CHILD_SUBREAPER = 36


def wait_for(child_pid: int) -> int:
    """Wait for the polecat, reaping any adopted orphan on the way; its exit code (-N: signal N)."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == child_pid:
            return os.waitstatus_to_exitcode(status)


def to_json(document: dict[str, int | float | None]) -> str:
    """A flat record of numbers as JSON (the only shape the watcher writes), without importing json."""
    def value(v: int | float | None) -> str:
        if v is None:
            return "null"
        if not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
            raise ValueError(f"not a finite number: {v!r}")
        return repr(v)

    return "{" + ", ".join(f'"{key}": {value(v)}' for key, v in document.items()) + "}"


def write_atomically(path: str, document: dict) -> None:
    temp = f"{path}.tmp"
    with open(temp, "w", encoding="utf-8") as fh:
        fh.write(to_json(document))
    os.replace(temp, path)


# Room for the started record, taken before the polecat starts (see ``main``).
_STARTED_ROOM = 512


def reserve(path: str) -> None:
    """Write ``path``'s temp file at its full size now, so filling it in later needs no new space."""
    temp = f"{path}.tmp"
    with open(temp, "wb") as fh:
        fh.write(b" " * _STARTED_ROOM)


def fill_reserved(path: str, document: dict) -> None:
    """Overwrite the reserved temp file in place (JSON padded with spaces) and rename it over ``path``."""
    data = to_json(document).encode()
    temp = f"{path}.tmp"
    if len(data) > _STARTED_ROOM:
        write_atomically(path, document)
        return
    fd = os.open(temp, os.O_WRONLY)
    try:
        os.pwrite(fd, data.ljust(_STARTED_ROOM), 0)
    finally:
        os.close(fd)
    os.replace(temp, path)


def _discard(path: str) -> None:
    try:
        os.unlink(f"{path}.tmp")
    except OSError:
        pass


# Python ignores these at start; an ignored signal stays ignored across exec, so they are set back
# to their defaults for the polecat (as subprocess does), or a broken pipe would not end its pipelines.
_RESTORED = tuple(getattr(signals, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ")
                  if hasattr(signals, name))


def spawn(command: list[str], report: int) -> int:
    """Start the polecat in a session of its own, stdin from /dev/null, without the report pipe; its pid.

    The command is looked up on ``PATH`` and executed directly, never through
    a shell; a program that cannot be executed is the ``OSError`` of the spawn.
    """
    try:
        return os.posix_spawnp(command[0], command, os.environ, setsid=True, setsigdef=_RESTORED,
                               file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                             (os.POSIX_SPAWN_CLOSE, report)])
    except (AttributeError, NotImplementedError):  # no posix_spawn, or no setsid for it, here
        import subprocess

        return subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True,
                                close_fds=True).pid


def tell(report: int, answer: str) -> None:
    """Report to the launcher, which may be gone (killed mid-launch, or mid-batch): the polecat is
    watched and its exit recorded all the same (the started file is what finds it then)."""
    try:
        os.write(report, answer.encode())
    except OSError:  # EPIPE: nobody reads any more
        pass
    try:
        os.close(report)
    except OSError:
        pass


def main(argv: list[str]) -> int:
    exit_file, started_file, fd_text, dashes, *command = argv
    if dashes != "--" or not command:
        return 2
    report = int(fd_text)
    become_subreaper()
    # A polecat must never run unrecorded: a launch this watcher cannot record is refused before
    # it starts (a full disk fails here), and one whose record still fails is stopped and refused.
    try:
        reserve(started_file)
        child = spawn(command, report)
    except OSError as err:
        _discard(started_file)
        tell(report, f"E{err.errno or 0}")
        return 127
    try:
        fill_reserved(started_file, {"pid": child, "start_time": start_time(child),
                                     "watcher_pid": os.getpid(), "watcher_start": start_time(os.getpid())})
    except BaseException as err:
        try:
            os.killpg(child, 9)
        except OSError:
            pass
        wait_for(child)
        _discard(started_file)
        tell(report, f"E{getattr(err, 'errno', 0) or 0}")
        return 127
    tell(report, f"P{child}")
    code = wait_for(child)
    exited = {"exit_code": code, "finished_ts": time.time()}
    if hasattr(time, "CLOCK_BOOTTIME"):  # the end on the clock the start time is on: no date step moves it
        exited["finished_boot"] = time.clock_gettime(time.CLOCK_BOOTTIME)
    write_atomically(exit_file, exited)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
