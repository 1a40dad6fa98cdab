"""Time stamps and fresh ids: the two things sluice makes up rather than reads.

Kept apart from the item code so that every writer (stores, events, the
executors, the daemon) stamps time and picks ids one way, and a test can see
at a glance which functions touch the clock.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Container
from datetime import UTC, datetime

_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def now_utc() -> datetime:
    return datetime.now(UTC)


def iso(ts: datetime | None = None) -> str:
    """UTC RFC 3339 with microseconds, the timestamp format sluice writes."""
    ts = ts or now_utc()
    return ts.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def new_id(prefix: str, seed: str, taken: Container[str]) -> str:
    """A fresh ``<prefix>-<base36>`` id, adaptive length like beads' hash ids."""
    nonce = 0
    while True:
        digest = hashlib.sha256(f"{seed}|{time.time_ns()}|{os.getpid()}|{nonce}".encode()).digest()
        number = int.from_bytes(digest[:8], "big")
        suffix = ""
        while number:
            number, rem = divmod(number, 36)
            suffix += _B36[rem]
        length = 4 + nonce // 10
        candidate = f"{prefix}-{suffix[:length]}"
        if candidate not in taken:
            return candidate
        nonce += 1
