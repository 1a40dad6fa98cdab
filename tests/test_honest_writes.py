"""No acknowledgement is false: a change the store refuses (read-only, full) exits 1 naming the town
database and saying nothing was changed, and indeed nothing was.

A read-only or full disk is real here (a small tmpfs, tests/helpers/storage.py), skipped where mounting
is not permitted.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import Cli
from helpers.scheduler import item, write_items
from helpers.storage import fill, small_disk

ITEMS = [f"al-{n}" for n in range(1, 6)]
#: Each command that changes the queue or the scheduler's state, as the CLI takes it.
CHANGES = {
    "clear": ["scheduler", "clear"],
    "clear --item": ["scheduler", "clear", "--item", "al-2"],
    "pause": ["scheduler", "pause"],
    "sling": ["sling", "al-6", "alpha"],
    "throttle": ["scheduler", "throttle", "--until", "10m"],
    "item create": ["item", "create", "alpha", "--title", "more"],
}


@pytest.fixture
def mounted(tmp_path: Path, town_dir: Path, rig, capacity):
    """The town, with five items queued, moved onto a tmpfs of its own; yields (cli, mount point)."""
    capacity(2)
    write_items(town_dir, "alpha", [item(i) for i in [*ITEMS, "al-6"]])
    Cli(town_dir).run("sling", *ITEMS, "alpha")
    with small_disk(tmp_path / "disk", "8m") as disk:
        shutil.copytree(town_dir / ".sluice", disk / "town" / ".sluice", symlinks=True)
        yield Cli(disk / "town", isolated=True), disk  # each command a process: none holds the mount


def remount(disk: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(disk)], check=True, capture_output=True)


def queued(cli: Cli) -> list[str]:
    """The contexts queued, read by a command of its own (a connection kept here would hold the mount)."""
    return sorted(row["context_id"] for row in cli.json("scheduler", "list"))


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_on_a_read_only_store_is_refused_by_name_and_changes_nothing(mounted, change):
    cli, disk = mounted
    before = queued(cli)
    paused = cli.json("scheduler", "status")["paused"]
    remount(disk, "ro")
    done = cli.run(*CHANGES[change], check=False)
    remount(disk, "rw")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert str(cli.town / ".sluice") in done.stderr, done.stderr  # the file that refused, by name
    if "town.db" in done.stderr:
        assert "nothing was changed" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert not done.stdout.strip() or "empty" not in done.stdout.lower()
    assert queued(cli) == before and len(before) == len(ITEMS)
    assert cli.json("scheduler", "status")["paused"] == paused


@pytest.mark.parametrize("change", ["clear", "clear --item"])
def test_a_clear_on_a_full_disk_is_refused_by_name_and_clears_nothing(mounted, change):
    cli, disk = mounted
    before = queued(cli)
    filler = fill(disk)
    done = cli.run(*CHANGES[change], check=False)
    filler.unlink()
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "town.db" in done.stderr and "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert "already empty" not in done.stdout and "No sling context" not in done.stdout
    assert queued(cli) == before
