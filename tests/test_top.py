"""`sluice top` in a real terminal: tmux runs it, capture-pane reads the screen, send-keys types."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from helpers.polecats import configure
from helpers.scheduler import add_rig, item, sleeper, stop_polecats, wait_for, write_items
from sluice.store.files.town import Town

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture
def busy_files(cli, rigs) -> Iterator[Town]:
    """Rigs alpha and beta, their items queued (hostile titles among them), one sleeping polecat running."""
    write_items(cli.town, "alpha", [item("al-1", "first", priority=0), item("al-2", "second"),
                                    item("al-3", "[bold]not markup[/bold]")])
    write_items(cli.town, "beta", [item("be-1", "beta work"), item("be-2", "more beta\x1b[2J")])
    configure(cli.town, {"scheduler.max_polecats": "1", "executor.command": sleeper(60)})
    cli.run("sling", "al-1", "al-2", "al-3", "alpha")
    cli.run("sling", "be-1", "be-2", "beta")
    cli.run("scheduler", "run")
    yield Town(cli.town)
    stop_polecats(cli.town)


class Tmux:
    def __init__(self, socket: str):
        self.socket = socket

    def __call__(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=check)
        return done.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "top")

    def wait_screen(self, predicate, what: str, timeout: float = 20.0) -> str:
        try:
            return wait_for(lambda: (lambda s: s if predicate(s) else None)(self.screen()), timeout=timeout)
        except AssertionError:
            raise AssertionError(f"screen never showed {what}:\n{self.screen()}") from None


@pytest.fixture
def tmux(cli, busy_files):
    socket = f"sluice-top-test-{uuid.uuid4().hex[:8]}"
    mux = Tmux(socket)
    # The pane's shell writes top's exit status to a file once top has gone (the
    # #{pane_dead_status} format is empty on some tmux versions).
    mux.exit_status = cli.town.parent / "top-exit-status"
    command = shlex.join(["sh", "-c", '"$@"; echo $? > "$0"', str(mux.exit_status),
                          "env", f"SLUICE_TOWN={cli.town}", sys.executable, "-m", "sluice", "top"])
    mux("-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", "120", "-y", "40", command)
    mux("set-option", "-t", "top", "remain-on-exit", "on")
    mux("resize-window", "-t", "top", "-x", "120", "-y", "40")
    yield mux
    mux("kill-server", check=False)


def test_top_shows_the_queue_polecats_and_pause_round_trips(cli, tmux):
    # A whole frame: tmux may be read between two writes of one redraw on a loaded machine.
    screen = tmux.wait_screen(lambda s: all(w in s for w in ("sluice top", "al-2", "be-1", "running polecats",
                                                             "rigs (", "events")), "the queue")
    assert " active " in screen and "polecats 1/1" in screen
    queue = screen[screen.index("queue ("):screen.index("running polecats")]
    assert "be-1" in queue, screen
    assert queue.index("al-2") < queue.index("be-1")  # dispatch order
    assert "[bold]not markup[/bold]" in queue  # a title is text, never rich markup
    polecats = screen[screen.index("running polecats"):screen.index("rigs")]
    assert "al-1" in polecats and "sluice polecat logs" in polecats

    tmux("send-keys", "-t", "top", "p")
    tmux.wait_screen(lambda s: "PAUSED by sluice top" in s, "the pause")
    assert cli.json("scheduler", "status")["paused"] is True
    assert cli.json("scheduler", "status")["paused_by"] == "sluice top"
    tmux("send-keys", "-t", "top", "p")
    tmux.wait_screen(lambda s: " active " in s and "PAUSED" not in s, "the resume")
    assert cli.json("scheduler", "status")["paused"] is False

    cli.run("scheduler", "pause")  # a change made elsewhere shows without a key press
    tmux.wait_screen(lambda s: "PAUSED" in s, "a pause made by the CLI")


def test_slash_filters_by_rig(tmux):
    tmux.wait_screen(lambda s: "be-1" in s and "al-2" in s, "both rigs")
    tmux("send-keys", "-t", "top", "/", "beta", "Enter")
    screen = tmux.wait_screen(lambda s: "rig filter: beta" in s, "the filter")
    queue = screen[screen.index("queue ("):screen.index("running polecats")]
    assert "be-1" in queue and "be-2" in queue and "al-2" not in queue
    tmux("send-keys", "-t", "top", "/", "Enter")
    tmux.wait_screen(lambda s: "rig filter" not in s and "al-2" in s, "the filter cleared")


def test_a_new_polecat_appears_live(cli, tmux, busy_files):
    tmux.wait_screen(lambda s: "al-1" in s, "the first polecat")
    configure(cli.town, {"scheduler.max_polecats": "2"})
    cli.run("scheduler", "run")
    screen = tmux.wait_screen(lambda s: "running polecats (2)" in s, "the second polecat")
    polecats = screen[screen.index("running polecats"):screen.index("rigs")]
    assert "al-2" in polecats


def test_resize_redraws_and_q_quits_cleanly(tmux):
    tmux.wait_screen(lambda s: "sluice top" in s, "the first frame")
    for width, height in ((60, 15), (200, 50), (30, 8), (120, 40)):
        tmux("resize-window", "-t", "top", "-x", str(width), "-y", str(height))
        fits = lambda s, w=width: "sluice top" in s and max(len(line) for line in s.splitlines()) <= w  # noqa: E731
        tmux.wait_screen(fits, f"a frame at {width}x{height}")
    tmux("send-keys", "-t", "top", "q")
    wait_for(lambda: tmux.exit_status.exists() and tmux.exit_status.read_text().strip(), timeout=30)
    screen = tmux.screen()
    assert tmux.exit_status.read_text().strip() == "0", screen
    assert "Traceback" not in screen and "error" not in screen.lower()


def test_once_prints_one_frame(cli, busy_files):
    done = cli.run("top", "--once")
    assert "sluice top" in done.stdout and "al-2" in done.stdout and "be-1" in done.stdout
    assert "[bold]not markup[/bold]" in done.stdout
    assert "more beta\\x1b[2J" in done.stdout and "\x1b[2J" not in done.stdout  # escapes shown, not run
    assert "\x1b[?1049h" not in done.stdout  # no alternate screen when printing one frame
    rows = {m.group(1): line for line in done.stdout.splitlines() if (m := re.match(r"\s*\d+\s+(\S+)", line))}
    for row in cli.json("scheduler", "list"):  # each row's reason codes, as `scheduler list` gives them
        assert row["why"], row
        assert ", ".join(row["why"]) in rows[row["id"]]
    only = cli.run("top", "--once", "--rig", "beta").stdout
    assert "be-1" in only and "al-2" not in only


def test_a_bad_interval_is_a_usage_error(cli):
    done = cli.run("top", "--interval", "0", check=False)
    assert done.returncode == 2 and done.stderr.startswith("error: --interval")


def test_admission_limits_show_in_the_header():
    from sluice.surfaces.screen import pack
    from sluice.surfaces.top import header, limits

    sched = {"paused": False, "mode": "deferred", "active_polecats": 1, "max_polecats": 3, "queued_total": 2,
             "queued_ready": 1,
             "budgets": [{"rig": None, "spent": 1200, "budget": 5000, "window": "1h"},
                         {"rig": "api", "spent": 900, "budget": 1000, "window": "1h"}],
             "throttles": [{"rig": "web", "until": "2026-12-01T09:30:00Z", "reason": "deploy\x1b[2J"}],
             "rig_caps": {"api": 2}, "label_caps": {"gpu": 1}, "circuit_broken": 2}
    assert limits(sched) == [
        "budgets: town 1200/5000 per 1h, api 900/1000 per 1h",
        "throttled: web until 09:30:00 (deploy\\x1b[2J)",
        "caps: api=2, gpu=1",
        "circuit-broken: 2",
    ]
    assert limits({"paused": False}) == []
    text = "\n".join(line.plain for line in pack(header({"scheduler": sched, "town": "/t",
                                                         "at": "2026-12-01T09:00:00Z"}), 200))
    assert "budgets: town 1200/5000" in text and "throttled: web" in text


@pytest.fixture
def crowded_files(cli, tmp_path) -> Iterator[Town]:
    """Three rigs, three polecats running and a dozen items queued, with ids as long as real hash ids."""
    for name, prefix in (("frontend", "fe"), ("backend", "be"), ("docs", "doc")):
        add_rig(cli, tmp_path, name, prefix)
    ids = []
    for name, prefix in (("frontend", "fe"), ("backend", "be"), ("docs", "doc")):
        rows = [item(f"{prefix}-g8x{n}k", f"the {n}th piece of {name} work, with a title long enough to cut",
                     priority=n % 4) for n in range(5)]
        write_items(cli.town, name, rows)
        ids += [r["id"] for r in rows]
    configure(cli.town, {"scheduler.max_polecats": "3", "scheduler.batch_size": "3",
                         "executor.command": sleeper(60)})
    cli.run("sling", *ids)
    cli.run("scheduler", "run")
    yield Town(cli.town)
    stop_polecats(cli.town)


def test_once_at_80_by_24_shows_eight_queue_rows_with_whole_ids(cli, crowded_files):
    socket = f"sluice-top-test-{uuid.uuid4().hex[:8]}"
    mux = Tmux(socket)
    done = cli.town.parent / "top-done"
    command = shlex.join(["sh", "-c", '"$@"; echo $? > "$0"; sleep 60', str(done),
                          "env", f"SLUICE_TOWN={cli.town}", "COLUMNS=80", "LINES=24",
                          sys.executable, "-m", "sluice", "top", "--once"])
    try:
        mux("-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", "80", "-y", "24", command)
        mux("resize-window", "-t", "top", "-x", "80", "-y", "24")
        wait_for(lambda: done.exists() and done.read_text().strip(), timeout=60)
        screen = mux.screen()
    finally:
        mux("kill-server", check=False)
    assert done.read_text().strip() == "0", screen
    lines = screen.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines), screen
    queued = [row["id"] for row in cli.json("scheduler", "list")]
    assert len(queued) == 12
    shown = [m.group(1) for line in lines if (m := re.match(r"\s*\d+\s+(\S+)\s", line))]
    assert len(shown) >= 8, screen
    assert shown == queued[:len(shown)], screen  # whole ids, in dispatch order
    assert "executor local" in screen
    polecats = screen[screen.index("running polecats (3)"):screen.index("rigs (3)")]
    for row in cli.json("polecat", "list"):
        assert row["id"] in polecats and row["item_id"] in polecats, screen
    assert "the 0th piece of" in polecats, screen  # the running polecat's item title
    for row in cli.json("scheduler", "list")[:len(shown)]:
        assert f"{row['score']:.2f}" in next(line for line in lines if row["id"] in line)  # rounded


def test_an_unknown_rig_filter_exits_1_naming_the_rig(cli, busy_files):
    done = cli.run("top", "--once", "--rig", "nosuch", check=False)
    assert done.returncode == 1, done
    assert done.stderr.startswith("error: unknown rig 'nosuch' (known: alpha, beta)"), done.stderr
    assert done.stdout == ""


def test_a_launch_is_one_event_line_in_words():
    from sluice.surfaces.top import event_section

    where = {"context_id": "al-wisp-1", "item_id": "al-1", "rig": "alpha"}
    at = "2026-01-01T00:00:01Z"
    events = [{"at": at, "type": "Dispatched", "payload": {**where, "polecat_id": "pc-1"}},
              {"at": at, "type": "ContextClosed", "payload": {**where, "reason": "dispatched"}},
              {"at": "2026-01-01T00:00:02Z", "type": "Paused", "payload": {"by": "ann"}}]
    section = event_section({"events": events})
    assert [row[1].plain for row in section.rows] == ["paused by ann", "launched al-1 → alpha as pc-1"]


def test_the_binding_limit_and_the_host_reading_show_in_the_header():
    from sluice.surfaces.screen import pack
    from sluice.surfaces.top import header, limits

    sched = {"paused": False, "mode": "deferred", "active_polecats": 0, "max_polecats": 3, "queued_total": 1,
             "queued_ready": 1, "binding": {"code": "hold-file", "detail": "/t/HOLD exists: deploy"},
             "host": {"reading": {"load_per_core": 0.5, "free_memory": 3 << 30, "free_disk": {"/t": 5 << 30}},
                      "fresh": False, "read_at": "2026-12-01T09:00:00Z", "hold_file": "/t/HOLD",
                      "held": [{"code": "hold-file", "detail": "x"}]}}
    assert limits(sched)[:2] == [
        "binding: hold-file (/t/HOLD exists: deploy)",
        "host: load 0.50/core; memory 3.0GiB free; disk 5.0GiB free on /t (read 2026-12-01T09:00:00Z);"
        " hold file /t/HOLD present",
    ]
    text = "\n".join(line.plain for line in pack(header({"scheduler": sched, "town": "/t",
                                                         "at": "2026-12-01T09:00:00Z"}), 200))
    assert "binding: hold-file" in text


def test_recent_runs_show_with_failures_marked_and_only_once_one_ended():
    from sluice.surfaces.top import render, runs_section

    runs = [{"run_id": "r2", "polecat_id": "pc-2", "item_id": "al-2", "rig": "alpha", "outcome": "failed",
             "exit_code": 3, "runtime_seconds": 449.2, "ended_at": "2026-12-01T14:09:40.000000Z"},
            {"run_id": "r1", "polecat_id": "pc-1", "item_id": "al-1", "rig": "alpha", "outcome": "ok",
             "exit_code": 0, "runtime_seconds": 12.0, "ended_at": "2026-12-01T14:01:00.000000Z"},
            {"run_id": "r3", "polecat_id": "pc-3", "item_id": "al-3", "rig": "alpha", "outcome": "running",
             "exit_code": None, "runtime_seconds": None, "ended_at": None}]
    section = runs_section({"runs": runs})
    assert section.title == "recent runs (2)"
    assert [(str(row[1]), row[3], row[4]) for row in section.rows] == [("al-2", "! failed", "3"),
                                                                       ("al-1", "  ok", "0")]
    assert section.row_styles == ["red", ""]
    snap = {"scheduler": {"paused": False, "mode": "deferred", "active_polecats": 0, "max_polecats": 2,
                          "queued_total": 0, "queued_ready": 0},
            "town": "/t", "at": "2026-12-01T14:10:00Z", "queue": [], "polecats": [], "rigs": {},
            "events": [], "runs": runs}
    assert "recent runs (2)" in render(snap).plain
    assert "recent runs" not in render({**snap, "runs": runs[2:]}).plain  # nothing ended: no room taken
