"""What the check for text no encoding holds costs a read of an item source.

Usage:  python benchmarks/bench_parse_check.py

Parses 100,000 export lines with ``jsonlog.parse_line``, as every source reader does, with the check
(``core.text.may_hold_unencodable``) and with it stubbed out, alternating seven rounds; prints the
median CPU seconds of each, for lines written as UTF-8 and as ASCII escapes.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from sluice.store.files import jsonlog

CHECK = jsonlog.may_hold_unencodable


def record(k: int) -> dict:
    return {"id": f"ln-w{k:06d}", "title": f"work item {k} é", "status": "open", "priority": k % 5,
            "issue_type": "task", "labels": ["a", "b"], "created_at": "2026-01-01T00:00:00Z"}


def parse_all(lines: list[bytes], check: bool) -> float:
    jsonlog.may_hold_unencodable = CHECK if check else (lambda raw: False)
    started = time.process_time()
    for number, line in enumerate(lines, 1):
        jsonlog.parse_line(Path("x"), number, line)
    return time.process_time() - started


def main() -> None:
    for name, ascii_only in (("UTF-8 lines", False), ("escaped lines (\\u00e9)", True)):
        lines = [(json.dumps(record(k), ensure_ascii=ascii_only) + "\n").encode() for k in range(100_000)]
        seen: dict[bool, list[float]] = {True: [], False: []}
        for round_ in range(7):
            for check in ((False, True) if round_ % 2 else (True, False)):
                seen[check].append(parse_all(lines, check))
        without, with_ = statistics.median(seen[False]), statistics.median(seen[True])
        print(f"{name}: without the check {without:.3f} s CPU, with {with_:.3f} s ({with_ / without:.2f}x)")


if __name__ == "__main__":
    main()
