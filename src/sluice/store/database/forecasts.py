"""The head of the last forecast, kept in the town database so ``scheduler status`` can say when the
queue drains without replaying it.

A forecast costs a survey of the queue and a replay; ``scheduler status``
must stay cheap, so it shows only what the last forecast (``scheduler
forecast``, or a daemon tick) kept, with its age.  The row holds the
forecast's head only — when it was made, when the queue drains, how many
items it covered, the daemon it assumed — never its rows, so it stays a few
hundred bytes however long the queue.  It is kept in the ``derived`` table
under the versions of the queue, the runs and the state it was made from, so
a reader can tell whether anything changed since.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sluice.logs import log

if TYPE_CHECKING:
    from sluice.store.files.town import Town


NAME = "forecast"
#: The head's keys, all kept; a row missing one of them is not a forecast.
KEYS = ("at", "at_ts", "drain_at", "drain_p90_at", "items_total", "daemon")
#: What a forecast is made from: the versions its row is kept under.
INPUTS = ("queue", "runs", "state", "admission")


def keep(town: Town, head: dict) -> None:
    """Replace the kept forecast by ``head`` (its ``KEYS``); the caller decides what a failure means."""
    town.db.keep(NAME, json.dumps({key: head[key] for key in KEYS}, ensure_ascii=False), *INPUTS)


def last(town: Town) -> dict | None:
    """The last forecast's head, or None when none was kept (or the row is unusable, with a warning)."""
    text = town.db.kept(NAME)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError as err:
        log.warning("%s: the kept forecast is not JSON (%s); showing none", town.db.path, err)
        return None
    if not isinstance(data, dict) or any(key not in data for key in KEYS) or not _number(data["at_ts"]):
        log.warning("%s: the kept forecast is not a forecast's head; showing none", town.db.path)
        return None
    return data


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
