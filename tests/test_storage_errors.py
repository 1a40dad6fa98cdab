"""Storage refusals (a full disk, an unwritable file) are named errors; a command reports what it did.

A full disk is real here: a small tmpfs (tests/helpers/storage.py), skipped
where mounting is not permitted.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from helpers import Cli
from helpers.scheduler import add_rig, configure, ephemeral_path, events, item, open_contexts, write_items
from helpers.storage import fill, small_disk
from sluice.errors import StorageError
from sluice.store import fsutil


@pytest.fixture
def disk(tmp_path: Path):
    with small_disk(tmp_path / "disk", "2m") as path:
        yield path


def test_a_failed_append_is_cut_back_to_the_length_before_it(disk):
    log = disk / "log.jsonl"
    fsutil.append_bytes(log, b'{"id":"a"}\n')
    fill(disk, leave=4096)
    with pytest.raises(StorageError) as caught:
        fsutil.append_bytes(log, b'{"id":"b","pad":"' + b"x" * 20000 + b'"}\n')
    assert caught.value.errno == errno.ENOSPC and str(log) in str(caught.value)
    assert log.read_bytes() == b'{"id":"a"}\n'


def test_an_append_that_cannot_open_its_file_names_the_file(tmp_path):
    target = tmp_path / "events.jsonl"
    target.mkdir()  # a directory where the log belongs: refused even to root
    with pytest.raises(StorageError) as caught:
        fsutil.append_bytes(target, b"{}\n")
    assert str(target) in str(caught.value)


@pytest.fixture
def full_town(disk):
    """A town with a rig of ten items on a small disk, its index built, the disk then filled."""
    town = disk / "town"
    cli = Cli(town)
    town.mkdir()
    cli.run("init", str(town))
    add_rig(cli, disk.parent, "alpha", "al")
    configure(town, "scheduler.max_polecats", "2")  # deferred: a sling queues, the daemon launches
    write_items(town, "alpha", [item(f"al-{n}", "a task with a title " * 20) for n in range(10)])
    cli.run("item", "list", "alpha")  # the index exists before the disk fills
    return cli


def test_a_sling_of_ten_items_on_a_full_disk_queues_none_of_them(full_town, disk):
    cli = full_town
    fill(disk, leave=4096)  # room for a few of the ten contexts, not all
    done = cli.run("sling", *[f"al-{n}" for n in range(10)], "alpha", check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert str(ephemeral_path(cli.town, "alpha")) in done.stderr
    os.unlink(disk / "filler")
    assert open_contexts(cli.town, "alpha") == []
    assert events(cli.town, "Enqueued") == []
    assert json.loads(cli.run("scheduler", "status", "--json").stdout)["queued_total"] == 0
