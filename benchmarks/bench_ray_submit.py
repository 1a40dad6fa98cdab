"""What shipping sluice's package with each Ray job costs: a submit and a job's whole life, side by side.

Usage:  python benchmarks/bench_ray_submit.py [--jobs 10] [--json]

A Ray polecat's job carries the sluice package as ``runtime_env``
``py_modules`` (so a node needs no sluice) and its argv as JSON in the
environment.  This starts a private one-node Ray head (the test suite's
helper), then submits ``--jobs`` trivial jobs of each kind, alternately so a
slow spell of a shared machine falls on both alike:

* ``env``: ``true`` with only ``env_vars`` — what a job cost before;
* ``package``: the real entrypoint, ``python3 -m sluice.executors.ray_job``,
  with the package and a spec that runs ``true`` in a directory.

For each it reports the median wall time of ``submit_job`` (the client
hashes the package directory every time; the upload happens once) and of
the job's life on the cluster, submission to end (``end_time -
start_time``: runtime-env setup, the supervisor, the entrypoint), and the
ratio package / env.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent / "src")]

from helpers.ray_cluster import start_cluster, stop_cluster  # noqa: E402
from sluice.executors.ray import PACKAGE  # noqa: E402
from sluice.executors.ray_job import ENTRYPOINT, SPEC_VAR  # noqa: E402


def one(client, kind: str, workdir: str) -> tuple[float, float]:
    """(submit ms, submission-to-end ms) of one job of ``kind``."""
    if kind == "env":
        options = {"entrypoint": "true", "runtime_env": {"env_vars": {"SLUICE_ITEM_ID": "b-1"}}}
    else:
        spec = json.dumps({"repo": workdir, "argv": ["true"]})
        env = {"SLUICE_ITEM_ID": "b-1", SPEC_VAR: spec}
        options = {"entrypoint": ENTRYPOINT, "runtime_env": {"env_vars": env, "py_modules": [PACKAGE]}}
    started = time.perf_counter()
    job = client.submit_job(**options)
    submitted = time.perf_counter() - started
    while str(client.get_job_status(job)) not in ("SUCCEEDED", "FAILED", "STOPPED"):
        time.sleep(0.05)
    info = client.get_job_info(job)
    if str(info.status) != "SUCCEEDED":
        raise SystemExit(f"a {kind} job ended {info.status}: {info.message}")
    client.delete_job(job)
    return 1000 * submitted, float(info.end_time - info.start_time)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cluster = start_cluster()
    try:
        client = cluster.client()
        workdir = tempfile.mkdtemp(prefix="sluice-bench-ray-")
        one(client, "package", workdir)  # the one upload and first unpack, not what every launch pays
        samples: dict[str, list[tuple[float, float]]] = {"env": [], "package": []}
        for _ in range(args.jobs):
            for kind in samples:
                samples[kind].append(one(client, kind, workdir))
    finally:
        stop_cluster(cluster)
    result = {kind: {"submit_ms": round(statistics.median(s for s, _ in rows), 1),
                     "life_ms": round(statistics.median(life for _, life in rows), 1)}
              for kind, rows in samples.items()}
    result["ratio"] = {key: round(result["package"][key] / result["env"][key], 2)
                       for key in ("submit_ms", "life_ms")}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'job':<10} {'submit ms':>10} {'life ms':>10}   (median of {args.jobs}, alternating)")
    for kind in ("env", "package"):
        print(f"{kind:<10} {result[kind]['submit_ms']:>10} {result[kind]['life_ms']:>10}")
    print(f"{'ratio':<10} {result['ratio']['submit_ms']:>10} {result['ratio']['life_ms']:>10}")


if __name__ == "__main__":
    main()
