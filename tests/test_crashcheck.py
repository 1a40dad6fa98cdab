"""The crash-state explorer finds a planted durability bug, so its clean sweep in CI means something."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import crashcheck  # noqa: E402


@pytest.fixture(autouse=True)
def _strace():
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (scripts/test installs it)")


@pytest.mark.slow
def test_a_sling_without_fsync_is_caught_losing_an_acknowledged_context(tmp_path):
    scenario = crashcheck.scenarios(tmp_path)["sling"]
    outcome = crashcheck.explore(scenario, tmp_path / "work", plant="no-fsync")
    assert outcome.states > 0
    assert any("acknowledged sling lost" in v for v in outcome.violations), outcome.violations


def test_the_disk_model_keeps_only_what_was_synced():
    disk = crashcheck.Disk()
    Op = crashcheck.Op
    for op in (Op("create", "/t/.sluice/log"), Op("write", "/t/.sluice/log", data=b"a\n"),
               Op("fsync", "/t/.sluice/log"), Op("fsync", "/t/.sluice"),
               Op("write", "/t/.sluice/log", data=b"bb\n")):
        disk.apply(op)
    states = dict(disk.states())
    assert states["durable only"] == {"/t/.sluice/log": b"a\n"}
    assert states["unsynced torn log"] == {"/t/.sluice/log": b"a\nb"}
    assert states["nothing lost"] == {"/t/.sluice/log": b"a\nbb\n"}


def test_a_rename_is_durable_only_once_its_directory_is_synced():
    disk = crashcheck.Disk()
    Op = crashcheck.Op
    for op in (Op("create", "/t/.sluice/tmp"), Op("write", "/t/.sluice/tmp", data=b"new"),
               Op("fsync", "/t/.sluice/tmp"), Op("rename", "/t/.sluice/tmp", "/t/.sluice/state.json")):
        disk.apply(op)
    assert dict(disk.states())["durable only"] == {}
    disk.apply(Op("fsync", "/t/.sluice"))
    assert dict(disk.states())["durable only"] == {"/t/.sluice/state.json": b"new"}
