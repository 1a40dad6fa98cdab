"""Helpers for the scoring tests: towns of real git rigs whose items are written as beads records."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import Cli, git, make_repo

T0 = "2026-01-01T00:00:00Z"


def stamp(minute: int) -> str:
    """A created_at ``minute`` minutes after T0 (so tests control the timestamp tie-break)."""
    return f"2026-01-01T{minute // 60:02d}:{minute % 60:02d}:00Z"


def add_rig(cli: Cli, root: Path, name: str, prefix: str) -> Path:
    repo = make_repo(root / "repos" / name)
    cli.run("rig", "add", name, str(repo), "--prefix", prefix)
    return repo


def item(item_id: str, priority: int = 2, tokens: int | None = None, minute: int = 0, **extra) -> dict:
    record = {
        "id": item_id,
        "title": extra.pop("title", f"work {item_id}"),
        "status": extra.pop("status", "open"),
        "priority": priority,
        "issue_type": extra.pop("issue_type", "task"),
        "created_at": stamp(minute),
        "updated_at": T0,
    }
    if tokens is not None:
        record["metadata"] = {"estimated_tokens": tokens}
    parent = extra.pop("parent", None)
    deps = []
    if parent:
        deps.append({"issue_id": item_id, "depends_on_id": parent, "type": "parent-child", "created_at": T0})
    deps += [{"issue_id": item_id, "depends_on_id": t, "type": "blocks", "created_at": T0}
             for t in extra.pop("blocked_by", ())]
    if deps:
        record["dependencies"] = deps
    record.update(extra)
    return record


def merge_request(item_id: str, status: str) -> dict:
    return item(item_id, issue_type="merge-request", status=status, title=f"merge {item_id}")


def write_items(town: Path, rig: str, records: list[dict]) -> None:
    """Append durable items to a rig's own store, as `sluice item import` leaves them."""
    path = town / ".sluice" / "rigs" / rig / "issues.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")


def add_worktree(repo: Path, where: Path, branch: str = "agent") -> Path:
    """A real linked worktree (what makes a rig warm)."""
    git("worktree", "add", "-q", str(where), "-b", branch, cwd=repo)
    return where


def decisions(town: Path) -> list[dict]:
    path = town / ".sluice" / "schedule" / "decisions.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def events(town: Path, *types: str) -> list[dict]:
    path = town / ".sluice" / "events" / "scheduler.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if not types or r["type"] in types]


def ids(decisions_: list[dict]) -> list[str]:
    return [d["node_id"] for d in decisions_]
