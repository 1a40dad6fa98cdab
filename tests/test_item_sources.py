"""Rigs over a live beads store: the refusal without an export, and command sources.

The commands are real programs: a small script that prints a real beads
export (from the shared data, or a written one), fails, hangs, prints
garbage or prints less, as a file in the repository's ``.beads/`` says.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from helpers import Cli, make_repo

SCRIPT = r'''
import json, pathlib, sys, time
export = pathlib.Path(sys.argv[1])
mode_file = pathlib.Path(".beads/mode")
mode = mode_file.read_text().strip() if mode_file.exists() else "ok"
text = export.read_text()
if mode == "fail":
    sys.stderr.write("dolt: connection refused\n")
    sys.exit(3)
if mode == "hang":
    time.sleep(600)
if mode == "garbage":
    print("<html>502 Bad Gateway</html>")
elif mode == "shrink":
    print(text.splitlines()[0])
elif mode == "array":
    print(json.dumps([json.loads(line) for line in text.splitlines() if line.strip()], indent=2))
elif mode == "envelope":
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    print(json.dumps({"schema_version": 1, "data": records}))
else:
    sys.stdout.write(text)
'''


def record(item_id: str, **extra) -> dict:
    return {"id": item_id, "title": f"work {item_id}", "status": "open", "priority": 2, "issue_type": "task",
            "created_at": "2026-11-01T10:00:00Z", "updated_at": "2026-11-01T10:00:00Z", **extra}


def write_export(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def beads_repo(tmp_path) -> Path:
    """A git repository whose ``.beads/`` holds a Dolt store and no export (beads ≥ 1.0.4's default)."""
    repo = make_repo(tmp_path / "repos" / "be")
    (repo / ".beads" / "embeddeddolt" / "be").mkdir(parents=True)
    (repo / ".beads" / "metadata.json").write_text('{"backend": "dolt", "dolt_mode": "embedded"}\n')
    return repo


@pytest.fixture
def printer(tmp_path) -> Path:
    script = tmp_path / "print_export.py"
    script.write_text(SCRIPT)
    return script


def command_for(printer: Path, export: Path) -> str:
    return json.dumps([sys.executable, str(printer), str(export)])


def set_mode(repo: Path, mode: str) -> None:
    (repo / ".beads" / "mode").write_text(mode + "\n")


# -- no silent empty rig --------------------------------------------------------------------


def test_rig_add_refuses_a_beads_store_without_an_export_and_names_the_ways_on(cli, beads_repo):
    done = cli.run("rig", "add", "be", str(beads_repo), check=False)
    assert done.returncode == 1
    assert "holds a beads store (embeddeddolt/, metadata.json) but no export (issues.jsonl)" in done.stderr
    assert "bd config set export.auto true" in done.stderr
    assert f"sluice rig add be {beads_repo} --items-command 'bd export'" in done.stderr
    assert "--own-store" in done.stderr
    assert cli.json("rig", "list") == []  # nothing registered


def test_own_store_gives_the_rig_sluices_store_on_purpose(cli, beads_repo):
    row = cli.json("rig", "add", "be", str(beads_repo), "--own-store")
    assert row["source"] == "own" and not row["read_only"]
    cli.run("item", "create", "be", "--title", "first")
    assert len(cli.json("item", "ready", "be")) == 1


def test_an_export_beside_the_store_is_read_as_before(cli, beads_repo):
    write_export(beads_repo / ".beads" / "issues.jsonl", [record("be-1")])
    row = cli.json("rig", "add", "be", str(beads_repo))
    assert row["source"] == "export" and row["source_stale"] is None
    assert [r["id"] for r in cli.json("item", "ready", "be")] == ["be-1"]


def test_rig_list_and_patrol_flag_an_export_the_store_has_outgrown(cli, beads_repo):
    import os

    export = write_export(beads_repo / ".beads" / "issues.jsonl", [record("be-1")])
    cli.run("rig", "add", "be", str(beads_repo))
    written = time.time() - 3600
    os.utime(export, (written, written))  # exported an hour ago; the store was written since
    (beads_repo / ".beads" / "embeddeddolt" / "be" / "journal").write_bytes(b"new rows")
    stale = cli.json("rig", "list")[0]["source_stale"]
    assert stale["kind"] == "export-behind" and "export.auto" in stale["detail"]
    assert cli.json("patrol", "be")["source_stale"]["kind"] == "export-behind"
    assert "source-stale" in cli.run("rig", "list").stdout
    os.utime(export, None)  # written again now: current
    assert cli.json("rig", "list")[0]["source_stale"] is None


# -- command sources -------------------------------------------------------------------------


def test_a_command_source_reads_what_the_command_prints(cli, beads_repo, printer, tmp_path):
    export = write_export(tmp_path / "export.jsonl", [record("be-1"), record("be-2", priority=0)])
    row = cli.json("rig", "add", "be", str(beads_repo), "--items-command", command_for(printer, export))
    assert row["source"] == "command" and row["read_only"] and row["items_command"][1] == str(printer)
    assert [r["id"] for r in cli.json("item", "ready", "be")] == ["be-2", "be-1"]
    refused = cli.run("item", "create", "be", "--title", "x", check=False)
    assert refused.returncode == 1 and "reads its items through" in refused.stderr


def test_a_command_string_is_split_like_a_shell_but_never_run_by_one(cli, beads_repo, printer, tmp_path):
    spaced = tmp_path / "an export.jsonl"
    write_export(spaced, [record("be-1")])
    marker = tmp_path / "ran-by-a-shell"
    command = f"{sys.executable} {printer} '{spaced}' ; touch {marker}"
    cli.run("rig", "add", "be", str(beads_repo), "--items-command", command)
    assert not marker.exists()  # `;` and `touch` were only words handed to the script
    assert [r["id"] for r in cli.json("item", "ready", "be")] == ["be-1"]


@pytest.mark.parametrize("mode", ["array", "envelope"])
def test_a_json_array_and_beads_envelope_are_read_like_jsonl(cli, beads_repo, printer, tmp_path, mode):
    export = write_export(tmp_path / "export.jsonl", [record("be-1"), record("be-2", priority=0)])
    set_mode(beads_repo, mode)
    cli.run("rig", "add", "be", str(beads_repo), "--items-command", command_for(printer, export))
    assert [r["id"] for r in cli.json("item", "ready", "be")] == ["be-2", "be-1"]


@pytest.mark.parametrize(("mode", "says"), [
    ("fail", "exited with status 3: dolt: connection refused"),
    ("garbage", "is not a beads export"),
])
def test_a_failing_command_registers_nothing(cli, beads_repo, printer, tmp_path, mode, says):
    export = write_export(tmp_path / "export.jsonl", [record("be-1")])
    set_mode(beads_repo, mode)
    done = cli.run("rig", "add", "be", str(beads_repo), "--items-command", command_for(printer, export),
                   check=False)
    assert done.returncode == 1
    assert "rig 'be': items command" in done.stderr and str(printer) in done.stderr and says in done.stderr
    assert cli.json("rig", "list") == []


def test_a_command_that_cannot_start_registers_nothing(cli, beads_repo):
    done = cli.run("rig", "add", "be", str(beads_repo), "--items-command", "no-such-bd-program export",
                   check=False)
    assert done.returncode == 1 and "cannot start" in done.stderr and "no-such-bd-program" in done.stderr


def _added(cli, beads_repo, printer, export) -> None:
    cli.run("rig", "add", "be", str(beads_repo), "--items-command", command_for(printer, export))


@pytest.mark.parametrize(("mode", "says"), [
    ("fail", "exited with status 3"),
    ("garbage", "is not a beads export"),
    ("hang", "did not finish within 1s and was killed"),
])
def test_a_failing_refresh_keeps_serving_the_last_snapshot_marked_source_stale(
        cli, beads_repo, printer, tmp_path, mode, says):
    export = write_export(tmp_path / "export.jsonl", [record("be-1"), record("be-2")])
    _added(cli, beads_repo, printer, export)
    cli.run("config", "set", "rigs.be.items.command_timeout", "1s")
    set_mode(beads_repo, mode)
    started = time.monotonic()
    done = cli.run("rig", "refresh", "be", check=False)
    assert done.returncode == 1
    assert "rig 'be': items command" in done.stderr and says in done.stderr
    if mode == "hang":
        assert time.monotonic() - started < 60  # killed, not waited for
    assert [r["id"] for r in cli.json("item", "ready", "be")] == ["be-1", "be-2"]  # nothing vanished
    stale = cli.json("rig", "list")[0]["source_stale"]
    assert stale["kind"] == "command-failed" and says in stale["detail"]
    assert cli.json("scheduler", "status")["source_stale"][0]["rig"] == "be"
    assert cli.json("patrol", "be")["source_stale"]["kind"] == "command-failed"
    snap = cli.json("snapshot")
    assert snap["rigs"]["be"]["source_stale"]["kind"] == "command-failed"
    status_text = cli.run("scheduler", "status").stdout
    assert "Source stale: rig be (command-failed): rig 'be': items command" in status_text
    from sluice.surfaces.top import rig_section

    assert "source stale (command-failed)" in str(rig_section(snap).rows[0][-1])
    set_mode(beads_repo, "ok")
    cli.run("rig", "refresh", "be")
    assert cli.json("rig", "list")[0]["source_stale"] is None


def test_a_read_refreshes_at_once_when_the_watched_store_changes(cli, beads_repo, printer, tmp_path):
    export = write_export(tmp_path / "export.jsonl", [record("be-1")])
    _added(cli, beads_repo, printer, export)
    cli.run("config", "set", "rigs.be.items.refresh", "1h")
    cli.run("config", "set", "items.read_wait", "60s")  # a loaded machine must not turn this into a race
    assert [r["id"] for r in cli.json("item", "ready", "be")] == ["be-1"]
    write_export(export, [record("be-1"), record("be-3", priority=0)])
    assert [r["id"] for r in cli.json("item", "ready", "be")] == ["be-1"]  # nothing watched changed
    (beads_repo / ".beads" / "embeddeddolt" / "be" / "journal").write_bytes(b"a write")
    assert [r["id"] for r in cli.json("item", "ready", "be")] == ["be-3", "be-1"]


def test_a_read_never_waits_long_for_a_slow_command(cli, beads_repo, printer, tmp_path):
    export = write_export(tmp_path / "export.jsonl", [record("be-1")])
    _added(cli, beads_repo, printer, export)
    cli.run("config", "set", "items.read_wait", "0s")
    cli.run("config", "set", "items.command_timeout", "3s")  # the refresh left running ends soon after
    set_mode(beads_repo, "hang")  # the watched path changed: due
    started = time.monotonic()
    assert [r["id"] for r in cli.json("item", "ready", "be")] == ["be-1"]  # the last snapshot, at once
    assert time.monotonic() - started < 30  # far below the 30 s command timeout
    # The child the read started finishes the refresh: killed at its timeout, the rig is source-stale.
    deadline = time.monotonic() + 90
    while cli.json("rig", "list")[0]["source_stale"] is None:
        assert time.monotonic() < deadline, "the refresh left to the child never finished"
        time.sleep(0.2)
    assert "did not finish within 3s" in cli.json("rig", "list")[0]["source_stale"]["detail"]


def test_output_that_shrinks_then_recovers_keeps_queued_work_queued(cli, beads_repo, printer, tmp_path):
    export = write_export(tmp_path / "export.jsonl", [record("be-1"), record("be-2")])
    _added(cli, beads_repo, printer, export)
    cli.run("config", "set", "scheduler.max_polecats", "2")
    cli.run("config", "set", "scheduler.missing_grace", "1h")
    cli.run("sling", "be-2")
    set_mode(beads_repo, "shrink")  # bd prints only be-1: be-2 is missing for a while
    cli.run("rig", "refresh", "be")
    assert [r["id"] for r in cli.json("item", "ready", "be")] == ["be-1"]
    cli.run("scheduler", "run", "--dry-run")
    rows = cli.json("scheduler", "list")
    assert [(r["id"], r.get("held")) for r in rows] == [("be-2", "missing-item")]
    set_mode(beads_repo, "ok")
    cli.run("rig", "refresh", "be")
    rows = cli.json("scheduler", "list")
    assert [(r["id"], r.get("held"), r["blocked"]) for r in rows] == [("be-2", None, False)]


def test_per_rig_items_settings_apply_only_to_command_rigs(cli, beads_repo, printer, tmp_path, rig):
    export = write_export(tmp_path / "export.jsonl", [record("be-1")])
    _added(cli, beads_repo, printer, export)
    cli.run("config", "set", "rigs.be.items.refresh", "5m")
    assert cli.run("config", "get", "rigs.be.items.refresh").stdout.strip() == "5m"
    cli.run("config", "set", "rigs.be.items.refresh", "none")
    refused = cli.run("config", "set", "rigs.alpha.items.refresh", "5m", check=False)
    assert refused.returncode == 2 and "does not read its items through a command" in refused.stderr


# -- real exports through a command ----------------------------------------------------------

FILES = {  # the six real exports, by the prefix their rig routes (as in test_beads_data)
    "steveyegge__beads.issues.jsonl": "bd",
    "steveyegge__beads@2026-01-14.issues.jsonl": "bd",
    "steveyegge__gastown.issues.jsonl": "gt",
    "steveyegge__gastown@2026-01-07.issues.jsonl": "gt",
    "artifact-keeper__artifact-keeper.issues.jsonl": "artifact-keeper",
    "asermax__ralph-tui.issues.jsonl": "ralph",
}


@pytest.mark.parametrize("name", FILES)
def test_readiness_on_a_command_source_equals_the_same_export_read_from_a_file(
        tmp_path, beads_data, printer, name):
    export = beads_data / name
    answers = []
    for how in ("file", "command"):
        town = tmp_path / how / "town"
        town.mkdir(parents=True)
        cli = Cli(town)
        cli.run("init", str(town))
        repo = make_repo(tmp_path / how / "repo")
        source = (["--items", str(export)] if how == "file"
                  else ["--items-command", command_for(printer, export)])
        cli.run("rig", "add", "r", str(repo), "--prefix", FILES[name], *source)
        answers.append((cli.run("item", "ready", "--limit", "0", "--json").stdout,
                        cli.run("item", "blocked", "--json").stdout,
                        cli.run("item", "list", "--json").stdout))
    assert answers[0] == answers[1]
    assert json.loads(answers[0][0])  # the comparison is not of two empty answers


def test_the_daemon_refreshes_due_sources_and_logs_a_failure(cli, beads_repo, printer, tmp_path):
    export = write_export(tmp_path / "export.jsonl", [record("be-1")])
    _added(cli, beads_repo, printer, export)
    cli.run("config", "set", "rigs.be.items.refresh", "1h")
    write_export(export, [record("be-1"), record("be-2")])
    (beads_repo / ".beads" / "embeddeddolt" / "be" / "journal").write_bytes(b"a write")  # due
    cli.run("daemon", "--once")
    snapshot = cli.town / ".sluice" / "runtime" / "sources" / "be.jsonl"
    assert [json.loads(line)["id"] for line in snapshot.read_text().splitlines()] == ["be-1", "be-2"]
    set_mode(beads_repo, "fail")
    cli.run("daemon", "--once")
    logged = (cli.town / ".sluice" / "runtime" / "daemon.log").read_text()
    assert "rig 'be': items command" in logged and "exited with status 3" in logged  # the daemon's own line
    assert [json.loads(line)["id"] for line in snapshot.read_text().splitlines()] == ["be-1", "be-2"]


def test_rig_remove_deletes_a_command_rigs_snapshot_only(cli, beads_repo, printer, tmp_path):
    export = write_export(tmp_path / "export.jsonl", [record("be-1")])
    _added(cli, beads_repo, printer, export)
    sources = cli.town / ".sluice" / "runtime" / "sources"
    assert sorted(p.name for p in sources.iterdir()) == ["be.jsonl", "be.state.json"]
    before = export.read_bytes()
    cli.run("rig", "remove", "be")
    assert list(sources.iterdir()) == [] and export.read_bytes() == before
    assert (beads_repo / ".beads" / "metadata.json").exists()
