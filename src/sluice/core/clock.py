"""Time stamps, fresh ids and durations: how sluice reads and makes up time.

Kept apart from the item code so that every writer (stores, events, the
executors, the daemon) stamps time and picks ids one way, and a test can see
at a glance which functions touch the clock.
"""

from __future__ import annotations

import hashlib
import os
import re
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


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration: ``500ms``, ``3s``, ``1m30s``, ``0``."""
    text = str(text).strip()
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {text!r} (expected e.g. 500ms, 3s, 1m30s)")
    return total


def format_duration(seconds: float) -> str:
    """The shortest Go-style spelling of a duration (``1m30s``, ``500ms``, ``0s``)."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{round(seconds * 1000):d}ms"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    frac = seconds - whole
    out = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    if secs or frac or not out:
        out += f"{secs + frac:g}s"
    return out


def random_id() -> str:
    """A random 128-bit id in 32 hex digits, shaped as ``uuid.uuid4().hex`` is (version 4).

    Made from ``os.urandom`` here because importing :mod:`uuid` (it pulls in
    :mod:`platform`) costs every command that logs an event ~5 ms of start-up.
    """
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return raw.hex()
