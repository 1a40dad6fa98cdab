"""The local watcher never leaves a polecat running that it could not record.

On a full disk the watcher cannot write the started record that tells the next
cycle a polecat is running; were the polecat started anyway, the launch would be
reported failed while the agent ran, and the retry would launch it a second time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.storage import fill, small_disk
from sluice.executors import watch


@pytest.fixture
def full_disk(tmp_path: Path):
    with small_disk(tmp_path / "disk", "1m") as disk:
        fill(disk)
        yield disk


def _watch(started: Path, exit_file: Path, marker: Path) -> tuple[str, int]:
    """Run the watcher on a polecat that leaves ``marker``; what it reported and its exit status."""
    read_end, write_end = os.pipe()
    polecat = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    process = subprocess.Popen([sys.executable, "-I", watch.__file__, str(exit_file), str(started),
                                str(write_end), "--", *polecat], pass_fds=(write_end,),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read().decode()
    return answer, process.wait(timeout=60)


def test_a_launch_the_watcher_cannot_record_is_refused_before_the_polecat_starts(full_disk, tmp_path):
    marker = tmp_path / "ran"
    answer, status = _watch(full_disk / "pc.started", full_disk / "pc.exit", marker)
    assert answer == "E28" and status == 127  # ENOSPC, named to the launcher as a refused launch
    time.sleep(0.5)  # a polecat started by mistake would have left its marker by now
    assert not marker.exists()
    assert not (full_disk / "pc.started").exists() and not (full_disk / "pc.started.tmp").exists()


def test_with_room_the_record_is_written_and_the_polecat_runs(tmp_path):
    marker = tmp_path / "ran"
    answer, status = _watch(tmp_path / "pc.started", tmp_path / "pc.exit", marker)
    assert answer.startswith("P") and status == 0
    assert marker.exists() and (tmp_path / "pc.exit").exists()
    import json

    record = json.loads((tmp_path / "pc.started").read_text())
    assert record["pid"] == int(answer[1:]) and not (tmp_path / "pc.started.tmp").exists()


def test_a_launch_that_did_not_start_leaves_no_record_behind_when_its_log_is_full(town_files, rig, tmp_path):
    """A polecat whose watcher could not report is reported not started, its pending record removed:
    on a full disk the log line it is told in is refused, and a record left behind would be found as a
    polecat launched (and then lost) for a launch that never started."""
    from sluice.errors import ExecutorError
    from sluice.executors.base import LaunchRequest
    from sluice.executors.local import LocalExecutor

    executor = LocalExecutor(town_files)
    request = LaunchRequest(item_id="al-1", rig="alpha", title="t", context_id="al-wisp-1",
                            repo=str(tmp_path), town=str(town_files.root), argv=(sys.executable, "-c", "0"))
    record = executor._record_path("pc-full")
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text('{"id": "pc-full", "state": "pending"}')
    with small_disk(tmp_path / "disk", "1m") as disk:
        log = disk / "pc-full.log"
        log.touch()
        fill(disk)
        error = executor._not_started(request, "pc-full", log, OSError("the watcher's report was cut"))
    assert isinstance(error, ExecutorError) and not record.exists()
