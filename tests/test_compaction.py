"""`sluice compact`: one line per live record, old closed contexts archived, nothing acknowledged lost."""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.scheduler import (
    configure,
    ephemeral_path,
    events,
    item,
    python_command,
    records,
    sluice_env,
    without_etas,
    write_items,
)

OLD = "2020-01-01T00:00:00.000000Z"


def context_line(context_id: str, item_id: str, status: str, closed_at: str | None = None) -> str:
    description = json.dumps({"version": 1, "work_bead_id": item_id, "target_rig": "alpha",
                              "enqueued_at": OLD}, separators=(",", ":"))
    record = {"id": context_id, "title": f"sling-context: {item_id}", "description": description,
              "status": status, "priority": 2, "issue_type": "task", "ephemeral": True,
              "labels": ["sluice:sling-context"], "created_at": OLD, "updated_at": closed_at or OLD}
    if closed_at:
        record.update(closed_at=closed_at, close_reason="cleared")
    return json.dumps(record, separators=(",", ":"))


def archive(town) -> list[dict]:
    path = ephemeral_path(town, "alpha").parent / "ephemeral.archive.jsonl.gz"
    if not path.exists():
        return []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture
def three_items_dir(town_dir, rig, capacity) -> Path:
    """Rig alpha with al-0…al-2 ready, in deferred mode (two polecats at once)."""
    capacity(2)
    write_items(town_dir, "alpha", [item(f"al-{n}") for n in range(3)])
    return town_dir


def test_compact_keeps_the_last_version_and_archives_only_old_closed_contexts(cli, three_items_dir):
    path = ephemeral_path(three_items_dir, "alpha")
    path.parent.mkdir(parents=True, exist_ok=True)
    recent = "2999-01-01T00:00:00.000000Z"
    path.write_text("\n".join([
        context_line("al-wisp-a", "al-0", "open"),
        context_line("al-wisp-a", "al-0", "closed", OLD),  # closed long ago: archived
        context_line("al-wisp-b", "al-1", "open"),
        context_line("al-wisp-c", "al-2", "closed", recent),  # closed recently: kept
        json.dumps({"id": "al-wisp-x", "title": "a wisp", "status": "closed", "ephemeral": True,
                    "closed_at": OLD}),  # not a context: kept whatever its age
    ]) + "\n")
    before = cli.json("scheduler", "list")
    out = cli.json("compact")
    assert out["retention"] == "168h"
    assert out["rigs"] == [{"rig": "alpha", "lines_before": 5, "lines_after": 3, "archived": 1, "removed": 2}]
    assert sorted(records(path)) == ["al-wisp-b", "al-wisp-c", "al-wisp-x"]
    assert [r["id"] for r in archive(three_items_dir)] == ["al-wisp-a"]
    assert archive(three_items_dir)[0]["status"] == "closed"
    assert without_etas(cli.json("scheduler", "list")) == without_etas(before)  # the same queue, later
    assert "alpha: 3 → 3 lines (0 closed context(s) archived)" in cli.run("compact", "--rig", "alpha").stdout


def test_compact_of_an_unknown_rig_is_an_error(cli, three_items_dir):
    done = cli.run("compact", "--rig", "nope", check=False)
    assert done.returncode != 0 and "nope" in done.stderr and "Traceback" not in done.stderr


def test_a_bad_retention_is_refused(cli, three_items_dir):
    done = cli.run("config", "set", "scheduler.compact_retention", "a week", check=False)
    assert done.returncode == 2 and "compact_retention" in done.stderr


@pytest.mark.slow
def test_compaction_loses_nothing_under_slingers_a_daemon_and_kill_9(cli, three_items_dir):
    """4 slingers and a daemon (compacting every tick) run while compactions are killed mid-way."""
    slingers, per_slinger, per_command = 4, 12, 3
    work = [f"al-s{n:03d}" for n in range(slingers * per_slinger)]
    write_items(three_items_dir, "alpha", [item(i) for i in work])
    configure(three_items_dir, "executor.command", python_command("pass"))
    configure(three_items_dir, "scheduler.batch_size", "3")
    configure(three_items_dir, "scheduler.compact_at", "100")
    configure(three_items_dir, "scheduler.compact_retention", "1h")
    # A long log of recently closed contexts makes every compaction slow enough to be killed inside.
    path = ephemeral_path(three_items_dir, "alpha")
    path.parent.mkdir(parents=True, exist_ok=True)
    recent = "2999-01-01T00:00:00.000000Z"
    with open(path, "w", encoding="utf-8") as fh:
        for n in range(30_000):
            fh.write(context_line(f"al-wisp-k{n:05d}", "al-0", "closed", recent) + "\n")
        for n in range(500):
            fh.write(context_line(f"al-wisp-o{n:03d}", "al-1", "closed", OLD) + "\n")
    cli.run("item", "list")  # build the index once
    env = {**sluice_env(), "SLUICE_TOWN": str(three_items_dir)}

    def start_daemon():
        return subprocess.Popen([sys.executable, "-m", "sluice", "daemon", "--interval", "0.2"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    script = ("import json, subprocess, sys\n"
              "ids = sys.argv[1:]\n"
              f"for start in range(0, len(ids), {per_command}):\n"
              "    out = subprocess.run([sys.executable, '-m', 'sluice', 'sling', *ids[start:start + "
              f"{per_command}], 'alpha', '--json'], capture_output=True, text=True)\n"
              "    print(out.stdout.replace('\\n', ' '), flush=True)\n")
    daemon = start_daemon()
    runners = [subprocess.Popen([sys.executable, "-c", script, *work[k::slingers]], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for k in range(slingers)]
    rng = random.Random(11)
    kills = 0
    try:
        while any(r.poll() is None for r in runners):
            compactor = subprocess.Popen([sys.executable, "-m", "sluice", "compact"], env=env,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.3, 1.2))
            if compactor.poll() is None:
                compactor.send_signal(signal.SIGKILL)
                kills += 1
            compactor.wait()
            if rng.random() < 0.3:  # the daemon too dies mid-tick now and then, and is restarted
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
                daemon = start_daemon()
    finally:
        outputs = [r.communicate(timeout=300) for r in runners]
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()
    acknowledged = {}
    for stdout, _stderr in outputs:
        for line in stdout.splitlines():
            result = json.loads(line)
            assert not result["errors"], result
            acknowledged.update({row["item_id"]: row["context_id"] for row in result["scheduled"]})
    assert sorted(acknowledged) == sorted(work)  # every item was slung once (no duplicates, none refused)
    assert kills, "no compaction was killed mid-way; the test proved nothing"

    from sluice.store.fsutil import file_lock

    # a cycle the daemon left has ended
    with file_lock(three_items_dir / ".sluice" / "runtime" / "dispatch.lock"):
        cli.run("compact")  # a compaction after the kills mends what they left
        assert not list(path.parent.glob(".ephemeral.jsonl.*.tmp"))
        log = records(path)
        assert len(log) == len(path.read_text().splitlines())  # one line per record
    kept = {**{r["id"]: r for r in archive(three_items_dir)}, **log}
    assert set(acknowledged.values()) <= kept.keys()  # every acknowledged context is somewhere
    assert {f"al-wisp-k{n:05d}" for n in range(30_000)} <= log.keys()
    assert {f"al-wisp-o{n:03d}" for n in range(500)} <= {r["id"] for r in archive(three_items_dir)}
    # None of the old contexts is left, and no context slung meanwhile took one's id once it was archived.
    assert not {f"al-wisp-o{n:03d}" for n in range(500)} & log.keys()
    for event in events(three_items_dir, "ContextClosed"):  # every close that was logged stayed closed
        assert kept[event["payload"]["context_id"]]["status"] == "closed"
