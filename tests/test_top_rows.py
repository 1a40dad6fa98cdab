"""What a frame of `sluice top` makes of a long queue: the rows a screen holds, with the rest counted.

An idle top redraws every second; a frame that made every row of a queue of
10,000 to show forty of them cost about a third of a core.
"""

from __future__ import annotations

from helpers.polecats import configure
from helpers.scheduler import item, write_items
from sluice.api import open_town
from sluice.surfaces import top


def queue_snapshot(n: int, **scheduler) -> dict:
    rows = [{"id": f"al-{k}", "target_rig": "alpha" if k % 2 else "beta", "title": f"item {k}",
             "score": 1.0, "why": []} for k in range(n)]
    return {"queue": rows, "polecats": [], "rigs": {}, "events": [], "runs": [], "town": "/t",
            "at": "2026-12-01T09:00:00Z", "scheduler": {"paused": False, "queued_total": n, **scheduler}}


def test_a_frame_makes_only_the_rows_a_screen_holds_and_counts_the_rest(monkeypatch):
    made = []
    real = top.plain
    monkeypatch.setattr(top, "plain", lambda text: made.append(text) or real(text))
    text = top.render(queue_snapshot(10_000), height=30, width=120).plain
    assert "queue (10000)" in text and "of 10000 shown" in text
    assert "item 0" in text and "item 9999" not in text
    assert len(made) < 300  # a screen's worth of cells, not 10,000 rows of them


def test_a_rig_filter_counts_and_shows_only_that_rigs_rows():
    section = top.queue_section(queue_snapshot(100), "alpha", limit=5)
    assert len(section.rows) == 5 and section.total == 50
    assert [row[1].plain for row in section.rows] == ["al-1", "al-3", "al-5", "al-7", "al-9"]


def test_column_widths_follow_the_rows_shown_not_those_below_the_screen():
    snap = queue_snapshot(40)
    snap["queue"][35]["id"] = "al-" + "x" * 60  # far below the screen: must not squeeze the columns shown
    text = top.render(snap, height=24, width=80).plain
    header = next(line for line in text.splitlines() if line.lstrip().startswith("#"))
    assert "rig" in header and "score" in header and "title" in header


def test_a_truncated_snapshot_counts_the_whole_queue():
    snap = queue_snapshot(3, items_total=900, truncated=True)
    assert top.queue_section(snap).total == 900
    assert top.queue_section(snap, "alpha").total == 1  # a filter counts what it has: top takes it all


def test_top_takes_the_queues_first_rows_unless_a_rig_filter_needs_them_all(cli, rigs, monkeypatch):
    write_items(cli.town, "alpha", [item(f"al-{n}", f"work {n}") for n in range(4)])
    configure(cli.town, {"scheduler.max_polecats": "1"})
    cli.run("sling", "al-0", "al-1", "al-2", "al-3", "alpha")
    monkeypatch.setattr(top, "SCREEN_ROWS", 2)
    view = top.Top(open_town(cli.town))
    snap = view.take(view.town)
    assert len(snap["queue"]) == 2 and snap["scheduler"]["items_total"] == 4
    assert "queue (4)" in top.render(snap, height=30).plain
    view.dirty = False
    assert view.key("/alpha\r") and view.rig_filter == "alpha"
    assert view.dirty  # a new filter takes a new snapshot, of the whole queue
    assert len(view.take(view.town)["queue"]) == 4
