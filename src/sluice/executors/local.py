"""The default executor: each polecat is a local process in its own session.

The argv comes from ``executor.command`` with placeholders filled element by
element (:func:`~sluice.executors.base.substitute`) and is executed directly,
never through a shell.  The process runs in the rig repository, in a new
session (so it and its children form one process group that ``stop`` can
signal as a whole), with ``SLUICE_ITEM_ID``/``SLUICE_RIG``/
``SLUICE_CONTEXT_ID``/``SLUICE_TOWN`` added to its environment and its output
in ``runtime/workers/<id>.log``.

A record ``runtime/workers/<id>.json`` is written *before* the process is
started (state ``pending``) and completed with the pid and the process start
time right after.  The start time (seconds from boot, read through psutil:
:mod:`sluice.executors.procs`) is what makes a record safe against pid reuse
on every platform: a pid only counts as this polecat if the process under it
started at the same moment.  The pending record is
what lets a dispatcher that crashed mid-launch find the polecat instead of
launching it again.  Finished polecats are moved by :meth:`reap` into
``runtime/workers/finished.jsonl`` (logs stay), so :meth:`find` still knows
them afterwards.

The polecat is started through a small watcher (:mod:`sluice.executors.watch`)
that outlives the launching process and writes ``<id>.exit`` with the exit
code, so a polecat's exit status is known whichever process started it.
While the polecat has ended but its watcher has not yet written the code, the
polecat still counts as running: readers never see an exit without its code.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.clock import iso, new_id
from sluice.errors import ExecutorError, StoreCorrupt
from sluice.executors import procs
from sluice.executors.base import (
    LaunchRequest,
    Polecat,
    check_launchable,
    ended_state,
    exit_path,
    polecat_env,
    read_exit,
    read_finished,
    require_command,
)
from sluice.executors.procs import start_time as proc_start_time
from sluice.executors.watch import _CLOCK_TICKS
from sluice.store.files import fsutil

if TYPE_CHECKING:
    import subprocess

    from sluice.store.files.town import Town

DEMO_COMMAND = (sys.executable, "-m", "sluice.surfaces.demo_worker", "{item_id}")
FINISHED_LOG = "finished.jsonl"
# A pending record whose launcher is gone for this long is reported as lost.
_PENDING_GRACE = 30.0
WATCHER = str(Path(__file__).with_name("watch.py"))
_watchers: list[subprocess.Popen] = []  # polled now and then so finished watchers leave no zombies
#: ``-S`` only where the watcher reads start times from ``/proc``: elsewhere it imports psutil.
_WATCHER_FLAGS = ("-I", "-S") if _CLOCK_TICKS else ("-I",)


def pid_alive(pid: int, start_time: float | int | None) -> bool:
    """True when ``pid`` runs (not a zombie) and, where known, started at ``start_time``."""
    return procs.alive(pid, start_time)


class LocalExecutor:
    kind = "local"

    def __init__(self, town: Town, demo: bool = False, stop_grace: float = 5.0):
        self.town = town
        self.demo = demo
        self.stop_grace = stop_grace
        self.dir = town.workers_dir
        #: The argv template used when ``executor.command`` is empty (only the demo has one).
        self.default_command: tuple[str, ...] | None = DEMO_COMMAND if demo else None

    # -- records -------------------------------------------------------------
    def _record_path(self, polecat_id: str) -> Path:
        return self.dir / f"{polecat_id}.json"

    def log_path(self, polecat_id: str) -> Path:
        return self.dir / f"{polecat_id}.log"

    def _records(self) -> list[dict]:
        out = []
        if not self.dir.is_dir():
            return out
        for path in sorted(self.dir.glob("*.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                continue  # reaped meanwhile
            except ValueError as err:
                raise StoreCorrupt(path, 1, f"malformed polecat record ({err})") from None
            # other executors keep their records in the same directory
            mine = isinstance(record, dict) and record.get("executor", self.kind) == self.kind
            if mine and record.get("id"):
                out.append(self._adopted(record))
        out.sort(key=lambda r: (r.get("started_at", ""), r["id"]))
        return out

    def _write(self, record: dict) -> None:
        fsutil.atomic_write_json(self._record_path(record["id"]), record)

    def _state(self, record: dict) -> str:
        if record.get("state") in ("exited", "stopped", "failed"):
            return record["state"]
        pid = record.get("pid")
        if pid is None:
            launcher = record.get("launcher_pid")
            recent = time.time() - float(record.get("created_ts", 0)) < _PENDING_GRACE
            if launcher and (launcher == os.getpid() or pid_alive(launcher, record.get("launcher_start"))):
                return "pending"
            return "pending" if recent else "lost"
        if pid_alive(pid, record.get("start_time")):
            return "running"
        watcher = record.get("watcher_pid")
        now = proc_start_time(pid)
        reused = now is not None and record.get("start_time") is not None \
            and not procs.same_start(record["start_time"], now)
        if watcher and not reused and not exit_path(self.dir, record["id"]).exists() \
                and pid_alive(watcher, record.get("watcher_start")):
            return "running"  # ended a moment ago; its watcher is writing the exit code
        return ended_state(self._with_exit(record).get("exit_code"))  # failed: a non-zero exit status

    def _polecat(self, record: dict, state: str | None = None) -> Polecat:
        # The state first, then the exit record: a watcher may write it between the two looks, and
        # a polecat judged ended must carry the code that made it so (read the other way round it
        # looks ended with no code at all, which is a vanished run).
        state = state or self._state(record)
        record = self._with_exit(record)
        detail = {k: record[k] for k in ("argv", "cwd", "start_time", "exit_code", "finished_at", "title",
                                         "ended_ts", "ended_boot") if record.get(k) is not None}
        return Polecat(id=record["id"], executor=self.kind, item_id=record.get("item_id", ""),
                       rig=record.get("rig", ""), context_id=record.get("context_id", ""),
                       started_at=record.get("started_at", ""), state=state, pid=record.get("pid"),
                       log_path=record.get("log_path"), detail=detail)

    def _with_exit(self, record: dict) -> dict:
        """``record`` with the exit code and end its watcher wrote, once it has written them."""
        if record.get("exit_code") is None:
            finished = read_exit(self.dir, record["id"])
            if finished is not None:
                return {**record, "exit_code": finished["exit_code"], "ended_ts": finished["finished_ts"],
                        "ended_boot": finished["finished_boot"]}
        return record

    # -- protocol ------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Polecat:
        return self.start(request)()

    def start(self, request: LaunchRequest) -> Callable[[], Polecat]:
        """Start the polecat's watcher and return the wait for its report (the polecat, or ExecutorError).

        Most of a launch is the watcher's interpreter starting, which needs
        nothing of the launcher; a dispatch cycle starts a batch's watchers
        one after another and only then waits for each, so the interpreters
        start side by side instead of one by one.  The pending record is
        written before the watcher starts, as for a single launch, so a
        launcher killed between the two steps leaves polecats that
        :meth:`find` still finds (see :meth:`_adopted`).
        """
        require_command(request)
        cwd = Path(request.cwd)
        if not cwd.is_dir():
            raise ExecutorError(f"cannot launch a polecat in {cwd}: no such directory")
        sluice_env = {**polecat_env(str(self.town.root), request.item_id, request.rig, request.context_id),
                      **request.env}
        check_launchable(request.argv, sluice_env)
        polecat_id, log_path = self._claim_id(request)
        record = {"id": polecat_id, "executor": self.kind, "state": "pending", "item_id": request.item_id,
                  "rig": request.rig, "context_id": request.context_id, "title": request.title,
                  "argv": list(request.argv), "cwd": str(cwd), "log_path": str(log_path),
                  "launcher_pid": os.getpid(), "launcher_start": proc_start_time(os.getpid()),
                  "created_ts": time.time(), "started_at": iso()}
        self._write(record)  # intent first: a crash from here on is found by find()
        env = {**os.environ, **sluice_env}
        try:
            starting = _spawn_watcher(list(request.argv), cwd, env, log_path, exit_path(self.dir, polecat_id),
                                      self._started_path(polecat_id))
        except (OSError, ValueError) as err:
            raise self._not_started(request, polecat_id, log_path, err) from None

        def wait() -> Polecat:
            try:
                pid, watcher = _reported(*starting)
            except (OSError, ValueError) as err:
                raise self._not_started(request, polecat_id, log_path, err) from None
            # The start times the watcher wrote as it started the polecat: by the time a batch's reports
            # are read, a polecat that ended at once is gone, and its pid could be another process's.
            started = self._started_times(polecat_id, pid, watcher.pid)
            record.update(state="running", pid=pid, start_time=started[0], watcher_pid=watcher.pid,
                          watcher_start=started[1])
            # The polecat runs: a refusal here must not read as "nothing launched", or the cycle would
            # withdraw its intent and launch the item again.  The pending record and the watcher's
            # started file (written before it reported) let find() adopt it (see _adopted).
            with contextlib.suppress(OSError):
                self._write(record)
            return self._polecat(record, "running")

        return wait

    def _not_started(self, request: LaunchRequest, polecat_id: str, log_path: Path, err: Exception
                     ) -> ExecutorError:
        """The error of a polecat that did not start, said in its log; its pending record goes.

        The record goes first and whatever the log can take: on a full disk the
        log refuses the line, and a pending record left behind would be found as
        a polecat launched (then lost) for a launch that never started.
        """
        reason = _launch_error(request.argv[0], err)
        self._record_path(polecat_id).unlink(missing_ok=True)
        with contextlib.suppress(OSError), open(log_path, "a", encoding="utf-8") as log:
            log.write(f"sluice: {reason}\n")
        return ExecutorError(reason)

    def _started_times(self, polecat_id: str, pid: int, watcher: int) -> tuple:
        """(polecat start, watcher start) as the watcher's started file has them, else read now."""
        started = self._started(polecat_id)
        if started is not None and (started["pid"], started["watcher_pid"]) == (pid, watcher):
            return started["start_time"], started["watcher_start"]
        return proc_start_time(pid), proc_start_time(watcher)

    def _started_path(self, polecat_id: str) -> Path:
        return self.dir / f"{polecat_id}.started"

    def _started(self, polecat_id: str) -> dict | None:
        """The watcher's started file: ``pid``, ``watcher_pid`` and their start times; None without one."""
        try:
            started = json.loads(self._started_path(polecat_id).read_text(encoding="utf-8"))
            return {"pid": int(started["pid"]), "watcher_pid": int(started["watcher_pid"]),
                    "start_time": started.get("start_time"), "watcher_start": started.get("watcher_start")}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def _adopted(self, record: dict) -> dict:
        """A record whose launcher died before writing the pid, completed from the watcher's file.

        The watcher writes ``<id>.started`` before it reports to the launcher
        (:mod:`sluice.executors.watch`), so such a polecat is still found,
        watched, reaped and stoppable, and its context is settled as
        dispatched rather than launched again.
        """
        if record.get("pid") is not None or not record.get("id"):
            return record
        started = self._started(record["id"])
        return record if started is None else {**record, "state": "running", **started}

    def _claim_id(self, request: LaunchRequest) -> tuple[str, Path]:
        """A polecat id no polecat of this town has had, claimed by creating its log file.

        Logs outlive their records (reaping keeps them) and two launchers may
        pick an id at the same moment; creating the log exclusively settles
        both, so a new polecat never writes into another one's log or record.
        An id is taken when its log or its record is on disk: asked of each
        candidate, not of a listing of the directory, which holds every log
        the town ever wrote and would make each launch cost more than the last.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        taken = _OnDisk(self)
        while True:
            polecat_id = new_id("pc", f"{request.context_id}|{request.item_id}", taken)
            log_path = self.log_path(polecat_id)
            try:
                with open(log_path, "xb"):
                    pass
            except FileExistsError:
                taken.add(polecat_id)
                continue
            return polecat_id, log_path

    def active(self) -> list[Polecat]:
        states = ((record, self._state(record)) for record in self._records())
        return [self._polecat(record, state) for record, state in states if state in ("running", "pending")]

    def find(self, context_id: str) -> Polecat | None:
        if not context_id:
            return None
        for record in reversed(self._records()):
            if record.get("context_id") == context_id:
                return self._polecat(record)
        for record in reversed(self._finished()):
            if record.get("context_id") == context_id:
                return self._polecat(record, record.get("state", "exited"))
        return None

    def get(self, polecat_id: str) -> Polecat | None:
        path = self._record_path(polecat_id)
        if path.is_file():
            return self._polecat(self._adopted(json.loads(path.read_text(encoding="utf-8"))))
        for record in reversed(self._finished()):
            if record.get("id") == polecat_id:
                return self._polecat(record, record.get("state", "exited"))
        return None

    def stop(self, polecat_id: str) -> bool:
        """SIGTERM the polecat's whole process tree, SIGKILL what is left after the grace period.

        The tree is the polecat, its descendants, and the descendants its
        watcher adopted (:func:`sluice.executors.procs.stop_tree`), so helpers
        it started in sessions of their own stop with it.
        """
        path = self._record_path(polecat_id)
        try:
            record = self._adopted(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return False
        pid = record.get("pid")
        if pid is None:
            return False
        watcher = (record["watcher_pid"], record.get("watcher_start")) if record.get("watcher_pid") else None
        if not procs.stop_tree(pid, record.get("start_time"), self.stop_grace, watcher):
            return False
        record.update(state="stopped", finished_at=iso())
        self._write(record)
        return True

    def logs(self, polecat_id: str, follow: bool = False) -> Iterator[str]:
        path = self.log_path(polecat_id)
        if not path.exists() and self.get(polecat_id) is None:
            raise ExecutorError(f"no polecat {polecat_id!r}")
        if not path.exists():
            return
        with open(path, encoding="utf-8", errors="replace") as fh:
            pending = ""
            while True:
                chunk = fh.readline()
                if chunk:
                    pending += chunk
                    if pending.endswith("\n"):
                        yield pending.rstrip("\n")
                        pending = ""
                    continue
                polecat = self.get(polecat_id) if follow else None
                if polecat is None or polecat.state not in ("running", "pending"):
                    rest = fh.read()
                    if pending or rest:
                        yield from (pending + rest).rstrip("\n").split("\n")
                    return
                time.sleep(0.2)

    def listing(self) -> list[Polecat]:
        return [self._polecat(record) for record in self._records()]

    def reap(self) -> list[Polecat]:
        """Move finished polecats' records to ``finished.jsonl`` (with exit state); logs stay."""
        reaped = []
        for record in self._records():
            state = self._state(record)
            if state in ("running", "pending"):
                continue
            with fsutil.file_lock(self.town.lock_path("workers")):
                path = self._record_path(record["id"])
                if not path.exists():
                    continue
                record = {**self._with_exit(record), "state": state}
                record.setdefault("finished_at", iso())
                fsutil.append_json(self.dir / FINISHED_LOG, record)
                path.unlink()
                exit_path(self.dir, record["id"]).unlink(missing_ok=True)
                self._started_path(record["id"]).unlink(missing_ok=True)
            reaped.append(self._polecat(record, state))
        return reaped

    def _finished(self) -> list[dict]:
        return read_finished(self.dir / FINISHED_LOG)

    def finished(self) -> list[Polecat]:
        """Reaped polecats, oldest first (their records moved to ``finished.jsonl``)."""
        return [self._polecat(record, record.get("state", "exited")) for record in self._finished()]


class _OnDisk:
    """The polecat ids that have a log or a record in the workers' directory, asked one at a time."""

    def __init__(self, executor: LocalExecutor):
        self.executor = executor
        self.claimed: set[str] = set()  # lost to another launcher between the look and the claim

    def __contains__(self, polecat_id: object) -> bool:
        if not isinstance(polecat_id, str):
            return False
        executor = self.executor
        return polecat_id in self.claimed or executor.log_path(polecat_id).exists() \
            or executor._record_path(polecat_id).exists()

    def add(self, polecat_id: str) -> None:
        self.claimed.add(polecat_id)


def _spawn_watcher(argv: list[str], cwd: Path, env: dict, log_path: Path, exit_path: Path,
                   started_path: Path) -> tuple[subprocess.Popen, int]:
    """Start ``argv``'s watcher; (the watcher, the pipe it reports on), or the OSError of its start.

    ``-S`` where the kernel's ``/proc`` gives start times: the watcher then
    needs nothing from site-packages, and skipping them (and their ``.pth``
    files) shortens every launch; elsewhere it reads them through psutil.
    """
    import subprocess  # here: the views list polecats through this executor and never start one (4 ms)

    for watcher in list(_watchers):
        if watcher.poll() is not None:
            _watchers.remove(watcher)
    read_end, write_end = os.pipe()
    try:
        with open(log_path, "ab") as log:
            watcher = subprocess.Popen(
                [sys.executable, *_WATCHER_FLAGS, WATCHER, str(exit_path), str(started_path), str(write_end),
                 "--", *argv],
                cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True, pass_fds=(write_end,),
            )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    _watchers.append(watcher)
    return watcher, read_end


def _reported(watcher: subprocess.Popen, read_end: int) -> tuple[int, subprocess.Popen]:
    """(polecat pid, watcher) once the watcher reports, or the OSError of the polecat's start."""
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read().decode("ascii", "replace")
    if answer.startswith("P"):
        return int(answer[1:]), watcher
    errno = int(answer[1:] or 0) if answer.startswith("E") and answer[1:].isdigit() else 0
    watcher.wait()
    raise OSError(errno, os.strerror(errno) if errno else f"the watcher exited with {watcher.returncode}")


def _launch_error(program: str, err: Exception) -> str:
    if isinstance(err, FileNotFoundError):
        return f"cannot launch {program!r}: no such file or command"
    if isinstance(err, PermissionError):
        return f"cannot launch {program!r}: permission denied"
    return f"cannot launch {program!r}: {getattr(err, 'strerror', None) or err}"
