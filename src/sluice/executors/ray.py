"""Polecats as Ray Jobs (``executor.kind = ray``): agents spread over several machines.

Each polecat is one job submitted to the cluster's Jobs API at
``executor.ray.address``.  Ray is an optional extra (``pip install
'git-sluice[ray]'``) and is imported only when this executor is used.

* **One job per context, ever.**  The submission id is derived from the town
  and the context id, so submitting the same context again (a dispatcher that
  crashed after submitting) is refused by Ray as "already exists" and is
  treated as launched: never a second polecat.
* **The entrypoint** is ``cd -- <repo> && exec <argv>``, every element
  quoted with :func:`shlex.quote`.  Ray always runs an entrypoint through
  ``/bin/sh``; quoting each element is what keeps an item title one literal
  argument.  The rig repository must exist at the same path on every node
  that may run a polecat (shared filesystem, or identical checkouts).
* **Placement and per-node caps** come from ``executor.ray.resources``
  (e.g. ``{"agent_slot": 1}``, with nodes started ``--resources
  '{"agent_slot": 2}'``); a job waits as PENDING until a node has room.
* **Which jobs are ours**: metadata ``sluice_town`` (a hash of the town root)
  plus ``town``, ``rig``, ``item_id`` and ``context_id``.
* **An unreachable cluster** raises :class:`ExecutorUnavailable`: the cycle
  reports a configuration problem and no failure is counted against items.
"""

from __future__ import annotations

import asyncio
import shlex
import socket
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sluice.core.clock import iso
from sluice.errors import ExecutorError, ExecutorUnavailable
from sluice.executors.base import (
    LaunchRequest,
    Polecat,
    check_launchable,
    polecat_env,
    read_finished,
    require_command,
)
from sluice.executors.naming import launch_name, town_key
from sluice.store import fsutil

if TYPE_CHECKING:
    from sluice.store.town import Town

KIND = "ray"
FINISHED_LOG = "ray-finished.jsonl"
NOT_INSTALLED = "executor.kind is ray but Ray is not installed: pip install 'git-sluice[ray]'"
PROBE_TIMEOUT = 5.0  # seconds to reach the dashboard before calling the cluster unreachable
STOP_TIMEOUT = 60.0  # Ray sends SIGTERM, then SIGKILL after RAY_JOB_STOP_WAIT_TIME_S (3 s)

_STATES = {
    "PENDING": "pending",
    "RUNNING": "running",
    "SUCCEEDED": "exited",
    "FAILED": "failed",  # the entrypoint exited non-zero (driver_exit_code says how)
    "STOPPED": "stopped",
}
_TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def entrypoint(repo: str, argv: tuple[str, ...] | list[str]) -> str:
    """The shell line Ray runs: change to the repo, then become the polecat; every element quoted."""
    return f"cd -- {shlex.quote(repo)} && exec {shlex.join(argv)}"


def resource_options(resources: dict[str, float]) -> dict[str, Any]:
    """``executor.ray.resources`` as ``submit_job`` keywords (CPU, GPU and memory have their own)."""
    rest = dict(resources)
    options: dict[str, Any] = {}
    if "CPU" in rest:
        options["entrypoint_num_cpus"] = rest.pop("CPU")
    if "GPU" in rest:
        options["entrypoint_num_gpus"] = rest.pop("GPU")
    if "memory" in rest:
        options["entrypoint_memory"] = int(rest.pop("memory"))
    if rest:
        options["entrypoint_resources"] = rest
    return options


class RayExecutor:
    kind = KIND

    def __init__(self, town: Town, client: Any = None):
        self.town = town
        settings = town.config.executor.ray
        self.address = settings.address
        self.resources = dict(settings.resources)
        self.key = town_key(town)[:12]
        self.namespace = f"sluice-{self.key}"
        self._client = client

    # -- the cluster -----------------------------------------------------------
    @property
    def client(self):
        if self._client is None:
            try:
                from ray.job_submission import JobSubmissionClient
            except ImportError:
                raise ExecutorUnavailable(NOT_INSTALLED) from None
            self._probe()
            self._client = self._call("connect", JobSubmissionClient, self.address)
        return self._client

    def _probe(self) -> None:
        """Fail fast on a dead address: Ray's own HTTP calls have no timeout."""
        parts = urlsplit(self.address if "://" in self.address else f"http://{self.address}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return  # "auto", ray://… : Ray resolves those itself
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            socket.create_connection((parts.hostname, port), timeout=PROBE_TIMEOUT).close()
        except OSError as err:
            raise ExecutorUnavailable(self._unreachable(err)) from None

    def _unreachable(self, err: Exception) -> str:
        return (
            f"the Ray cluster at {self.address} is unreachable ({err}); "
            "check executor.ray.address and that the head node's dashboard is running"
        )

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except OSError as err:  # ConnectionError and every requests exception
            raise ExecutorUnavailable(self._unreachable(err)) from None
        except (RuntimeError, ValueError, TypeError) as err:  # Ray's refusals, server- or client-side
            if "Failed to connect" in str(err):
                raise ExecutorUnavailable(self._unreachable(err)) from None
            raise ExecutorError(f"Ray {what} failed: {_first_line(err)}") from None

    def _job(self, submission_id: str):
        """The job's details, or None when the cluster has no such job."""
        try:
            return self._call("job lookup", self.client.get_job_info, submission_id)
        except ExecutorUnavailable:
            raise
        except ExecutorError as err:
            if "404" in str(err) or "does not exist" in str(err):
                return None
            raise

    def _town_jobs(self) -> list:
        jobs = self._call("list_jobs", self.client.list_jobs)
        return [job for job in jobs if (job.metadata or {}).get("sluice_town") == self.key]

    def _polecat(self, job) -> Polecat:
        meta = job.metadata or {}
        status = str(getattr(job.status, "value", job.status))
        started = iso(datetime.fromtimestamp(job.start_time / 1000, UTC)) if job.start_time else ""
        local_log = self._log_path(job.submission_id)
        return Polecat(
            id=job.submission_id,
            executor=KIND,
            item_id=meta.get("item_id", ""),
            rig=meta.get("rig", ""),
            context_id=meta.get("context_id", ""),
            started_at=started,
            state=_STATES.get(status, "lost"),
            pid=None,
            log_path=str(local_log) if local_log.exists() else None,
            detail={
                "status": status,
                "message": job.message,
                "exit_code": getattr(job, "driver_exit_code", None),
                "node_id": getattr(job, "driver_node_id", None),
                "started_ts": job.start_time / 1000 if job.start_time else None,
                "ended_ts": job.end_time / 1000 if getattr(job, "end_time", None) else None,
                "address": self.address,
            },
        )

    # -- the protocol ------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Polecat:
        require_command(request)
        rig = self.town.rig(request.rig)
        submission_id = launch_name(self.namespace, rig.prefix, request.context_id, request.item_id)
        repo = request.repo or str(rig.repo)
        env = {**polecat_env(request.town, request.item_id, request.rig, request.context_id), **request.env}
        check_launchable(request.argv, env)
        metadata = {
            "sluice_town": self.key,
            "town": request.town,
            "rig": request.rig,
            "item_id": request.item_id,
            "context_id": request.context_id,
        }
        client = self.client
        try:
            self._call(
                "submit_job",
                client.submit_job,
                entrypoint=entrypoint(repo, request.argv),
                submission_id=submission_id,
                metadata=metadata,
                runtime_env={"env_vars": env},
                **resource_options(self.resources),
            )
        except ExecutorError as err:
            if "already exists" not in str(err) or isinstance(err, ExecutorUnavailable):
                raise
            # Submitted before (a crash after submit): that job is this context's polecat.
        job = self._job(submission_id)
        if job is None:
            raise ExecutorError(f"Ray accepted job {submission_id} but does not report it")
        return self._polecat(job)

    def active(self) -> list[Polecat]:
        return [self._polecat(job) for job in self._town_jobs() if str(job.status) in ("PENDING", "RUNNING")]

    def listing(self) -> list[Polecat]:
        jobs = sorted(self._town_jobs(), key=lambda job: (job.start_time or 0, job.submission_id))
        return [self._polecat(job) for job in jobs]

    def find(self, context_id: str) -> Polecat | None:
        if not context_id:
            return None
        jobs = [job for job in self._town_jobs() if (job.metadata or {}).get("context_id") == context_id]
        if jobs:
            return self._polecat(max(jobs, key=lambda job: job.start_time or 0))
        for record in reversed(self._finished()):
            if record.get("context_id") == context_id:
                return Polecat(**{k: record[k] for k in Polecat.__dataclass_fields__ if k in record})
        return None

    def stop(self, polecat_id: str) -> bool:
        """Ask Ray to stop the job and wait until it is STOPPED (its processes are gone by then)."""
        job = self._job(polecat_id)
        if job is None or str(job.status) in _TERMINAL:
            return False
        if not self._call("stop_job", self.client.stop_job, polecat_id):
            return False
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline:
            status = str(self._call("get_job_status", self.client.get_job_status, polecat_id))
            if status in _TERMINAL:
                return True
            time.sleep(0.2)
        raise ExecutorError(f"Ray job {polecat_id} did not stop within {STOP_TIMEOUT:g}s")

    def logs(self, polecat_id: str, follow: bool = False) -> Iterator[str]:
        job = self._job(polecat_id)
        if job is None:
            local = self._log_path(polecat_id)
            if local.exists():  # reaped: the log was kept on this machine
                return iter(local.read_text(encoding="utf-8", errors="replace").splitlines())
            raise ExecutorError(f"no polecat {polecat_id!r} on the Ray cluster at {self.address}")
        if follow and str(job.status) not in _TERMINAL:
            return self._tail(polecat_id)
        text = self._call("get_job_logs", self.client.get_job_logs, polecat_id)
        return iter(text.splitlines())

    def _tail(self, polecat_id: str) -> Iterator[str]:
        loop = asyncio.new_event_loop()
        chunks = self.client.tail_job_logs(polecat_id)
        pending = ""
        try:
            while True:
                try:
                    with warnings.catch_warnings():  # Ray's own aiohttp call warns on every use
                        warnings.simplefilter("ignore", DeprecationWarning)
                        chunk = loop.run_until_complete(chunks.__anext__())
                except StopAsyncIteration:
                    break
                except OSError as err:
                    raise ExecutorUnavailable(self._unreachable(err)) from None
                pending += chunk
                *lines, pending = pending.split("\n")
                yield from lines
            if pending:
                yield pending
        finally:
            loop.run_until_complete(chunks.aclose())
            loop.close()

    def reap(self) -> list[Polecat]:
        """Keep finished jobs' logs and records under ``runtime/workers/``, then delete them from Ray."""
        reaped = []
        for job in self._town_jobs():
            if str(job.status) not in _TERMINAL:
                continue
            text = self._call("get_job_logs", self.client.get_job_logs, job.submission_id)
            fsutil.atomic_write_bytes(self._log_path(job.submission_id), text.encode("utf-8"))
            polecat = self._polecat(job)
            fsutil.append_json(
                self.town.workers_dir / FINISHED_LOG, polecat.to_json(), lock=self.town.lock_path("workers")
            )
            self._call("delete_job", self.client.delete_job, job.submission_id)
            reaped.append(polecat)
        return reaped

    # -- local files -------------------------------------------------------------
    def _log_path(self, polecat_id: str) -> Path:
        return self.town.workers_dir / f"{polecat_id}.log"

    def _finished(self) -> list[dict]:
        return read_finished(self.town.workers_dir / FINISHED_LOG)

    def finished(self) -> list[Polecat]:
        """Reaped jobs, oldest first, as recorded when they were deleted from Ray."""
        return [Polecat(**{k: record[k] for k in Polecat.__dataclass_fields__ if k in record})
                for record in self._finished()]


def _first_line(err: Exception) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    useful = [line for line in lines if "Error:" in line] or lines
    return (useful[-1] if useful else type(err).__name__).strip()
