"""A real single-node Ray cluster for the Ray executor tests.

``ray start --head --block`` runs in its own process group with every port
chosen free (so it never collides with another cluster on the machine), a
short private temp dir (Ray's unix sockets must fit in 107 bytes), two CPUs
and two ``agent_slot`` resources.  The fixture waits until the Jobs API
answers, and at teardown ends exactly the process group it started — not
``ray stop``, which would stop every Ray process of the user on the machine.

Ray is an optional extra; these tests FAIL (they do not skip) when it is
missing, because CI installs ``git-sluice[ray]`` and a silent skip would hide a
broken executor.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

AGENT_SLOTS = 2
START_TIMEOUT = 120.0


def require_ray():
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as err:
        pytest.fail(
            f"Ray is not importable ({err}); the Ray executor tests need the extra: pip install -e '.[ray]'"
        )
    return JobSubmissionClient


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RayCluster:
    address: str  # the dashboard (Jobs API) address
    process: subprocess.Popen
    temp_dir: Path

    def client(self):
        return require_ray()(self.address)


def _ray_binary() -> str:
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        pytest.fail("the `ray` command is not installed beside the test interpreter: pip install -e '.[ray]'")
    return found


def start_cluster() -> RayCluster:
    require_ray()
    temp_dir = Path(tempfile.mkdtemp(prefix="sray", dir="/tmp"))
    base = free_port()
    worker_ports = range(base, base + 201)  # Ray refuses to start if another port falls in here
    picked: set[int] = set()

    def other_port() -> int:
        while True:
            port = free_port()
            if port not in worker_ports and port not in picked:
                picked.add(port)
                return port

    dashboard = other_port()
    ports = {
        "--port": other_port(),
        "--dashboard-port": dashboard,
        "--ray-client-server-port": other_port(),
        "--dashboard-agent-listen-port": other_port(),
        "--dashboard-agent-grpc-port": other_port(),
        "--runtime-env-agent-port": other_port(),
        "--metrics-export-port": other_port(),
        "--node-manager-port": other_port(),
        "--object-manager-port": other_port(),
    }
    argv = [
        _ray_binary(), "start", "--head", "--block",
        "--node-ip-address", "127.0.0.1",
        "--dashboard-host", "127.0.0.1",
        "--include-dashboard", "true",
        "--num-cpus", "2",
        "--resources", json.dumps({"agent_slot": AGENT_SLOTS}),
        "--object-store-memory", str(80 * 1024 * 1024),
        "--temp-dir", str(temp_dir),
        "--min-worker-port", str(base), "--max-worker-port", str(base + 200),
        "--disable-usage-stats",
    ]  # fmt: skip
    for flag, port in ports.items():
        argv += [flag, str(port)]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    log = open(temp_dir / "ray-start.log", "wb")  # noqa: SIM115 - lives as long as the cluster
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    cluster = RayCluster(f"http://127.0.0.1:{dashboard}", process, temp_dir)
    deadline = time.monotonic() + START_TIMEOUT
    last = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            cluster.client().list_jobs()
            return cluster
        except Exception as err:  # not up yet: connection refused, 5xx while the agent starts
            last = err
            time.sleep(0.5)
    output = (temp_dir / "ray-start.log").read_text(errors="replace")[-3000:]
    stop_cluster(cluster)
    pytest.fail(f"the Ray head did not come up within {START_TIMEOUT:g}s ({last})\n{output}")


def stop_cluster(cluster: RayCluster) -> None:
    """End what this fixture started: ``ray start`` first, then any descendant left over.

    ``ray start --block`` shuts its cluster down when it gets SIGTERM.  Ray's
    workers run in sessions of their own, so the leftovers are found as
    descendants of the process we started (collected before it ends), by pid.
    """
    family = _descendants(cluster.process.pid)
    try:
        cluster.process.terminate()
        cluster.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        cluster.process.kill()
        cluster.process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in family):
        time.sleep(0.2)
    for pid in family:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    return children


def _descendants(pid: int) -> list[int]:
    children, out, queue = _children_map(), [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            out.append(child)
            queue.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] not in ("Z", "X")


@pytest.fixture(scope="session")
def ray_cluster():
    cluster = start_cluster()
    yield cluster
    stop_cluster(cluster)
