"""`sluice demo` drains its throwaway town under the cap and cleans up after itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_finishes_under_the_cap_and_keep_leaves_a_usable_town(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "sluice", "demo", "--work-seconds", "0.1-0.4", "--keep", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    town = Path(summary["town"])
    try:
        assert set(summary) == documented_demo_keys()
        assert summary["ok"] is True
        assert summary["done"] == summary["items"] >= 24
        assert 1 <= summary["max_active"] <= summary["cap"] == 3
        assert summary["dispatched"] == summary["items"] and summary["failed"] == 0
        listing = subprocess.run(
            [sys.executable, "-m", "sluice", "--town", str(town), "item", "list", "--status", "closed",
             "--json"],
            capture_output=True, text=True, check=True,
        )
        assert len(json.loads(listing.stdout)) >= 24
    finally:
        import shutil

        shutil.rmtree(town.parent, ignore_errors=True)


@pytest.mark.parametrize("spec", ["abc", "-1", "2-x", "nan"])
def test_a_bad_work_span_is_refused_before_anything_starts(tmp_path: Path, spec: str):
    """Otherwise every demo polecat would fail on it and the demo would only give up at its timeout."""
    done = subprocess.run(
        [sys.executable, "-m", "sluice", "demo", f"--work-seconds={spec}", "--timeout", "600"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: --work-seconds:") and "not N or LOW-HIGH" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_demo_removes_its_town_and_stops_its_polecats(tmp_path: Path, sig):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    # A suite started in the background inherits SIGINT ignored (POSIX), and so would the demo.
    demo = subprocess.Popen([sys.executable, "-m", "sluice", "demo", "--work-seconds", "20", "--json"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not list(scratch.glob("sluice-demo-*/town/.sluice/runtime/workers/*.json")):
            assert demo.poll() is None and time.monotonic() < deadline, demo.stderr
            time.sleep(0.2)
        records = list(scratch.glob("sluice-demo-*/town/.sluice/runtime/workers/*.json"))
        pids = [json.loads(p.read_text()).get("pid") for p in records]
        demo.send_signal(sig)
        demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode != 0
    assert list(scratch.iterdir()) == []  # the throwaway town is gone, as after Ctrl-C
    for pid in filter(None, pids):  # and no polecat of it is left running
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.slow
def test_demo_web_serves_the_dashboard_while_it_runs(tmp_path: Path):
    import urllib.request

    process = subprocess.Popen(
        [sys.executable, "-m", "sluice", "demo", "--work-seconds", "0.5-1", "--web", "--port", "0", "--json"],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = process.stderr.readline()
        assert line.startswith("sluice demo: watch it at http://127.0.0.1:"), line
        url = line.rsplit(" ", 1)[1].split("#", 1)[0]
        with urllib.request.urlopen(url + "api/state", timeout=30) as response:
            state = json.loads(response.read())
        assert state["scheduler"]["max_polecats"] == 3 and set(state["rigs"]) == {"api", "web", "docs"}
        assert len(state["queue"]) + len(state["polecats"]) > 0
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    summary = json.loads(out)
    assert summary["ok"] is True and summary["done"] == summary["items"]
    assert not Path(summary["town"]).exists()  # without --keep the throwaway town is gone
    try:
        urllib.request.urlopen(url + "api/state", timeout=5)
        raise AssertionError("the dashboard outlived the demo")
    except OSError:
        pass


def test_demo_live_view_is_the_top_layout(tmp_path: Path):
    """The live frame is `sluice top`'s, with the demo's progress as its first header line."""
    from rich.console import Console

    from sluice.surfaces.demo import CAP, DemoSummary, _View
    from sluice.surfaces.top import render

    snap = {"version": 1, "at": "2026-01-01T00:00:00Z", "town": "/t",
            "scheduler": {"paused": False, "mode": "deferred", "active_polecats": 1, "max_polecats": CAP,
                          "queued_total": 1, "queued_ready": 1},
            "queue": [{"id": "api-1", "target_rig": "api", "score": 3.5, "blocked": False,
                       "title": "a task"}],
            "polecats": [], "rigs": {}, "decisions": [], "events": []}
    view = _View(False, 10, "http://127.0.0.1:1/")
    summary = DemoSummary("/t", 10, 0, 1.0, 1, 0, 0, 1, CAP, False)
    frame = view._render({"rigs": {"api": {"done": 2, "total": 5}}, "town": snap}, summary)

    console = Console(width=120, height=30, record=True)
    console.print(frame, height=30)
    text = console.export_text()
    assert "sluice demo" in text and "done 2/10" in text and "dashboard http://127.0.0.1:1/" in text
    assert "queue (1)" in text and "api-1" in text and "q quit" not in text
    assert type(frame) is type(render(snap))


def documented_demo_keys() -> set[str]:
    """The keys docs/cli.md gives for `demo --json`."""
    import re

    reference = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    row = next(line for line in reference.splitlines() if line.startswith("| `sluice demo"))
    cell = row.rstrip(" |").rsplit("|", 1)[-1]
    return set(re.findall(r'"(\w+)"', cell))


def test_the_summary_keys_are_the_documented_ones():
    from sluice.surfaces.demo import DemoSummary

    summary = DemoSummary("/t", 3, 3, 1.0, 2, 3, 0, 2, 3, False, log=["x"])
    assert set(summary.to_json()) == documented_demo_keys()
