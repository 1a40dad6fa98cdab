"""The suite runs on a fresh clone: data from outside the repository is optional and says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import helpers
from helpers import BEADS_DATA_VAR, ROOT

NEEDS_DATA = "tests/test_town.py::test_rig_add_detects_a_beads_export_and_reads_it_read_only"


def test_the_beads_exports_come_from_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(BEADS_DATA_VAR, str(tmp_path))
    assert helpers.beads_data() == tmp_path.resolve()


def test_without_the_variable_they_are_looked_for_beside_the_clone(monkeypatch):
    monkeypatch.delenv(BEADS_DATA_VAR, raising=False)
    found = helpers.beads_data()
    assert found.parts[-3:] == ("shared", "data", "beads")
    assert not found.is_relative_to(ROOT)


def test_a_test_that_needs_absent_exports_skips_naming_the_variable(tmp_path: Path):
    env = {**os.environ, BEADS_DATA_VAR: str(tmp_path / "nowhere")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", NEEDS_DATA, "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist",
         f"--basetemp={tmp_path / 'inner'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    reasons = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(reasons) == 1 and BEADS_DATA_VAR in reasons[0] and str(tmp_path / "nowhere") in reasons[0]
