"""Polecats as Ray Jobs (``executor.kind = ray``): agents spread over several machines.

Each polecat is one job submitted to the cluster's Jobs API at
``executor.ray.address``.  Ray is an optional extra (``pip install
'git-sluice[ray]'``) and is imported only when this executor is used.

* **One job per context, ever.**  The submission id is derived from the town
  and the context id, so submitting the same context again (a dispatcher that
  crashed after submitting) is refused by Ray as "already exists" and is
  treated as launched: never a second polecat.
* **The entrypoint** is a constant, ``exec python3 -m sluice.executors.ray_job``:
  Ray always runs an entrypoint through ``/bin/sh``, so nothing an item
  says goes there.  The argv (or, for a clone workspace, the argv template
  and its values) travels as JSON in the job's environment, and the sluice
  package as the job's ``py_modules`` (:mod:`sluice.executors.ray_job`).
* **Workspaces**: with ``workspace = "repo"`` the polecat runs in the rig's
  checkout, which must exist at the same path on the node; with
  ``"clone"`` the job clones the rig's remote on whichever node Ray placed
  it, so no node needs the town or the rig at any path.  A clone that fails
  there ends the job ``failed`` with git's words as its ``reason``.
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
import json
import logging
import socket
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sluice.core.clock import iso_epoch
from sluice.core.workspaces import CLONE, branch_name
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
from sluice.executors.ray_job import ENTRYPOINT, SPEC_VAR, reason_of
from sluice.store.files import fsutil

if TYPE_CHECKING:
    from sluice.store.files.town import Town

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
PACKAGE = str(Path(__file__).resolve().parents[1])  # the sluice package: each job ships it to its node
_CHATTY = ("ray.dashboard.modules.dashboard_sdk", "ray._private.runtime_env.packaging")
#: Waits (seconds) before submitting again when the head says it has no job agent free right now:
#: Ray answers so while its agent starts or is overloaded, and asks to be tried again later.  Still
#: busy after all of them (about 30 s), the head is unavailable, which blames no item.
BUSY_RETRY_WAITS = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
BUSY = "No available agent to submit job"
FRESH_BRANCHES = 9  # branch names a clone may try (``sluice/<id>``, ``-2`` …) before giving up


def resource_options(resources: dict[str, float]) -> dict[str, Any]:
    """``executor.ray.resources`` as ``submit_job`` keywords (CPU, GPU and memory have their own)."""
    own = {"CPU": "entrypoint_num_cpus", "GPU": "entrypoint_num_gpus", "memory": "entrypoint_memory"}
    options: dict[str, Any] = {own[k]: int(v) if k == "memory" else v
                               for k, v in resources.items() if k in own}
    rest = {k: v for k, v in resources.items() if k not in own}
    if rest:
        options["entrypoint_resources"] = rest
    return options


class RayExecutor:
    kind = KIND
    makes_workspaces = True  # a clone is made by the job, on its node (sluice.executors.ray_job)

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
            for name in _CHATTY:  # each submit would log that sluice's package is (already) uploaded
                logging.getLogger(name).setLevel(logging.WARNING)
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
        started = iso_epoch(job.start_time / 1000) if job.start_time else ""
        local_log = self._log_path(job.submission_id)
        reason = reason_of(job.message) if status == "FAILED" else None
        detail = {"status": status, "message": job.message,
                  "exit_code": getattr(job, "driver_exit_code", None),
                  "node_id": getattr(job, "driver_node_id", None),
                  "started_ts": job.start_time / 1000 if job.start_time else None,
                  "ended_ts": job.end_time / 1000 if getattr(job, "end_time", None) else None,
                  "address": self.address, "reason": reason}
        return Polecat(id=job.submission_id, executor=KIND, item_id=meta.get("item_id", ""),
                       rig=meta.get("rig", ""), context_id=meta.get("context_id", ""), started_at=started,
                       state=_STATES.get(status, "lost"), pid=None,
                       log_path=str(local_log) if local_log.exists() else None, detail=detail)

    # -- the protocol ------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Polecat:
        require_command(request)
        rig = self.town.rig(request.rig)
        submission_id = launch_name(self.namespace, rig.prefix, request.context_id, request.item_id)
        env = {**polecat_env(request.town, request.item_id, request.rig, request.context_id), **request.env}
        check_launchable(request.argv, env)
        env[SPEC_VAR] = json.dumps(self._spec(request, rig, submission_id), ensure_ascii=False)
        check_launchable((), {SPEC_VAR: env[SPEC_VAR]})
        metadata = {"sluice_town": self.key, "town": request.town, "rig": request.rig,
                    "item_id": request.item_id, "context_id": request.context_id}
        client = self.client
        for wait in (*BUSY_RETRY_WAITS, None):
            try:
                self._call(
                    "submit_job",
                    client.submit_job,
                    entrypoint=ENTRYPOINT,
                    submission_id=submission_id,
                    metadata=metadata,
                    runtime_env={"env_vars": env, "py_modules": [PACKAGE]},
                    **resource_options(self.resources),
                )
                break
            except ExecutorUnavailable:
                raise
            except ExecutorError as err:
                if "already exists" in str(err):
                    break  # submitted before (a crash after submit): that job is this context's polecat
                if BUSY not in str(err):
                    raise
                if wait is None:
                    raise ExecutorUnavailable(
                        f"the Ray head at {self.address} still has no job agent free after"
                        f" {sum(BUSY_RETRY_WAITS):g}s ({err}); nothing was launched or counted"
                    ) from None
                time.sleep(wait)  # the same submission id: a job the head did take is found below
        job = self._job(submission_id)
        if job is None:
            raise ExecutorError(f"Ray accepted job {submission_id} but does not report it")
        return self._polecat(job)

    def _spec(self, request: LaunchRequest, rig, submission_id: str) -> dict:
        """What the job needs to start the polecat on its node (:mod:`sluice.executors.ray_job`)."""
        config = self.town.config.executor
        if (rig.workspace or config.workspace) != CLONE:
            return {"repo": request.repo or str(rig.repo), "argv": list(request.argv)}
        if not rig.remote:
            raise ExecutorError(
                f"rig {rig.name!r} has no remote for a Ray node to clone: set one with"
                f" `sluice config set rigs.{rig.name}.remote URL`")
        names = [branch_name(config.workspace_branch, request.item_id, rig.name, attempt)
                 for attempt in range(request.attempt, request.attempt + FRESH_BRANCHES)]
        root = config.workspace_root if Path(config.workspace_root).is_absolute() else ""
        return {
            "rig": rig.name,
            "workspace": {"source": rig.remote, "branch": names[0], "fresh": names[1:], "root": root,
                          "name": submission_id, "keep": config.workspace_keep},
            "argv": list(request.argv),  # run as it is when the request has no template to fill
            "template": list(request.template),
            "values": dict(request.values),
        }

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
        return next((p for p in reversed(self.finished()) if p.context_id == context_id), None)

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

    def finished(self) -> list[Polecat]:
        """Reaped jobs, oldest first, as recorded when they were deleted from Ray."""
        records = read_finished(self.town.workers_dir / FINISHED_LOG)
        return [Polecat(**{k: record[k] for k in Polecat._spec if k in record}) for record in records]


def _first_line(err: Exception) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    useful = [line for line in lines if "Error:" in line] or lines
    return (useful[-1] if useful else type(err).__name__).strip()
