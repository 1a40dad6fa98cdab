"""How results become output, shared by the typer command line and its fast path.

Kept free of typer so that :mod:`sluice.surfaces.fastcli` prints exactly what
the typer commands print without importing them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from sluice.core.text import printable as shown


class RawJSON(list):
    """A list of already-serialised JSON values, printed as one array without re-parsing."""


def to_json(data: Any) -> str:
    """Every ``--json`` document: compact, on one line (``jq`` makes it pretty when a person wants it).

    Compact rather than indented because a large array of items (``item ready
    --json`` of a big rig) is then the stored lines joined, never re-encoded.
    """
    if isinstance(data, RawJSON):
        return "[" + ",".join(data) + "]"
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=_default)


def _default(value: Any):
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def emit(data: Any, as_json: bool, human: Callable[[Any], str | None] | None = None) -> None:
    """The one place a command's result becomes output: JSON, or text for a person."""
    if as_json:
        sys.stdout.write(to_json(data) + "\n")
        return
    text = human(data) if human is not None else to_json(data)
    if text:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


# -- items as text ------------------------------------------------------------------


def item_line(item: dict) -> str:
    # `item ready` rows are records as stored: a key may be present but null, or of any JSON type.
    from sluice.core.items import priority_of

    status = shown(item.get("status") or "open")
    return f"{shown(item['id']):<18} P{priority_of(item)} {status:<11} {shown(item.get('title'))}"


def item_lines(items) -> str:
    return "\n".join(item_line(i) for i in items) or "no items"


def item_text(item: dict) -> str:
    rows = [item_line(item)]
    for key in ("issue_type", "assignee", "labels", "created_at", "closed_at", "close_reason"):
        if item.get(key):
            rows.append(f"  {key}: {shown(item[key])}")
    for dep in item.get("dependencies") or ():
        rows.append(f"  depends on {shown(dep.get('depends_on_id'))} ({shown(dep.get('type'))})")
    if item.get("description"):
        rows.append("")
        rows.append(description_text(item["description"]))
    return "\n".join(rows)


def description_text(text) -> str:
    """A description keeps its line breaks (it is prose); no other control character reaches a terminal."""
    if not isinstance(text, str):
        return shown(text)
    return "\n".join(shown(line) for line in text.replace("\r\n", "\n").split("\n"))


def blocked_text(rows) -> str:
    return "\n".join(f"{item_line(r)}  ← {', '.join(map(shown, r['blocked_by']))}"
                     for r in map(json.loads, rows)) or "no blocked items"


def ready_text(rows) -> str:
    return item_lines(json.loads(r) for r in rows)
