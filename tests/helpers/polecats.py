"""A real polecat program and what the executor tests share to drive it.

The polecat is a small Python script: it reports its pid, its child's pid,
argv, cwd and ``SLUICE_*`` environment to ``<reports>/<context id>.json``,
prints a few lines, keeps a child process (``sleep``) and sleeps.  Tests use
the report to prove what ran, where, and that stopping it left no process.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import NamedTuple

from sluice.core.models import apply_config_value, parse_config_value
from sluice.executors.base import LaunchRequest
from sluice.scheduler.launch.launching import make_request
from sluice.store.files.town import Town

POLECAT = r'''
import json, os, subprocess, sys, time
reports, seconds = sys.argv[1], float(sys.argv[2])
child = subprocess.Popen(["sleep", str(seconds + 60)])
info = {
    "pid": os.getpid(),
    "sid": os.getsid(0),
    "child": child.pid,
    "argv": sys.argv[3:],
    "cwd": os.getcwd(),
    "env": {k: v for k, v in os.environ.items() if k.startswith("SLUICE_")},
}
name = os.environ["SLUICE_CONTEXT_ID"] or os.environ["SLUICE_ITEM_ID"]  # direct launches have no context
path = os.path.join(reports, name + ".json")
with open(path + ".tmp", "w") as fh:
    json.dump(info, fh)
os.replace(path + ".tmp", path)
print("polecat up for", os.environ["SLUICE_ITEM_ID"], flush=True)
print("second line", flush=True)
time.sleep(seconds)
child.kill()
print("polecat done", flush=True)
'''


class RealPolecats(NamedTuple):
    """The ``real_polecats`` fixture: the executor kind, the directory the polecat reports to, its script."""

    kind: str
    reports: Path
    script: Path


def install_polecat(directory: Path) -> tuple[Path, Path]:
    """Write the polecat script; returns (script, reports directory)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "polecat.py"
    script.write_text(POLECAT)
    reports = directory / "reports"
    reports.mkdir(exist_ok=True)
    return script, reports


def configure(town_dir: Path, settings: dict[str, str]) -> Town:
    """Set config keys in-process, exactly as `sluice config set KEY VALUE` parses and validates them."""
    town = Town(town_dir)
    for key, raw in settings.items():
        value = parse_config_value(key, raw)
        town.update_config(lambda config, key=key, value=value: apply_config_value(config, key, value))
    return Town(town_dir)


def polecat_command(script: Path, reports: Path, seconds: float) -> list[str]:
    """An ``executor.command`` template running the polecat for ``seconds``."""
    return [sys.executable, str(script), str(reports), str(seconds), "{title}", "{item_id}"]


def request(town: Town, rig: str, item_id: str, context_id: str, title: str = "a title") -> LaunchRequest:
    """The launch request the dispatcher would build for this item and context."""
    template = tuple(town.load_config().executor.command)
    return make_request(town, template, {"id": item_id, "title": title}, rig, context_id)


def wait_for(condition, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """Poll until ``condition()`` is truthy; its value is returned.  Fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def report(reports: Path, context_id: str, timeout: float = 30.0) -> dict:
    path = reports / f"{context_id}.json"
    wait_for(path.exists, timeout, what=f"polecat report {path}")
    return json.loads(path.read_text())


def gone(pid: int) -> bool:
    """True when no live process has ``pid`` (a zombie is dead, just not yet collected)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :].split()[0] in ("Z", "X")
