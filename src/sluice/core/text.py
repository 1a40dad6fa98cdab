"""Item text made safe for a terminal: one rule for every text view.

Titles and ids come from exports and agents, so they may hold anything JSON
can: ``null``, numbers, lists, and strings with control characters.  A
newline would start a fake row, an escape sequence (``\\x1b[31m``) would
drive the terminal, U+202E would reverse what follows it.  :func:`printable`
turns any such value into one line that shows those characters escaped, the
way Python's ``repr`` spells them, and leaves everything else alone.

Views escape each field with :func:`printable`, so a newline in a title
cannot start a row; and everything a surface prints for a person — a text
view, an error, a warning, a daemon log line — passes :func:`printable_text`
on its way out, so a field a new view forgets still cannot drive the
terminal.
"""

from __future__ import annotations

import json
import re
from typing import Any

# C0 and C1 controls, DEL, line/paragraph separators, and the bidirectional formatting characters.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


# The same, but newlines and tabs are kept: a whole text view is many lines, some in columns.
_UNSAFE_IN_TEXT = re.compile(_UNSAFE.pattern.replace("\x00-\x1f", "\x00-\x08\x0b-\x1f"))


def _escape(match: re.Match) -> str:
    return repr(match.group())[1:-1]


def printable(value: Any) -> str:
    """``value`` as one line of terminal-safe text; ``None`` is the empty string.

    Strings keep their printable characters; any other JSON type is shown as
    compact JSON (``true``, ``3``, ``["a"]``), so nothing a file holds can
    crash a listing or pass through raw.
    """
    if value is None:
        return ""
    if not isinstance(value, str):
        try:
            value = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        except (TypeError, ValueError):
            value = str(value)
    return _UNSAFE.sub(_escape, value)


def printable_text(text: str) -> str:
    """A whole text view (or message) with every unsafe character escaped but its line breaks and tabs."""
    return _UNSAFE_IN_TEXT.sub(_escape, text)
