"""An item source that is not a regular file holds its rig (``rig-unreadable``), never the town.

A FIFO would block a read for ever, ``/dev/zero`` fill the memory, a symbolic
link loop fail every read of the file; each is named (path and what is wrong)
and held like a malformed line, while every other rig dispatches, and every
read command (and the daemon's SIGTERM) answers at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import make_repo
from helpers.scheduler import configure, issues_path, item, sleeper, wait_for, write_items

#: What each hostile thing is called in the reason the rig is held for.
SAID = {
    "fifo": "is a FIFO (named pipe), not a regular file",
    "dev-zero": "is a character device",
    "loop": "is a symbolic link loop",
    "socket": "is a socket, not a regular file",
    "large": "is larger than",
}


def make_hostile(path: Path, kind: str) -> socket.socket | None:
    """Put a ``kind`` where ``path`` was; what must stay open for it to last (a bound socket)."""
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "loop":
        path.symlink_to(path.name + ".other")
        path.with_name(path.name + ".other").symlink_to(path.name)
    elif kind == "socket":
        # bound at the path itself, which must be short (an AF_UNIX path fits in 108 bytes)
        held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        held.bind(str(path))
        return held
    elif kind == "large":
        with open(path, "wb") as fh:
            fh.write(json.dumps(item("ga-2")).encode() + b"\n")
            fh.truncate(2 * (1 << 30) + 1)  # sparse: 2 GiB of nothing, no disk spent
    return None


@pytest.fixture
def hostile_dir(cli, rigs, capacity, tmp_path: Path) -> Path:
    """Rigs alpha and beta (own stores) and gamma reading an export; be-1 and ga-1 slung."""
    capacity(4, batch_size=4)
    configure(cli.town, "executor.command", sleeper(0.1))
    write_items(cli.town, "beta", [item("be-1")])
    repo = make_repo(tmp_path / "repos" / "gamma")
    # A short directory: a socket's path must fit in 108 bytes.
    export = Path(os.environ.get("TMPDIR", "/tmp")) / f"sx-{os.getpid()}-{tmp_path.name[-12:]}" / "e.jsonl"
    export.parent.mkdir(parents=True, exist_ok=True)
    export.write_text(json.dumps(item("ga-1")) + "\n")
    cli.run("rig", "add", "gamma", str(repo), "--prefix", "ga", "--items", str(export))
    cli.run("sling", "be-1", "beta")
    cli.run("sling", "ga-1", "gamma")
    yield export
    for leftover in export.parent.iterdir():
        if leftover.is_fifo():  # a reader still waiting on it (a failing run) gets its end of file
            with contextlib.suppress(OSError):
                os.close(os.open(leftover, os.O_WRONLY | os.O_NONBLOCK))
        leftover.unlink()
    export.parent.rmdir()


def assert_held(report: dict, item_id: str, path: Path, said: str) -> None:
    assert [row["item_id"] for row in report["launched"]] == ["be-1"]
    [held] = report["held"]
    assert held["item_id"] == item_id and held["reason"] == "rig-unreadable"
    assert str(path) in held["detail"] and said in held["detail"], held["detail"]


@pytest.mark.parametrize("kind", list(SAID))
def test_a_hostile_export_holds_its_rig_and_every_read_answers(cli, hostile_dir, kind):
    export = hostile_dir
    keep = make_hostile(export, kind)
    try:
        report = json.loads(cli.run("scheduler", "run", "--json", timeout=20).stdout)
        assert_held(report, "ga-1", export, SAID[kind])
        status = json.loads(cli.run("scheduler", "status", "--json", timeout=20).stdout)
        assert str(export) in status["unreadable"]["gamma"] and SAID[kind] in status["unreadable"]["gamma"]
        rows = json.loads(cli.run("scheduler", "list", "--json", timeout=20).stdout)
        assert [row["held"] for row in rows if row["id"] == "ga-1"] == ["rig-unreadable"]
        explained = json.loads(cli.run("scheduler", "explain", "ga-1", "--json", timeout=20).stdout)
        assert [r["code"] for r in explained["reasons"]] == ["rig-unreadable"]
        assert str(export) in explained["reasons"][0]["detail"]
        snapshot = json.loads(cli.run("snapshot", "--json", timeout=20).stdout)
        assert snapshot["rigs"]["gamma"]["error"].startswith("held (rig-unreadable): ")
        assert "error" not in snapshot["rigs"]["beta"]
    finally:
        if keep is not None:
            keep.close()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "loop"])
def test_a_hostile_own_store_holds_its_rig(cli, hostile_dir, kind):
    store = issues_path(cli.town, "alpha")
    write_items(cli.town, "alpha", [item("al-1")])
    cli.run("sling", "al-1", "alpha")
    make_hostile(store, kind)
    report = json.loads(cli.run("scheduler", "run", "--json", timeout=20).stdout)
    assert sorted(row["item_id"] for row in report["launched"]) == ["be-1", "ga-1"]
    held = {row["item_id"]: row for row in report["held"]}
    assert held["al-1"]["reason"] == "rig-unreadable" and str(store) in held["al-1"]["detail"]
    assert SAID[kind] in held["al-1"]["detail"]


def test_a_source_larger_than_the_limit_is_named_not_read(cli, hostile_dir, monkeypatch):
    from sluice.store.files import fsutil

    limit = issues_path(cli.town, "beta").stat().st_size + 10  # beta's own store stays within it
    monkeypatch.setattr(fsutil, "MAX_SOURCE_BYTES", limit)
    hostile_dir.write_text("".join(json.dumps(item(f"ga-{n}")) + "\n" for n in range(1, 5)))
    report = cli.json("scheduler", "run")
    assert_held(report, "ga-1", hostile_dir, f"is larger than {limit} bytes")


def test_a_source_that_grows_while_it_is_read_stops_at_the_limit(tmp_path, monkeypatch):
    from sluice.store.files import fsutil

    monkeypatch.setattr(fsutil, "MAX_SOURCE_BYTES", 100)
    path = tmp_path / "grows.jsonl"
    path.write_bytes(b"x" * 50)
    with fsutil.open_source(path) as fh, open(path, "ab") as writer:
        writer.write(b"y" * 200)  # appended after the size was checked
        writer.flush()
        with pytest.raises(fsutil.NotRegularFile, match="grew past"):
            fh.read()


def test_an_items_command_printing_without_end_is_cut_off(cli, tmp_path, monkeypatch):
    from sluice.errors import SourceFailed
    from sluice.store.files import fsutil
    from sluice.store.files.town import Town
    from sluice.store.items.rigs import add_rig

    monkeypatch.setattr(fsutil, "MAX_SOURCE_BYTES", 1 << 16)
    code = ("import sys, time\nwhile True:\n"
            "    sys.stdout.write('x' * 65536)\n    sys.stdout.flush()\n    time.sleep(0.01)")
    endless = [sys.executable, "-c", code]  # slowly, so that even unbounded it fills no disk
    repo = make_repo(tmp_path / "repos" / "delta")
    started = time.monotonic()
    with pytest.raises(SourceFailed, match="printed more than 64 KiB and was killed"):
        add_rig(Town(cli.town), "delta", repo, "de", items_command=endless)
    assert time.monotonic() - started < 20  # cut off at the limit, not at the command's timeout (30 s)


def test_the_daemon_answers_sigterm_while_an_export_is_a_fifo(cli, hostile_dir):
    make_hostile(hostile_dir, "fifo")
    env = {**os.environ, "SLUICE_TOWN": str(cli.town)}
    daemon = subprocess.Popen([sys.executable, "-m", "sluice", "daemon", "--interval", "0.2"], cwd=cli.town,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        log = cli.town / ".sluice" / "runtime" / "daemon.log"
        wait_for(lambda: log.exists() and "tick 2:" in log.read_text(), timeout=30)
        started = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        _out, err = daemon.communicate(timeout=10)
        assert time.monotonic() - started < 5, err
        assert daemon.returncode == 0 and "daemon stopped" in err
        assert "held 1 (rig-unreadable: ga-1)" in log.read_text()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def test_the_daemon_answers_sigterm_in_the_middle_of_a_tick(cli, rigs, tmp_path):
    """A tick that cannot end soon (an items command that hangs) is cut short by SIGTERM."""
    script = tmp_path / "export.py"
    script.write_text(
        "import json, os, sys, time\n"
        "flag = sys.argv[1]\n"
        "if os.path.exists(flag):\n"
        "    open(flag + '.started', 'w').close()\n"
        "    time.sleep(60)\n"
        f"print(json.dumps({item('de-1')!r}))\n"
    )
    flag = tmp_path / "hang"
    repo = make_repo(tmp_path / "repos" / "delta")
    command = json.dumps([sys.executable, str(script), str(flag)])
    cli.run("rig", "add", "delta", str(repo), "--prefix", "de", "--items-command", command)
    configure(cli.town, "items.command_timeout", "300s")
    flag.touch()
    (cli.town / ".sluice" / "runtime" / "sources" / "delta.jsonl").unlink()  # due at the first tick
    env = {**os.environ, "SLUICE_TOWN": str(cli.town)}
    daemon = subprocess.Popen([sys.executable, "-m", "sluice", "daemon", "--interval", "60"], cwd=cli.town,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: Path(str(flag) + ".started").exists(), timeout=30)  # the tick is in the command
        started = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        _out, err = daemon.communicate(timeout=20)
        assert time.monotonic() - started < 5, err
        assert daemon.returncode == 0 and "daemon stopped" in err
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


@pytest.mark.parametrize("kind", ["fifo", "loop", "dev-zero"])
def test_rig_add_names_an_export_that_is_not_a_regular_file(cli, tmp_path, kind):
    repo = make_repo(tmp_path / "repos" / "delta")
    export = tmp_path / "export.jsonl"
    export.write_text(json.dumps(item("de-1")) + "\n")
    make_hostile(export, kind)
    done = cli.run("rig", "add", "delta", str(repo), "--items", str(export), check=False, timeout=20)
    assert done.returncode != 0 and str(export) in done.stderr and SAID[kind] in done.stderr, done.stderr


@pytest.mark.parametrize("where", ["HEAD", "worktrees/wt/gitdir"])
def test_a_fifo_in_a_rigs_git_directory_makes_it_cold_not_stuck(tmp_path, where):
    repo = make_repo(tmp_path / "repos" / "delta")
    subprocess.run(["git", "worktree", "add", "-q", "-b", "wt", str(tmp_path / "wt")], cwd=repo, check=True,
                   capture_output=True)
    fifo = repo / ".git" / where
    fifo.unlink()
    os.mkfifo(fifo)
    code = ("import sys\nfrom pathlib import Path\nfrom sluice.store.git import gitview\n"
            "print(gitview.is_warm(Path(sys.argv[1])), gitview.warmth_stamp(Path(sys.argv[1])) is not None)")
    done = subprocess.run([sys.executable, "-c", code, str(repo)], capture_output=True, text=True, timeout=20)
    assert done.stdout.split() == ["False", "True"], done.stderr
    if where == "HEAD":
        assert f"{fifo}: is a FIFO (named pipe), not a regular file" in done.stderr


STUCK_TICK = """
import sqlite3, sys
from pathlib import Path
from sluice.store.files.town import Town
from sluice.scheduler.unattended.daemon import Daemon

town, database, started = sys.argv[1:]
holder = sqlite3.connect(database, isolation_level=None)
holder.execute("BEGIN EXCLUSIVE")
waiter = sqlite3.connect(database, timeout=120, isolation_level=None)
daemon = Daemon(Town(Path(town)), interval=60)

def stuck():
    open(started, "w").close()
    waiter.execute("BEGIN EXCLUSIVE")  # SQLite's busy wait, in C: no Python signal handler runs there
    return True

daemon.tick = stuck
sys.exit(daemon.run())
"""


def test_a_tick_stuck_where_no_handler_runs_still_ends_the_daemon(cli, tmp_path):
    started = tmp_path / "started"
    env = {**os.environ, "SLUICE_TOWN": str(cli.town)}
    argv = [sys.executable, "-c", STUCK_TICK, str(cli.town), str(tmp_path / "busy.db"), str(started)]
    daemon = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(started.exists, timeout=30)
        time.sleep(0.2)  # into SQLite's wait
        sent = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        _out, err = daemon.communicate(timeout=20)
        assert time.monotonic() - sent < 5, err
        assert daemon.returncode == 128 + signal.SIGTERM and "did not let go" in err, err
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
