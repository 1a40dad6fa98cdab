"""The hot read commands' fast path: typer's output byte for byte, and none of the heavy imports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import Cli, git, make_repo
from helpers.scheduler import configure, item, town_with_rigs, write_items

# Runs sluice as `python -m sluice` does; with "typer" first, the fast path is switched off so the
# typer command line answers (the reference every fast answer must equal).
RUNNER = """
import runpy, sys
if sys.argv[1] == "typer":
    import sluice.surfaces.fastcli as fast
    fast.run = lambda args: None
sys.argv = ["sluice", *sys.argv[2:]]
runpy.run_module("sluice", run_name="__main__", alter_sys=True)
"""

HEAVY = ("typer", "rich", "pydantic", "pygit2", "click", "psutil")
# Standard modules a hot read has no use for, each a few milliseconds of a 30 ms interpreter start:
# OpenSSL's bindings (hashlib), tempfile (with shutil, random and the compressors), socket, subprocess.
# logging too: an answer that logs nothing never imports it (sluice.logs makes the logger on first use).
# And dataclasses, with inspect, ast and dis: sluice's records are made by sluice.core.recordclass.
SPARE = ("_hashlib", "tempfile", "socket", "subprocess", "logging", "threading", "dataclasses", "inspect")
# Runs what `sluice` runs up to its exit (which, after a hot command, skips every `finally`).
PROBE = f"""
import sys
sys.argv = ["sluice", *sys.argv[1:]]
from sluice.__main__ import main
try:
    main()
finally:
    heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r} + {SPARE!r}))
    sys.stderr.write("HEAVY=" + ",".join(heavy) + "\\n")
"""


def run(town, path: str, *args: str) -> subprocess.CompletedProcess:
    # Strict on the fast side: a fast answer that crashed must show, not be covered by typer's.
    env_town = {"SLUICE_TOWN": str(town), **({"SLUICE_FAST_STRICT": "1"} if path == "fast" else {})}
    import os

    return subprocess.run([sys.executable, "-c", RUNNER, path, *args], capture_output=True, text=True,
                          env={**os.environ, **env_town}, timeout=120)


def build_town(cli: Cli, tmp_path: Path) -> Path:
    """Two rigs, blocked and ready items, an epic, a merge request, a queued context, warm caches."""
    town_with_rigs(cli, tmp_path, ("alpha", "al"), ("beta", "be"))
    configure(cli.town, "scheduler.max_polecats", "2")
    write_items(cli.town, "alpha", [
        item("al-1", "first \x1b[31mred\x1b[0m task", priority=1, description="two\nlines\x07"),
        item("al-2", "second task", deps=[("blocks", "al-1")]),
        item("al-3", "third", deps=[("blocks", "be-1")]),
        item("al-done", "finished", status="closed"),
    ])
    write_items(cli.town, "beta", [item("be-1", "beta task", priority=0),
                                   item("be-2", "later", deps=[("blocks", "be-1")]),
                                   item("be-e", "an epic", issue_type="epic", priority=1),
                                   item("be-4", "in the epic", deps=[("parent-child", "be-e")]),
                                   item("be-mr", "a merge", issue_type="merge-request")])
    git("worktree", "add", "-q", str(tmp_path / "beta-wt"), cwd=tmp_path / "repos" / "beta")  # warm
    cli.run("schedule", "policy", "set", "--affinity", "2", "--merge-queue-threshold", "1")
    cli.run("schedule", "policy", "set", "--graph-id", "be-e", "--priority", "3")
    cli.run("sling", "al-1", "alpha")  # a queued context in the ephemeral log
    cli.run("item", "list")  # indexes and the validated config exist, as on any used town
    cli.run("schedule", "next", "--preview")  # and the validated policy and the affinity
    return cli.town


@pytest.fixture
def fresh_dir(cli, tmp_path) -> Path:
    """A town of this test's own, for the tests that change it."""
    return build_town(cli, tmp_path)


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory) -> Path:
    """One town for every comparison of the fast path with typer.

    Each comparison runs both on the same files, one after the other, so a
    command that writes (``schedule next`` records its decision) leaves both
    answers equal; what one comparison writes changes nothing the next one
    compares, and building the town for each of them cost most of their time.
    """
    root = tmp_path_factory.mktemp("fastcli")
    (root / "town").mkdir()
    cli = Cli(root / "town")
    cli.run("init", str(root / "town"))
    return build_town(cli, root)


CASES = [
    ("item", "ready"),
    ("item", "ready", "--json"),
    ("item", "ready", "alpha", "--limit", "1"),
    ("item", "ready", "--limit=0", "--json"),
    ("item", "ready", "--json", "beta"),
    ("item", "ready", "nope"),
    ("item", "ready", "--limit", "-1"),
    ("item", "ready", "--limit", "x"),
    ("item", "ready", "--limit"),
    ("item", "ready", "alpha", "beta"),
    ("item", "ready", "--bogus"),
    ("item", "ready", "--help"),
    ("item", "ready", "--priority", "1", "--json"),
    ("item", "ready", "--type", "task", "--unassigned", "--sort", "oldest"),
    ("item", "ready", "--label", "x", "--label-any", "y", "--assignee", "ann", "--json"),
    ("item", "ready", "--label", "x", "--label", "y"),
    ("item", "ready", "--sort", "hybrid"),
    ("item", "ready", "--priority", "9"),
    ("item", "blocked"),
    ("item", "blocked", "--json"),
    ("item", "blocked", "beta"),
    ("item", "blocked", "nope", "--json"),
    ("item", "show", "al-1"),
    ("item", "show", "al-1", "--json"),
    ("item", "show", "be-2"),
    ("item", "show", "zz-9"),
    ("item", "show", "zz-9", "--json"),
    ("item", "show"),
    ("item", "show", "al-1", "al-2"),
    ("schedule", "next", "--preview"),
    ("schedule", "next", "--preview", "--limit", "3", "--json"),
    ("schedule", "next", "--preview", "--graph-id", "be-e", "--json"),
    ("schedule", "next", "--preview", "--graph-id", "be-4"),
    ("schedule", "next", "--preview", "--graph-id=nope", "--json"),
    ("schedule", "next", "--preview", "--limit", "0"),
    ("schedule", "next", "--preview", "--limit", "x"),
    ("schedule", "next", "--preview", "--preview"),
    ("schedule", "next", "--limit", "2"),
    ("schedule", "next", "--json", "--limit=2"),
    ("schedule", "next", "extra"),
    ("scheduler", "status"),
    ("scheduler", "status", "--json"),
    ("scheduler", "status", "--bogus"),
    ("scheduler", "status", "--limit", "1", "--json"),
    ("scheduler", "status", "--limit", "1"),
    ("scheduler", "status", "--limit", "-1"),
    ("scheduler", "list"),
    ("scheduler", "list", "--json"),
    ("scheduler", "list", "--limit", "1", "--offset=1", "--json"),
    ("scheduler", "list", "--offset", "x"),
    ("scheduler", "explain", "al-1"),
    ("scheduler", "explain", "al-1", "--json"),
    ("scheduler", "explain", "be-2", "--json"),
    ("scheduler", "explain", "zz-9"),
    ("scheduler", "explain"),
    ("scheduler", "forecast"),
    ("scheduler", "forecast", "--json"),
    ("scheduler", "forecast", "--limit", "1", "--json"),
    ("scheduler", "forecast", "--limit=-1"),
    ("scheduler", "forecast", "--limit", "x"),
    ("scheduler", "forecast", "al-1"),
    ("hooks", "report", "--rig", "alpha"),
    ("hooks", "report", "--rig=beta", "--hook", "post-commit", "--json"),
    ("hooks", "report", "--repo", "{repo}", "--json"),
    ("hooks", "report", "--rig", "alpha", "--repo", "{repo}"),
    ("hooks", "report"),
    ("hooks", "report", "--rig", "nope"),
    ("scheduler", "run", "--dry-run"),
    ("scheduler", "run", "-n", "--json"),
    ("scheduler", "run", "--dry-run", "--batch", "2", "--json"),
    ("scheduler", "run", "--dry-run", "--batch=1", "--ignore-backoff"),
    ("scheduler", "run", "--dry-run", "--batch", "0"),
    ("scheduler", "run", "--dry-run", "--batch", "x"),
    ("scheduler", "run"),  # a real cycle; this town has no executor.command, so it launches nothing
    ("scheduler", "run", "--json", "--batch", "1"),
    ("scheduler", "run", "--batch", "0"),
    ("snapshot",),
    ("snapshot", "--json"),
    ("snapshot", "--limit", "1", "--json"),
    ("snapshot", "--limit=-1"),
    ("snapshot", "--limit", "x"),
    ("snapshot", "al-1"),
]


def same_run(text: str) -> str:
    """Output with what differs between two runs blanked: a decision's id and time, and the forecast's
    times (with no daemon running the first launch is forecast for now, which moves on between runs)."""
    times = "decision_id|at|start_at|done_at|done_p90_at|drain_at|drain_p90_at|room_at"
    text = re.sub(rf'"({times})":"[^"]*"', r'"\1":"…"', text)
    text = re.sub(r"(drains ≈|\(p90 )[^ )]+", r"\1…", text)  # the forecast's drain, as text
    text = re.sub(r"\b\d{4}-\d\d-\d\dT[\d:.]+Z\b", "…", text)  # a snapshot's moment, as text
    return re.sub(r"\b\d\d:\d\d\b", "…", text)


@pytest.mark.parametrize("args", CASES, ids=" ".join)
def test_fast_path_answers_exactly_as_typer_does(shared_dir, args):
    town = shared_dir
    args = [a.format(repo=town.parent / "repos" / "alpha") for a in args]
    fast, slow = run(town, "fast", *args), run(town, "typer", *args)
    assert (fast.returncode, same_run(fast.stdout), fast.stderr) == \
        (slow.returncode, same_run(slow.stdout), slow.stderr)
    assert fast.returncode in (0, 1, 2) and "Traceback" not in fast.stderr


def test_fast_path_follows_the_town_option_and_a_changed_config(fresh_dir, tmp_path):
    args = ("--town", str(fresh_dir), "item", "ready", "--json")
    fast, slow = run(fresh_dir, "fast", *args), run(fresh_dir, "typer", *args)
    assert (fast.returncode, fast.stdout) == (slow.returncode, slow.stdout) and fast.returncode == 0
    config = fresh_dir / ".sluice" / "config.json"
    data = json.loads(config.read_text())
    data["scheduler"]["batch_size"] = 0  # invalid: every command must say so, the fast one too
    config.write_text(json.dumps(data))
    fast, slow = run(fresh_dir, "fast", "item", "ready"), run(fresh_dir, "typer", "item", "ready")
    assert fast.returncode == slow.returncode == 1
    assert fast.stderr == slow.stderr and "batch_size" in fast.stderr


@pytest.mark.parametrize("args", [("item", "ready"), ("item", "ready", "--json", "--limit", "0"),
                                  ("item", "ready", "--priority", "1", "--sort", "oldest", "--unassigned"),
                                  ("item", "blocked", "--json"), ("item", "show", "al-2"), ("--version",),
                                  ("schedule", "next", "--json"), ("schedule", "next", "--preview"),
                                  ("scheduler", "status", "--json"), ("scheduler", "list"),
                                  ("scheduler", "explain", "al-1"), ("scheduler", "forecast", "--json"),
                                  ("hooks", "report", "--rig", "alpha"),
                                  ("scheduler", "run", "--dry-run", "--json"), ("snapshot", "--json")],
                         ids=" ".join)
def test_hot_commands_import_nothing_heavy_or_spare(shared_dir, args):
    import os

    env = {**os.environ, "SLUICE_TOWN": str(shared_dir)}
    subprocess.run([sys.executable, "-m", "sluice", *args], env=env, capture_output=True, check=True)
    done = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    heavy = [name for name in done.stderr.strip().splitlines()[-1].removeprefix("HEAVY=").split(",") if name]
    if args[:2] == ("scheduler", "run"):  # a dry run reads what a real cycle reads, executors included
        heavy = [name for name in heavy if name not in SPARE]
    assert heavy == []


@pytest.mark.parametrize("args", [("item", "list"), ("scheduler", "run", "--item", "al-1", "--json")],
                         ids=" ".join)
def test_a_command_the_fast_path_does_not_answer_still_loads_typer(fresh_dir, args):
    """`item list` is not a hot command, nor a cycle that launches one item ahead of the queue."""
    import os

    env = {**os.environ, "SLUICE_TOWN": str(fresh_dir)}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True)
    assert "typer" in done.stderr.strip().splitlines()[-1]  # the probe itself can fail: the check is real


def test_affinity_follows_the_worktrees_without_opening_the_repository(fresh_dir, tmp_path):
    """The cached answer changes when a worktree goes or comes, and pygit2 is asked only then."""
    import os
    import shutil

    env = {**os.environ, "SLUICE_TOWN": str(fresh_dir)}

    def warm_and_heavy() -> tuple[bool, str]:
        done = subprocess.run([sys.executable, "-c", PROBE, "schedule", "next", "--preview", "--limit", "9",
                               "--json"], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        reasons = {d["node_id"]: d["reasons"] for d in json.loads(done.stdout)}
        named = done.stderr.strip().splitlines()[-1].removeprefix("HEAVY=").split(",")
        return "affinity=1" in reasons["be-1"], "HEAVY=" + ",".join(n for n in named if n in HEAVY)

    assert warm_and_heavy() == (True, "HEAVY=")  # the fixture's first call kept the answer
    shutil.rmtree(tmp_path / "beta-wt")  # gone without `git worktree remove`: prunable, so cold
    assert warm_and_heavy() == (False, "HEAVY=pygit2")
    assert warm_and_heavy() == (False, "HEAVY=")
    git("worktree", "add", "-q", str(tmp_path / "beta-wt2"), cwd=tmp_path / "repos" / "beta")
    assert warm_and_heavy() == (True, "HEAVY=pygit2")
    assert warm_and_heavy() == (True, "HEAVY=")


def test_a_hot_read_that_warns_says_so_as_typer_does(fresh_dir, tmp_path):
    """The logger is made by the first warning, and the fast path still holds and words it as typer does."""
    export = tmp_path / "export.jsonl"
    export.write_text(json.dumps(item("ex-1", "an exported task")) + "\n")
    Cli(fresh_dir).run("rig", "add", "ext", str(make_repo(tmp_path / "ext")), "--prefix", "ex", "--items",
                       str(export))
    with export.open("a") as fh:  # an exporter cut short: a torn last line is skipped and said
        fh.write('{"id": "ex-2", "tit')
    fast = run(fresh_dir, "fast", "item", "ready", "--json")
    slow = run(fresh_dir, "typer", "item", "ready", "--json")
    assert fast.returncode == slow.returncode == 0, (fast.stderr, slow.stderr)
    assert (fast.stdout, fast.stderr) == (slow.stdout, slow.stderr)
    assert fast.stderr.startswith("warning: ") and "export.jsonl" in fast.stderr


def test_a_config_with_crlf_line_ends_is_read_from_its_plain_copy(fresh_dir):
    """The copy is keyed by the file's exact bytes, so a CRLF file hits it like any other."""
    import os

    config = fresh_dir / ".sluice" / "config.json"
    config.write_bytes(config.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    env = {**os.environ, "SLUICE_TOWN": str(fresh_dir)}
    subprocess.run([sys.executable, "-m", "sluice", "item", "list"], env=env, capture_output=True, check=True)
    done = subprocess.run([sys.executable, "-c", PROBE, "scheduler", "status"], env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "HEAVY="


# One plain, successful form of every command the fast path claims; each must be answered by it.
ANSWERED = {
    ("item", "ready"): ["item", "ready", "--json"],
    ("item", "blocked"): ["item", "blocked"],
    ("item", "show"): ["item", "show", "al-1", "--json"],
    ("schedule", "next"): ["schedule", "next", "--preview"],
    ("scheduler", "status"): ["scheduler", "status", "--json"],
    ("scheduler", "list"): ["scheduler", "list"],
    ("scheduler", "explain"): ["scheduler", "explain", "al-1"],
    ("scheduler", "forecast"): ["scheduler", "forecast", "--limit", "1"],
    ("hooks", "report"): ["hooks", "report", "--rig", "alpha", "--json"],
    ("scheduler", "run"): ["scheduler", "run", "--dry-run", "--json"],
    ("snapshot",): ["snapshot", "--limit", "2"],
}


def test_every_command_the_fast_path_claims_is_answered_by_it(fresh_dir, monkeypatch, capsys):
    """Strict mode: nothing falls back to typer, so a fast answer that broke fails here."""
    from sluice.surfaces import fastcli

    assert set(ANSWERED) == set(fastcli.COMMANDS)
    monkeypatch.setenv("SLUICE_TOWN", str(fresh_dir))
    monkeypatch.setenv(fastcli.STRICT_ENV, "1")
    for name, args in ANSWERED.items():
        assert fastcli.run(args) == 0, name
        assert capsys.readouterr().out, name


def test_strict_mode_raises_what_the_fast_path_would_hand_to_typer(fresh_dir, monkeypatch):
    from sluice.surfaces import fastcli

    monkeypatch.setenv("SLUICE_TOWN", str(fresh_dir))

    def broken(_command):
        raise RuntimeError("a bug in the fast path")

    monkeypatch.setattr(fastcli, "_answer", broken)
    assert fastcli.run(["scheduler", "list"]) is None  # quietly: typer answers instead
    monkeypatch.setenv(fastcli.STRICT_ENV, "1")
    with pytest.raises(RuntimeError, match="a bug in the fast path"):
        fastcli.run(["scheduler", "list"])


def test_a_recorded_answer_that_cannot_be_printed_is_not_recorded_again(fresh_dir, monkeypatch, capsys):
    """``schedule next`` records its decisions first: a failed print exits 1 instead of asking typer."""
    from sluice.store.database.decisions import recent_decisions
    from sluice.store.files.town import Town
    from sluice.surfaces import fastcli, output

    monkeypatch.setenv("SLUICE_TOWN", str(fresh_dir))
    before = len(recent_decisions(Town(fresh_dir), 1000))

    def broken(*_args, **_kwargs):
        raise ValueError("cannot print")

    monkeypatch.setattr(output, "emit", broken)
    assert fastcli.run(["schedule", "next", "--json"]) == 1
    assert "the answer could not be written: cannot print" in capsys.readouterr().err
    assert len(recent_decisions(Town(fresh_dir), 1000)) == before + 1
    assert fastcli.run(["schedule", "next", "--preview"]) is None  # a read still hands over


def _launch_ids_blanked(text: str) -> str:
    """A cycle's answer with what differs between two towns that launched alike blanked: the polecat
    and run ids, and the moments."""
    text = re.sub(r'"(polecat_id|run_id)":"[^"]*"', r'"\1":"…"', text)
    text = re.sub(r"\bpc-[0-9a-z-]+", "pc-…", text)
    return same_run(text)


@pytest.mark.parametrize("args", [("scheduler", "run", "--json"), ("scheduler", "run")], ids=" ".join)
def test_a_real_cycle_launches_on_the_fast_path_as_typer_does(fresh_dir, tmp_path, args):
    import shutil

    from helpers.scheduler import python_command

    configure(fresh_dir, "executor.command", python_command("pass"))
    fast_town, typer_town = tmp_path / "fast-town", tmp_path / "typer-town"
    shutil.copytree(fresh_dir, fast_town)
    shutil.copytree(fresh_dir, typer_town)
    fast, slow = run(fast_town, "fast", *args), run(typer_town, "typer", *args)
    assert (fast.returncode, _launch_ids_blanked(fast.stdout), fast.stderr) == \
        (slow.returncode, _launch_ids_blanked(slow.stdout), slow.stderr)
    assert fast.returncode == 0 and "al-1" in fast.stdout  # it launched
    for town in (fast_town, typer_town):
        assert Cli(town).json("scheduler", "status")["queued_total"] == 0
    import os

    Cli(fresh_dir).run("scheduler", "status")  # the changed config validated once, as on any used town
    probe = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                           env={**os.environ, "SLUICE_TOWN": str(fresh_dir)})
    heavy = probe.stderr.strip().splitlines()[-1]
    assert heavy.startswith("HEAVY=") and not {"typer", "pydantic", "rich"} & set(heavy[6:].split(","))


def test_a_real_cycle_stopped_by_an_error_is_not_tried_again(fresh_dir, monkeypatch, capsys):
    """Whatever stops a cycle that may have launched is said as typer says it, and typer never runs it."""
    from sluice.errors import ExecutorUnavailable
    from sluice.scheduler.launch import dispatch
    from sluice.surfaces import fastcli

    monkeypatch.setenv("SLUICE_TOWN", str(fresh_dir))
    monkeypatch.setenv(fastcli.STRICT_ENV, "1")  # strict or not: there is no second try to fall back to
    cycles = []

    def stopped(*_args, **_kwargs):
        cycles.append(1)
        raise ExecutorUnavailable("the executor went away")

    monkeypatch.setattr(dispatch, "run_cycle", stopped)
    assert fastcli.run(["scheduler", "run", "--json"]) == 1
    assert capsys.readouterr().err == "error: the executor went away\n"

    def refused(*_args, **_kwargs):
        cycles.append(1)
        raise OSError(28, "No space left on device", "/town/.sluice/rigs/alpha/ephemeral.jsonl")

    monkeypatch.setattr(dispatch, "run_cycle", refused)
    assert fastcli.run(["scheduler", "run"]) == 1
    said = capsys.readouterr().err
    assert said == "error: /town/.sluice/rigs/alpha/ephemeral.jsonl: No space left on device\n"

    def broken(*_args, **_kwargs):
        cycles.append(1)
        raise KeyError("a bug")

    monkeypatch.setattr(dispatch, "run_cycle", broken)
    assert fastcli.run(["scheduler", "run"]) == 1
    assert "internal error: KeyError" in capsys.readouterr().err
    assert len(cycles) == 3  # each cycle ran once
