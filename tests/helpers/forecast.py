"""The small town the forecast tests share: one read-only rig of five items, one blocked, one at a time."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import Cli, make_repo


def record(item_id: str, **extra) -> dict:
    return {"_type": "issue", "id": item_id, "title": f"work {item_id}", "status": "open", "priority": 2,
            "issue_type": "task", "created_at": "2026-11-01T10:00:00Z", "updated_at": "2026-11-01T10:00:00Z",
            **extra}


def forecast_town(cli: Cli, tmp_path: Path) -> Cli:
    """Rig ``be`` reading an export of be-1…be-3 (be-3 estimated at 5 minutes), be-4 blocked by be-9,
    under ``max_polecats`` 1 and ``batch_size`` 1."""
    export = tmp_path / "issues.jsonl"
    items = [record("be-1"), record("be-2"), record("be-3", estimated_minutes=5),
             record("be-4", dependencies=[{"issue_id": "be-4", "depends_on_id": "be-9", "type": "blocks",
                                           "created_at": "2026-11-01T10:00:00Z"}]),
             record("be-9")]
    export.write_text("".join(json.dumps(r) + "\n" for r in items))
    cli.run("rig", "add", "be", str(make_repo(tmp_path / "repos" / "be")), "--items", str(export))
    cli.run("config", "set", "scheduler.max_polecats", "1")
    cli.run("config", "set", "scheduler.batch_size", "1")
    return cli


def forecast_at(town_dir: Path, now: float) -> dict:
    """``scheduler forecast`` of the town at ``now``, from whatever reading is kept or can be carried."""
    from sluice.scheduler.views.forecast import forecast
    from sluice.store.files.town import Town

    return forecast(Town(town_dir), now=now)
