"""The watcher of one local polecat: start it, report its pid, record how it exited.

A polecat is usually started by a dispatch cycle that ends long before the
polecat does (the daemon runs each cycle as a short-lived process), so no
sluice process is its parent and its exit status would be lost.  The local
executor therefore starts this small watcher (in a session of its own), which
starts the polecat in *another* new session, writes the polecat's pid to a
pipe the launcher reads, waits, and writes ``{"exit_code": N}`` atomically
to the file named by its first argument.  The exit code is what lets a
polecat ask for a throttle by exiting with ``scheduler.throttle_exit_code``.

Before it reports the pid, it writes ``STARTED_FILE`` (both pids and their
start times): a launcher killed between starting the watcher and recording
the pid leaves a polecat the executor still finds, watches and can stop, so
the next cycle settles its context as dispatched instead of launching the
item a second time.

Run as a script by path (``python -I watch.py EXIT_FILE STARTED_FILE PIPE_FD -- ARGV...``):
it imports only the standard library, so it starts fast and cannot be broken
by the environment of the town.  The argv is executed directly, never through
a shell.  Stopping the polecat signals only the polecat's session; the
watcher stays to record the signal as a negative exit code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) from ``/proc/<pid>/stat``; None if there is no such process.

    The local executor reads pids the same way (it imports this), so the start
    time written here is the one it compares to tell a reused pid.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    # comm (field 2) is in parentheses and may hold spaces or ')' itself.
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        return rest[0].decode(), int(rest[19])
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks), None if there is no such process."""
    info = proc_stat(pid)
    return info[1] if info else None


def write_atomically(path: str, document: dict) -> None:
    temp = f"{path}.tmp"
    with open(temp, "w", encoding="utf-8") as fh:
        json.dump(document, fh)
    os.replace(temp, path)


def main(argv: list[str]) -> int:
    exit_file, started_file, fd_text, dashes, *command = argv
    if dashes != "--" or not command:
        return 2
    report = int(fd_text)
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError as err:
        os.write(report, f"E{err.errno or 0}".encode())
        os.close(report)
        return 127
    write_atomically(started_file, {"pid": child.pid, "start_time": start_time(child.pid),
                                    "watcher_pid": os.getpid(), "watcher_start": start_time(os.getpid())})
    os.write(report, f"P{child.pid}".encode())
    os.close(report)
    code = child.wait()
    write_atomically(exit_file, {"exit_code": code})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
