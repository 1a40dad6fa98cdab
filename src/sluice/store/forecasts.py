"""``runtime/forecast.json``: the head of the last forecast, so ``scheduler status`` can say when the queue
drains without replaying it.

A forecast costs a survey of the queue and a replay; ``scheduler status``
must stay cheap, so it shows only what the last forecast (``scheduler
forecast``, or a daemon tick) kept here, with its age.  The file holds the
forecast's head only — when it was made, when the queue drains, how many
items it covered, the daemon it assumed — never its rows, so it stays a few
hundred bytes however long the queue.

It is derived: replaced whole by a rename (a reader never sees half of it)
but not fsynced, since a lost forecast is only one to make again.  A file
that cannot be read or is not a forecast is warned about, naming it, and
read as no forecast: it never fails the command that looked.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sluice.logs import log
from sluice.store import fsutil

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.store.town import Town


VERSION = 1
#: The head's keys, all kept; a file missing one of them is not a forecast.
KEYS = ("at", "at_ts", "drain_at", "drain_p90_at", "items_total", "daemon")


def path(town: Town) -> Path:
    return town.runtime / "forecast.json"


def keep(town: Town, head: dict) -> None:
    """Replace the kept forecast by ``head`` (its ``KEYS``); the caller decides what a failure means."""
    data = {"version": VERSION, **{key: head[key] for key in KEYS}}
    text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    fsutil.atomic_write_bytes(path(town), text.encode("utf-8"), durable=False)


def last(town: Town) -> dict | None:
    """The last forecast's head, or None when none was kept (or the file is unusable, with a warning)."""
    where = path(town)
    try:
        text = where.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        log.warning("%s: cannot read the kept forecast (%s); showing none", where, err)
        return None
    try:
        data = json.loads(text)
    except ValueError as err:
        log.warning("%s: the kept forecast is not JSON (%s); showing none", where, err)
        return None
    if not isinstance(data, dict) or any(key not in data for key in KEYS) or not _number(data["at_ts"]):
        log.warning("%s: not a kept forecast (version %s expected); showing none", where, VERSION)
        return None
    return data


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
