"""Time stamps, fresh ids and durations: how sluice reads and makes up time.

Kept apart from the item code so that every writer (stores, events, the
executors, the daemon) stamps time and picks ids one way, and a test can see
at a glance which functions touch the clock.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Container
from datetime import UTC, date, datetime, timedelta

from sluice.core.digest import sha256

_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def now_utc() -> datetime:
    return datetime.now(UTC)


def boot_seconds() -> float | None:
    """Seconds since the machine booted, on a clock no wall-clock change moves; None where there is none.

    Linux's ``CLOCK_BOOTTIME`` (it counts time suspended, as a process's start
    time in ``/proc`` does), so a runtime measured on it survives an NTP step
    or a hand-set date in either direction.
    """
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    if clock is None:
        return None
    try:
        return time.clock_gettime(clock)
    except OSError:
        return None


def runtime_seconds(started_epoch: float | None, now_epoch: float, started_boot: float | None = None,
                    now_boot: float | None = None) -> float | None:
    """How long something has run: on the boot clock when both ends are known there, else by wall clock.

    The wall clock jumps (a forward step would make every polecat look hours
    old, a backward one would make them look not yet started); the boot clock
    does not, so it wins whenever the executor recorded a start on it.  Never
    negative; None when no start is known.
    """
    if started_boot is not None and now_boot is not None:
        return max(0.0, now_boot - float(started_boot))
    if started_epoch is None:
        return None
    return max(0.0, now_epoch - started_epoch)


def iso(ts: datetime | None = None) -> str:
    """UTC RFC 3339 with microseconds, the timestamp format sluice writes."""
    ts = ts or now_utc()
    return ts.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


#: Epoch seconds :func:`iso_epoch` spells by arithmetic: 1970 up to the last second of year 9999.
_ARITHMETIC_SPAN = (0.0, 253402300798.0)
_EPOCH_DATE = date(1970, 1, 1)
_PLAIN = (float, int)
_day_texts: dict[int, str] = {}


def iso_epoch(epoch: float) -> str:
    """``iso(datetime.fromtimestamp(epoch, UTC))``, character for character, at half its cost.

    A forecast spells tens of thousands of moments (each queued item's start
    and finish); a datetime per moment was most of what writing its rows cost.
    The microseconds are rounded half to even, as ``fromtimestamp`` rounds
    them, and each day's date is spelled once.  Outside 1970…9999, for a
    value that is no finite ``float`` or ``int``, it is the datetime's own
    spelling (or its error).  The days are POSIX days of 86,400 seconds, as
    on any system clock but one set to a ``right/`` time zone (which counts
    leap seconds, and which sluice does not support).
    """
    if type(epoch) not in _PLAIN or not _ARITHMETIC_SPAN[0] <= epoch <= _ARITHMETIC_SPAN[1]:
        return iso(datetime.fromtimestamp(epoch, UTC))
    fraction, whole = math.modf(epoch)
    micro = round(fraction * 1e6)
    seconds = int(whole)
    if micro >= 1_000_000:
        seconds, micro = seconds + 1, micro - 1_000_000
    day, second = divmod(seconds, 86400)
    date_text = _day_texts.get(day)
    if date_text is None:
        if len(_day_texts) > 4096:
            _day_texts.clear()
        date_text = _day_texts[day] = (_EPOCH_DATE + timedelta(days=day)).isoformat()
    return "%sT%02d:%02d:%02d.%06dZ" % (date_text, second // 3600, second // 60 % 60, second % 60, micro)  # noqa: UP031 - %-format is faster here


#: The order text of an unreadable or missing timestamp: after every real time.
UNDATED = "~"
#: Where times that UTC cannot spell (a year-1 or year-9999 stamp in a far time zone) are clamped.
_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


def order_text(stamp: object) -> str:
    """Any ISO timestamp as microsecond UTC text, so that string order is time order.

    Already-normalised text (the form sluice writes) comes back unchanged; an
    unreadable one sorts after every real time (and among its kind by its
    own text), never first.
    """
    if isinstance(stamp, str) and len(stamp) == 27 and stamp.endswith("Z") and stamp[19] == ".":
        return stamp
    try:
        parsed = datetime.fromisoformat(stamp)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return UNDATED + str(stamp)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        parsed = parsed.astimezone(UTC)
    except OverflowError:  # within hours of year 1 or 9999, where UTC has no year to spell it
        parsed = _EARLIEST if parsed.year < 5000 else _LATEST
    return parsed.isoformat(timespec="microseconds").replace("+00:00", "Z")


def order_of_ts(created_ts: float) -> str:
    """The tie-break text of an item from its index timestamp (0.0 means none was readable).

    Timestamps are read to the microsecond, so this text orders exactly as
    the float does.
    """
    if not created_ts:
        return UNDATED
    try:
        stamp = datetime.fromtimestamp(created_ts, UTC)
    except (ValueError, OverflowError, OSError):  # beyond UTC years 1-9999 (an edge time zone)
        stamp = _LATEST if created_ts > 0 else _EARLIEST
    return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")


def new_id(prefix: str, seed: str, taken: Container[str]) -> str:
    """A fresh ``<prefix>-<base36>`` id, adaptive length like beads' hash ids."""
    nonce = 0
    while True:
        digest = sha256(f"{seed}|{time.time_ns()}|{os.getpid()}|{nonce}".encode()).digest()
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


#: The longest duration sluice accepts anywhere (100 years).  Every duration is added to or taken
#: from the present somewhere (a throttle's end, a budget window's start, a sleep), and this keeps
#: each such time inside what a timestamp, a ``datetime`` and ``time.sleep`` can hold.
MAX_DURATION = 100 * 365 * 24 * 3600.0
MAX_DURATION_TEXT = "876000h (100 years)"


class DurationTooLong(ValueError):
    """A well-formed duration longer than :data:`MAX_DURATION`."""


def check_duration(seconds: float, shown: object) -> float:
    """``seconds`` when it is a duration sluice can compute with, else :class:`DurationTooLong`."""
    if not seconds <= MAX_DURATION:  # also refuses NaN
        raise DurationTooLong(f"duration {shown} is longer than the longest sluice accepts,"
                              f" {MAX_DURATION_TEXT}")
    return seconds


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration: ``500ms``, ``3s``, ``1m30s``, ``0``; at most :data:`MAX_DURATION`."""
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
    return check_duration(total, text)


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
    return random_ids(1)[0]


def random_ids(count: int) -> list[str]:
    """``count`` :func:`random_id` s from one read of the system's randomness: a clear of 100,000
    contexts logs 100,000 events."""
    raw = bytearray(os.urandom(16 * count))
    raw[6::16] = bytes(b & 0x0F | 0x40 for b in raw[6::16])  # version 4
    raw[8::16] = bytes(b & 0x3F | 0x80 for b in raw[8::16])  # RFC 4122 variant
    text = raw.hex()
    return [text[k:k + 32] for k in range(0, 32 * count, 32)]
