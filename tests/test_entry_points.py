"""Both installed entry points work: `sluice …` and, through git's external commands, `git sluice …`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _env() -> dict:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_git_sluice_runs_sluice(tmp_path: Path):
    town = tmp_path / "town"
    done = subprocess.run(["git", "sluice", "init", str(town), "--json"], env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (town / ".sluice" / "config.json").is_file()
    listed = subprocess.run(["git", "sluice", "--town", str(town), "rig", "list", "--json"], env=_env(),
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and listed.stdout.strip() == "[]"


def test_usage_errors_exit_2_and_domain_errors_exit_1(tmp_path: Path):
    sluice = str(Path(sys.executable).parent / "sluice")
    usage = subprocess.run([sluice, "item", "ready", "--limit", "many"], capture_output=True, text=True,
                           env=_env(), cwd=tmp_path, timeout=60)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    lonely = subprocess.run([sluice, "item", "ready"], capture_output=True, text=True, cwd=tmp_path,
                            env={**_env(), "SLUICE_TOWN": ""}, timeout=60)
    assert lonely.returncode == 1
    assert lonely.stderr.startswith("error: no sluice town found")
