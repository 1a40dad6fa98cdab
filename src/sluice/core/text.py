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

Text that cannot be encoded has one rule too.  JSON can spell a lone
surrogate (``"\\ud800"``) and Python decodes an argument of bad bytes into
one, but no UTF-8 file, database row, terminal or reply can hold it.  Where
such text comes in — a line of an item source, a config or policy file, an
argument of any surface — :func:`unencodable` finds it and the reader
refuses it there, naming the field (a source's line is malformed and its rig
held; a surface answers with a usage error).  Where it goes out for a person
to read, :func:`printable` shows it escaped (``\\ud800``), so an error that
quotes it can still be printed.
"""

from __future__ import annotations

import json
import re
from typing import Any

# C0 and C1 controls, DEL, line/paragraph separators, the bidirectional formatting characters, and
# surrogates (no encoding can print a lone one).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")


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


# -- text that cannot be encoded ------------------------------------------------------------

#: What in the bytes of a JSON document can decode to a lone surrogate: a ``\\uD800``–``\\uDFFF``
#: escape, or the bytes UTF-8 would give one (``json`` decodes bytes with ``surrogatepass``).
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def may_hold_unencodable(raw: bytes) -> bool:
    """Whether JSON ``raw`` could decode to text :func:`unencodable` refuses: a quick look at the
    bytes, so a reader walks the decoded value only when it must (a paired escape also matches)."""
    # Nearly every line holds none of the three marks: three byte scans, and the pattern only after one.
    return ((b"\\ud" in raw or b"\\uD" in raw or b"\xed" in raw)
            and _MAYBE_SURROGATE.search(raw) is not None)


def unencodable(value: Any, where: str = "") -> str | None:
    """Where in ``value`` (a JSON value) text UTF-8 cannot encode stands, or None when it has none.

    The answer names the place as a reader would look for it: ``title``,
    ``labels[2]``, ``metadata.touches[0]``, ``a key of metadata``; for a
    bare string, ``where`` itself.
    """
    if isinstance(value, str):
        return None if encodes(value) else (where or "the text")
    if isinstance(value, dict):
        for key, inner in value.items():
            inside = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and not encodes(key):
                return f"a key of {where}" if where else "a key"
            found = unencodable(inner, inside)
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for index, inner in enumerate(value):
            found = unencodable(inner, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def encodes(text: str) -> bool:
    """Whether UTF-8 can encode ``text`` (ASCII, the usual case, is answered without encoding it)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_text(value: Any) -> str:
    """``value`` as compact JSON, other scripts kept as they are; text no encoding can hold is written as
    JSON's own escape (``\\ud800``), which reads back as it was.

    For the records that must be kept whatever an agent or a file put in
    them (a run's record, an event): the rule refuses such text where it
    comes in, and this keeps it, escaped, if it ever gets past.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if encodes(text) else json.dumps(value, separators=(",", ":"))


def unencodable_problem(value: Any, where: str = "") -> str | None:
    """:func:`unencodable` as the sentence a refusal says, or None."""
    found = unencodable(value, where)
    if found is None:
        return None
    return f"{printable(found)} holds text that cannot be encoded (a lone surrogate such as \\ud800)"


def clipped(text: str, most: int = 60) -> str:
    """``text`` shown in a message: :func:`printable`, and cut to ``most`` characters with the length
    said, so a refusal of a long input never echoes all of it."""
    shown = printable(text)
    if len(shown) <= most:
        return shown
    return f"{shown[:most]}… ({len(text):,} characters)"
