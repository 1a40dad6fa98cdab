"""The validated plain copies of the config and the policy: kept in the town database, only ever a shortcut.

A hot command whose ``config.json`` (or policy) was validated before reads
the plain copy and never imports pydantic.  The copy is a ``derived`` row of
the town database; a town whose database is missing, cannot be opened,
refuses the write or is busy with another writer validates the file instead
and answers all the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import Cli
from helpers.scheduler import configure, database_dump
from helpers.storage import small_disk
from sluice.store.database import db as dbmod
from sluice.store.files import configcache
from sluice.store.files.town import Town

# Runs a command as `sluice` does and says, last on stderr, whether pydantic was imported.
PROBE = """
import sys
sys.argv = ["sluice", *sys.argv[1:]]
from sluice.__main__ import main
try:
    main()
finally:
    sys.stderr.write("PYDANTIC=" + str("pydantic" in sys.modules) + "\\n")
"""


def _validated(town: Path, *args: str) -> bool:
    """Whether ``sluice ARGS`` in a process of its own validated a file (imported pydantic) to answer."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          env={**os.environ, "SLUICE_TOWN": str(town)}, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stderr.strip().splitlines()[-1] == "PYDANTIC=True"


def _kept(town: Path) -> dict[str, str]:
    """The copies the town database holds, by name (read with a connection of its own)."""
    conn = sqlite3.connect(dbmod.database_path(town / ".sluice"))
    try:
        return dict(conn.execute("SELECT name, value FROM derived WHERE name LIKE '%-cache'"))
    finally:
        conn.close()


def _config_copy(town: Path) -> str | None:
    return _kept(town).get(configcache.NAMES[configcache.CONFIG])


def test_the_copies_are_rows_of_the_town_database_and_spare_hot_commands_pydantic(cli, town_dir):
    cli.run("scheduler", "status", isolated=True)  # the first read validates and keeps the copies
    cli.run("schedule", "next", "--preview", isolated=True)
    assert set(_kept(town_dir)) == {"config-cache", "policy-cache"}
    assert sorted(p.name for p in (town_dir / ".sluice" / "runtime").glob("*.json")) == []
    assert not _validated(town_dir, "scheduler", "status", "--json")
    assert not _validated(town_dir, "schedule", "next", "--preview", "--json")
    assert not _validated(town_dir, "item", "ready", "--json")


def test_a_copy_left_in_a_file_by_an_older_sluice_answers_nothing(cli, town_dir):
    """Keyed by this very file and validator, the old file copy names a rig the config has not: unread."""
    files = Town(town_dir)
    raw = files.config_path.read_bytes()
    ghost = {**json.loads(raw), "rigs": {"ghost": {"repo": "/nowhere", "prefix": "gh", "items": None}}}
    (files.runtime / "config-cache.json").write_text(
        json.dumps({"key": configcache._key(configcache.CONFIG, raw), "config": ghost}))
    cli.run("scheduler", "status", isolated=True)
    assert list(Town(town_dir).config.rigs) == []
    assert cli.json("rig", "list") == []


def test_a_town_without_a_database_validates_its_config_and_is_given_none(town_dir):
    sluice_dir = town_dir / ".sluice"
    for path in sluice_dir.glob("town.db*"):
        path.unlink()
    config = Town(town_dir).config
    assert type(config).__name__ == "TownConfig"  # validated, not a plain copy
    assert not dbmod.database_path(sluice_dir).exists()


@pytest.mark.parametrize("damage", ["garbage", "newer schema"])
def test_a_database_that_cannot_be_opened_costs_the_copy_not_the_config(cli, town_dir, damage):
    path = dbmod.database_path(town_dir / ".sluice")
    configure(town_dir, "scheduler.max_polecats", "4")  # bytes with no copy yet
    if damage == "garbage":
        for extra in path.parent.glob("town.db-*"):
            extra.unlink()
        path.write_bytes(b"not a database at all " * 400)
    else:
        raw = sqlite3.connect(path)
        raw.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                    (str(dbmod.SCHEMA_VERSION + 1),))
        raw.commit()
        raw.close()
    def held() -> bytes | str:  # garbage by its bytes, a database by what it holds (a checkpoint moves bytes)
        return path.read_bytes() if damage == "garbage" else database_dump(path)

    before = held()
    ready = cli.run("item", "ready", "--json", check=False, isolated=True)  # it reads no database
    assert (ready.returncode, ready.stdout.strip(), ready.stderr) == (0, "[]", "")
    assert json.loads(cli.run("config", "get", "scheduler.max_polecats", isolated=True).stdout) == 4
    status = cli.run("scheduler", "status", check=False, isolated=True)  # it does: refused as before
    assert status.returncode == 1 and "Traceback" not in status.stderr
    assert held() == before


@contextlib.contextmanager
def _read_only(mount: Path):
    done = subprocess.run(["mount", "-o", "remount,ro", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot remount {mount} read-only here ({done.stderr.strip() or done.returncode})")
    try:
        yield
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(mount)], capture_output=True, check=False)


def test_a_read_only_database_keeps_no_copy_and_every_read_answers(tmp_path):
    with small_disk(tmp_path / "disk", "8m") as disk:
        town = disk / "town"
        cli = Cli(town, isolated=True)  # no connection of this process keeps a file of the disk open
        cli.run("init", str(town), cwd=disk)
        config = town / ".sluice" / "config.json"
        data = json.loads(config.read_text())
        cli.run("scheduler", "status")  # the copy kept
        kept = _config_copy(town)
        cli.run("scheduler", "status")  # a hot command leaves the database's -shm file, which a read needs
        data["scheduler"]["max_polecats"] = 3
        config.write_text(json.dumps(data))  # bytes no one validated yet
        with _read_only(disk):
            for argv in (("scheduler", "status", "--json"), ("item", "ready", "--json"),
                         ("schedule", "next", "--preview", "--json")):
                done = cli.run(*argv, check=False)
                assert done.returncode == 0 and "Traceback" not in done.stderr, (argv, done.stderr)
            assert json.loads(cli.run("scheduler", "status", "--json").stdout)["max_polecats"] == 3
            assert _validated(town, "scheduler", "status", "--json")  # no copy could be kept: validated
        assert _config_copy(town) == kept


def test_a_copy_waits_for_no_other_writer(cli, town_dir):
    configure(town_dir, "scheduler.max_polecats", "5")
    before = _config_copy(town_dir)
    locker = sqlite3.connect(dbmod.database_path(town_dir / ".sluice"), timeout=0)
    locker.execute("BEGIN IMMEDIATE")  # another writer holds the write lock (a long sling, say)
    try:
        started = time.monotonic()
        config = Town(town_dir).config
        assert time.monotonic() - started < 30  # not the database's busy timeout of a minute
        assert type(config).__name__ == "TownConfig" and config.scheduler.max_polecats == 5
    finally:
        locker.rollback()
        locker.close()
    assert _config_copy(town_dir) == before  # nothing kept while the other writer held the lock
    assert type(Town(town_dir).config).__name__ == "TownConfig"  # the next read keeps it
    assert type(Town(town_dir).config).__name__ == "PlainConfig"


def test_a_file_validated_again_unchanged_writes_nothing(town_dir):
    """The daemon validates the config every tick: an unchanged copy is not written again."""
    files = Town(town_dir)
    files.load_config()
    changes = files.db.conn.total_changes
    files.load_config()
    assert files.db.conn.total_changes == changes


def test_a_validation_inside_a_write_transaction_adds_nothing_to_it(town_dir):
    configure(town_dir, "scheduler.max_polecats", "6")
    files = Town(town_dir)
    with files.db.transaction() as conn:
        changes = conn.total_changes
        files.load_config()
        assert conn.total_changes == changes  # the caller's change stays its own
    files.load_config()
    assert files.db.conn.total_changes == changes + 1  # kept by the next validation outside one


def test_keeping_a_copy_leaves_the_connection_durable_and_patient_for_the_changes_after_it(town_dir):
    """The copy is committed without an fsync or a wait; every other change still has both."""
    configure(town_dir, "scheduler.max_polecats", "7")
    files = Town(town_dir)
    changes = files.db.conn.total_changes
    files.load_config()
    conn = files.db.conn
    assert conn.total_changes == changes + 1  # kept
    assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    assert conn.execute("PRAGMA busy_timeout").fetchone() == (dbmod.BUSY_TIMEOUT_MS,)
