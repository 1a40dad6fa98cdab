"""Rigs whose items come from a command (``rig add --items-command 'bd export'``).

beads 1.x keeps its items in Dolt and writes a JSONL file only when asked,
so a rig can name a command whose standard output is a beads export (JSONL)
or a JSON array of records (``bd list --json``, enveloped or not).  Its
output is kept as the rig's *snapshot* under ``runtime/sources/``, and from
there on it is read exactly like an export: same index, same readiness.

* The command runs in the repository, in its own process group, never
  through a shell; it is killed after ``command_timeout``, or as soon as it
  has printed more than :data:`~sluice.store.files.fsutil.MAX_SOURCE_BYTES`.
* It runs again when anything under a watched path changes (default
  ``REPO/.beads``) and at least every ``refresh``.  A read command starts the
  refresh in a child process and waits ``items.read_wait`` for it; past
  that it serves the snapshot it has, and the child finishes the refresh.
  The daemon refreshes due sources on every tick.
* A command that fails, hangs or prints something that is not an export
  changes nothing: the last good snapshot keeps serving and the rig is shown
  ``source_stale`` (:func:`source_stale`) until a run succeeds.  An outage of
  ``bd`` must never look like every item vanished.

The state of each source (when it last ran, what it saw of the watched
paths, its last error) is ``runtime/sources/<rig>.state.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.clock import format_duration, iso
from sluice.core.items import unwrap_envelope
from sluice.errors import LockBusy, SourceFailed, StoreCorrupt, UsageError, os_error_text
from sluice.logs import log
from sluice.store.files import fsutil
from sluice.store.files.jsonlog import TornLine, parse_line
from sluice.store.items import beads_repo

if TYPE_CHECKING:
    import subprocess

    from sluice.store.files.town import Rig, Town

# subprocess, tempfile and shlex are imported where a command runs: every read command checks
# whether a source is due, and most of the time that is a stat and a small JSON read.



def parse_command(spec: str | list[str]) -> list[str]:
    """An argv from ``--items-command``: a JSON array of strings, or text split as a shell would split it.

    Split, never run by a shell: ``bd export | jq`` is the three words
    ``bd``, ``export`` and ``|`` … passed to ``bd``.
    """
    import shlex

    if isinstance(spec, list):
        argv = spec
    else:
        text = spec.strip()
        try:
            argv = json.loads(text) if text.startswith("[") else shlex.split(text)
        except ValueError as err:
            raise UsageError(f"items_command {spec!r}: {err}", parameters=("items_command",)) from None
    if not argv or not all(isinstance(word, str) for word in argv) or not argv[0].strip():
        raise UsageError(f"items_command {spec!r}: expected a command such as 'bd export'"
                         " or a JSON array of strings", parameters=("items_command",))
    return list(argv)


def shown(argv) -> str:
    import shlex

    return shlex.join(argv)


def state_path(town: Town, rig_name: str) -> Path:
    return town.snapshot_path(rig_name).with_suffix(".state.json")


def _lock_path(town: Town, rig_name: str) -> Path:
    return town.runtime / "locks" / f"source-{rig_name}.lock"


def read_state(town: Town, rig_name: str) -> dict:
    try:
        state = json.loads(fsutil.read_regular(state_path(town, rig_name), fsutil.MAX_SMALL_BYTES))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _fail(rig: Rig, text: str) -> SourceFailed:
    return SourceFailed(f"rig {rig.name!r}: items command `{shown(rig.command.argv)}` {text};"
                        " the last snapshot keeps serving")


def run_command(rig: Rig) -> bytes:
    """The command's standard output; SourceFailed when it cannot start, fails or outlives its timeout."""
    import subprocess
    import tempfile

    command = rig.command
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(list(command.argv), cwd=rig.repo, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=err, start_new_session=True)
        except OSError as error:
            raise _fail(rig, f"cannot start in {rig.repo}: {os_error_text(error)}") from None
        limit = fsutil.MAX_SOURCE_BYTES
        try:
            code = _wait_bounded(proc, (out, err), command.timeout, limit)
        finally:
            _kill_group(proc)  # a timed-out command, and anything a finished one left running
        if code == _TOO_MUCH:
            raise _fail(rig, f"printed more than {fsutil.size_text(limit)} and was killed")
        if code is None:
            raise _fail(rig, f"did not finish within {format_duration(command.timeout)} and was killed")
        if code != 0:
            err.seek(max(0, err.seek(0, os.SEEK_END) - 400))
            said = err.read(400).decode("utf-8", "replace").strip().replace("\n", " | ")
            raise _fail(rig, f"exited with status {code}" + (f": {said}" if said else ""))
        out.seek(0)
        data = out.read(limit + 1)  # what it left running may have printed more before it was killed
        if len(data) > limit:
            raise _fail(rig, f"printed more than {fsutil.size_text(limit)}")
        return data


#: What :func:`_wait_bounded` says of a command that printed more than the limit.
_TOO_MUCH = -(1 << 16)


def _wait_bounded(proc: subprocess.Popen, files, timeout: float, limit: int) -> int | None:
    """The command's exit status; None when it outlived ``timeout``, :data:`_TOO_MUCH` when one of
    the ``files`` it prints to passed ``limit`` bytes (a command printing without end must fill
    neither the disk nor, read back, the memory)."""
    import subprocess

    deadline = time.monotonic() + timeout
    step = 0.01
    while True:
        try:
            code = proc.wait(timeout=max(0.0, min(step, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            code = None
        if any(os.fstat(file.fileno()).st_size > limit for file in files):
            return _TOO_MUCH
        if code is not None or time.monotonic() >= deadline:
            return code
        step = min(step * 2, 0.25)


def _kill_group(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def snapshot_bytes(rig: Rig, data: bytes) -> tuple[bytes, int]:
    """The export a command printed, as JSONL to keep, and how many records it holds.

    JSONL lines are kept as printed (so a line reads exactly as it would
    from beads' own export file); a JSON array, or one wrapped in beads'
    envelope, becomes one line per record.  Every line must pass the rules
    an export file's lines pass, else nothing is kept.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _fail(rig, "printed bytes that are not UTF-8 text") from None
    lines: list[str] | None = None
    body = text.strip()
    if body[:1] in ("[", "{"):
        try:
            printed = json.loads(body)
        except (ValueError, RecursionError):
            printed = None  # several lines: JSONL
        value = unwrap_envelope(printed)
        if isinstance(value, dict):
            # One bare record on one line is a one-line export, kept as printed.
            value = None if value is printed and "\n" not in body else [value]
        if isinstance(value, list):
            lines = [json.dumps(v, ensure_ascii=False, separators=(",", ":")) for v in value]
        elif value is not None:
            raise _fail(rig, "printed JSON that is neither records nor an array of them")
    if lines is None:
        lines = text.splitlines()
    kept = [line for line in lines if line.strip()]
    count = 0
    for number, line in enumerate(kept, start=1):
        try:
            count += parse_line(Path("output"), number, line.encode("utf-8") + b"\n") is not None
        except (StoreCorrupt, TornLine) as err:
            raise _fail(rig, f"printed something that is not a beads export ({err})") from None
    return "".join(line + "\n" for line in kept).encode("utf-8"), count


def refresh(town: Town, rig: Rig, lock_timeout: float | None = None, only_if_due: bool = False) -> dict:
    """Run the rig's command now and keep its output; the source's new state.

    Under the source's lock, so two refreshes never run one command twice at
    once.  ``only_if_due`` (a refresh started for a reader) does nothing when
    another refresh finished while this one waited for the lock.  A failure
    is recorded in the state and raised as SourceFailed; the snapshot is
    only replaced by a complete, valid export.
    """
    timeout = rig.command.timeout + 5 if lock_timeout is None else lock_timeout
    with fsutil.file_lock(_lock_path(town, rig.name), timeout=timeout):
        before = read_state(town, rig.name)
        if only_if_due and not is_due(town, rig, before):
            return before
        started = time.time()
        argv = list(rig.command.argv)
        try:
            data, count = snapshot_bytes(rig, run_command(rig))
        except SourceFailed as err:
            failed = before.get("failed_at") if before.get("error") else iso()
            state = {**before, "argv": argv, "ran_at": started, "error": str(err), "failed_at": failed,
                     "watch": beads_repo.tree_signature(rig.command.watch)}
            fsutil.atomic_write_json(state_path(town, rig.name), state)
            raise
        snapshot = town.snapshot_path(rig.name)
        try:  # what is there may be anything (a FIFO, a link to /dev/zero): read bounded, never waited on
            same = fsutil.read_regular(snapshot, fsutil.MAX_SOURCE_BYTES) == data
        except OSError:
            same = False
        if not same:  # an unchanged export keeps the file, and with it the index built from it
            fsutil.atomic_write_bytes(snapshot, data)
        state = {"argv": argv, "ran_at": started, "ok_at": iso(), "records": count, "error": None,
                 "failed_at": None, "watch": beads_repo.tree_signature(rig.command.watch)}
        fsutil.atomic_write_json(state_path(town, rig.name), state)
        return state


def is_due(town: Town, rig: Rig, state: dict, now: float | None = None) -> bool:
    """Whether the snapshot should be taken again: never taken, a watched path changed, or it is old."""
    if state.get("argv") != list(rig.command.argv) or not town.snapshot_path(rig.name).exists():
        return True
    ran_at = state.get("ran_at")
    if not isinstance(ran_at, (int, float)) or (now or time.time()) - ran_at >= rig.command.refresh:
        return True
    return state.get("watch") != beads_repo.tree_signature(rig.command.watch)


def ensure_fresh(town: Town, rig: Rig) -> None:
    """Before a read: refresh a due snapshot, waiting no longer than ``read_wait`` when there is one.

    Never raises for a failing command when a snapshot exists: the failure
    is logged (naming rig and command) and the rig is ``source_stale``.
    """
    state = read_state(town, rig.name)
    if not is_due(town, rig, state):
        return
    if not town.snapshot_path(rig.name).exists():
        try:
            refresh(town, rig)
        except SourceFailed as err:
            log.warning(str(err))
        return
    try:
        with fsutil.file_lock(_lock_path(town, rig.name), timeout=0):
            pass
    except LockBusy:
        return  # a refresh is running already (another reader's child, the daemon): serve what there is
    import subprocess

    proc = subprocess.Popen([sys.executable, "-m", "sluice.store.items.sources", str(town.root), rig.name],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        proc.wait(timeout=rig.command.read_wait)
    except subprocess.TimeoutExpired:
        return  # the child finishes the refresh; this read serves the snapshot it has
    after = read_state(town, rig.name)
    if after.get("error") and after.get("ran_at") != state.get("ran_at"):
        log.warning(after["error"])


def refresh_due(town: Town) -> list[str]:
    """Refresh every due command source now (the daemon's tick); the errors, one per failing rig."""
    errors = []
    for rig in town.rigs():
        if rig.command is not None and is_due(town, rig, read_state(town, rig.name)):
            try:
                refresh(town, rig, only_if_due=True)
            except SourceFailed as err:
                errors.append(str(err))
    return errors


def source_stale(town: Town, rig: Rig) -> dict | None:
    """Why a read-only rig's items may be behind its beads store, or None when they are not.

    A command source is stale while its last run failed (its previous
    snapshot serves); an export file is stale when the store beside it was
    written well after it (:func:`~sluice.store.items.beads_repo.export_lag`).
    """
    if rig.command is not None:
        state = read_state(town, rig.name)
        if not state.get("error"):
            return None
        return {"kind": "command-failed", "detail": state["error"], "since": state.get("failed_at"),
                "source_at": state.get("ok_at")}
    if rig.items is not None:
        return beads_repo.export_lag(rig.repo, rig.items)
    return None


def stale_rows(town: Town) -> list[dict]:
    """``source_stale`` of every rig that has one, as ``scheduler status`` lists them."""
    stale = ((rig, source_stale(town, rig)) for rig in town.rigs())
    return [{"rig": rig.name, **why} for rig, why in stale if why is not None]


def main(argv: list[str]) -> int:
    """``python -m sluice.store.items.sources TOWN RIG``: the refresh a read command started."""
    from sluice.store.files.town import Town

    town = Town(Path(argv[0]))
    rig = town.rig(argv[1])
    if rig.command is None:
        return 0
    try:
        refresh(town, rig, lock_timeout=0, only_if_due=True)
    except LockBusy:
        return 0  # another refresh got there first
    except SourceFailed:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
