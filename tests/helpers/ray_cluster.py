"""A real Ray cluster for the Ray executor tests: a head, and a second node that sees less.

``ray start --head --block`` runs in its own process group with every port
chosen free (so it never collides with another cluster on the machine), a
short private temp dir (Ray's unix sockets must fit in 107 bytes), two CPUs
and two ``agent_slot`` resources.  The fixture waits until the Jobs API
answers, and at teardown ends exactly the process group it started — not
``ray stop``, which would stop every Ray process of the user on the machine.

:func:`add_node` joins a second node with ``ray start --address …`` inside a
mount namespace of its own (``unshare -m``) where the given directories are
covered by empty tmpfs mounts: a machine that shares nothing with the town
but the loopback network.  Both nodes listen on 127.0.0.1 only.

``ray start`` itself gives up when its raylet has not registered with the
GCS within a fixed 30 s, which a loaded machine can exceed; both the head and
the node are then started again, with fresh ports, until their own deadline.

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
#: A node joining a loaded machine waits for the head's GCS, which can stall for a minute or more.
JOIN_TIMEOUT = 300.0


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
    gcs: str = ""  # what another node joins: 127.0.0.1:<port>

    def client(self):
        return require_ray()(self.address)


@dataclass
class RayNode:
    """A node joined to a cluster; ``node_id`` is how Ray (and a run record's ``host``) names it."""

    node_id: str
    process: subprocess.Popen
    log_path: Path


def _ray_binary() -> str:
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        pytest.fail("the `ray` command is not installed beside the test interpreter: pip install -e '.[ray]'")
    return found


#: How soon the head calls a silent node dead (Ray's default is about a minute): a node killed by a
#: test is noticed in seconds, and a loaded machine still answers a check within its timeout.
HEALTH_CHECKS = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "5000",
                 "RAY_health_check_failure_threshold": "5"}

#: A mount namespace of the node's own: root makes one directly; anyone else inside a user namespace
#: where they are root (where the kernel allows unprivileged user namespaces).
NAMESPACE = ("--mount",) if os.geteuid() == 0 else ("--map-root-user", "--mount")
#: Run inside ``unshare -m``: cover each directory before ``--`` with an empty tmpfs, then become
#: the command after it.  The mounts are private to the namespace (unshare's default propagation).
HIDE = 'while [ "$1" != -- ]; do mount -t tmpfs -o size=1m sluice-hidden "$1" || exit 1; shift; done; ' \
       'shift; exec "$@"'


def _node_ports(head: bool) -> tuple[list[str], dict[str, int]]:
    """Every port a node opens, chosen free: its worker range and one port per listener."""
    base = free_port()
    worker_ports = range(base, base + 201)  # Ray refuses to start if another port falls in here
    picked: set[int] = set()

    def other_port() -> int:
        while True:
            port = free_port()
            if port not in worker_ports and port not in picked:
                picked.add(port)
                return port

    names = ["--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
             "--metrics-export-port", "--node-manager-port", "--object-manager-port"]
    if head:
        names += ["--port", "--dashboard-port", "--ray-client-server-port"]
    ports = {name: other_port() for name in names}
    argv = ["--min-worker-port", str(base), "--max-worker-port", str(base + 200)]
    for flag, port in ports.items():
        argv += [flag, str(port)]
    return argv, ports


def _popen(argv: list[str], log_path: Path, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(extra_env or {})}
    env.pop("RAY_ADDRESS", None)
    log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the node
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def start_cluster() -> RayCluster:
    """Start a head and return once its Jobs API answers; a ``ray start`` that gave up is run again."""
    require_ray()
    return _started("the Ray head did not come up", START_TIMEOUT, _try_head)


def _started(what: str, timeout: float, attempt):
    """``attempt(deadline)`` until it gives something up, or fail with every attempt's output."""
    deadline = time.monotonic() + timeout
    failures: list[str] = []
    while time.monotonic() < deadline:
        made, failure = attempt(deadline)
        if made is not None:
            return made
        failures.append(failure)
    pytest.fail(f"{what} within {timeout:g}s, after {len(failures)} start(s):\n" + "\n---\n".join(failures))


def _try_head(deadline: float) -> tuple[RayCluster | None, str]:
    temp_dir = Path(tempfile.mkdtemp(prefix="sray", dir="/tmp"))
    port_argv, ports = _node_ports(head=True)
    argv = [
        _ray_binary(), "start", "--head", "--block",
        "--node-ip-address", "127.0.0.1",
        "--dashboard-host", "127.0.0.1",
        "--include-dashboard", "true",
        "--num-cpus", "2",
        "--resources", json.dumps({"agent_slot": AGENT_SLOTS}),
        "--object-store-memory", str(80 * 1024 * 1024),
        "--temp-dir", str(temp_dir),
        "--disable-usage-stats",
        *port_argv,
    ]  # fmt: skip
    process = _popen(argv, temp_dir / "ray-start.log", HEALTH_CHECKS)
    cluster = RayCluster(f"http://127.0.0.1:{ports['--dashboard-port']}", process, temp_dir,
                         f"127.0.0.1:{ports['--port']}")
    last = None
    while time.monotonic() < deadline and process.poll() is None:
        try:
            cluster.client().list_jobs()
            return cluster, ""
        except Exception as err:  # not up yet: connection refused, 5xx while the agent starts
            last = err
            time.sleep(0.5)
    how = f"exited with {process.returncode}" if process.poll() is not None else "still starting"
    output = (temp_dir / "ray-start.log").read_text(errors="replace")[-3000:]
    stop_cluster(cluster)
    return None, f"{how} ({last})\n{output}"


def stop_cluster(cluster: RayCluster) -> None:
    """End what this fixture started: ``ray start`` first, then any descendant left over."""
    _end(cluster.process)
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)


def add_node(cluster: RayCluster, resources: dict[str, float], hidden: list[Path]) -> RayNode:
    """Join a node to ``cluster`` that cannot see ``hidden``; returns once the head lists it alive.

    The node shares the head's Ray temp dir: Ray reads a job's log through
    the agent of the node that ran it but from the session directory the
    head named, which only this keeps right on one machine.  (It is Ray's
    own directory, not the town's: the node still sees nothing of the town.)
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("the two-node Ray tests need `unshare` (util-linux) to hide directories from a node")
    return _started("the second Ray node did not join", JOIN_TIMEOUT,
                    lambda deadline: _try_node(unshare, cluster, resources, hidden, deadline))


def _try_node(unshare: str, cluster: RayCluster, resources: dict[str, float], hidden: list[Path],
              deadline: float) -> tuple[RayNode | None, str]:
    port_argv, _ = _node_ports(head=False)
    argv = [
        unshare, *NAMESPACE, "sh", "-c", HIDE, "sh", *map(str, hidden), "--",
        _ray_binary(), "start", "--block", "--address", cluster.gcs,
        "--node-ip-address", "127.0.0.1",
        "--num-cpus", "1",
        "--resources", json.dumps(resources),
        "--object-store-memory", str(80 * 1024 * 1024),
        "--temp-dir", str(cluster.temp_dir),
        "--disable-usage-stats",
        *port_argv,
    ]  # fmt: skip
    log_path = cluster.temp_dir / f"ray-node-{port_argv[1]}.log"
    process = _popen(argv, log_path)
    last: Exception | None = None
    while time.monotonic() < deadline and process.poll() is None:
        try:
            found = [node for node in alive_nodes(cluster) if not node["head"] and all(
                node["resources"].get(key) == value for key, value in resources.items())]
        except Exception as err:  # the state API answers 5xx while the node registers
            found, last = [], err
        if found:
            return RayNode(found[0]["node_id"], process, log_path), ""
        time.sleep(0.5)
    how = f"exited with {process.returncode}" if process.poll() is not None else "still joining"
    output = log_path.read_text(errors="replace")[-3000:]
    _end(process)
    return None, f"{how} ({last})\n{output}"


def alive_nodes(cluster: RayCluster) -> list[dict]:
    """The head's live nodes: ``node_id``, ``head`` and ``resources`` (totals) of each."""
    from ray.util.state import list_nodes

    nodes = list_nodes(address=cluster.address, timeout=30)
    return [{"node_id": n.node_id, "head": n.is_head_node, "resources": dict(n.resources_total or {})}
            for n in nodes if n.state == "ALIVE"]


def stop_node(node: RayNode, kill: bool = False) -> list[int]:
    """End the node's processes (their pids are returned); ``kill`` does it the way a machine
    disappears: SIGKILL to all of them at once, no goodbye to the head."""
    return _end(node.process, kill=kill)


def _end(process: subprocess.Popen, kill: bool = False) -> list[int]:
    """End ``process`` and every descendant it had, by pid — nothing this fixture did not start.

    ``ray start --block`` shuts its node down when it gets SIGTERM.  Ray's
    workers run in sessions of their own, so the leftovers are found as
    descendants of the process we started (collected before it ends).
    """
    family = _descendants(process.pid)
    if kill:
        for pid in [process.pid, *family]:
            _kill(pid)
    try:
        process.terminate()
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in family):
        time.sleep(0.2)
    for pid in family:
        if _alive(pid):
            _kill(pid)
    return [process.pid, *family]


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


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
