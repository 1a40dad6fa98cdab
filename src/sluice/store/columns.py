"""Long columns of a kept file, written so that reading them back costs a few strings, not a row each.

A kept file that holds 100,000 of something (the ids of a rig's log, the
forecast's reading of the queue) spent most of its reading in the JSON
parser: one string object, or one small list, per entry.  A column of
strings is kept instead as one string joined by newlines (one object to
parse, one ``split``), and a column of values that come in long stretches
(kinds, scores) as ``[value, count]`` stretches.  A string that holds a
newline cannot be joined; its column is kept as a plain list, which
:func:`split` reads too.
"""

from __future__ import annotations

from itertools import compress, count
from operator import ne


def joined(strings: list[str]) -> str | list[str]:
    """``strings`` as one string, or as a list when one of them holds a newline (or there are none)."""
    if not strings:
        return []
    text = "\n".join(strings)
    return text if text.count("\n") == len(strings) - 1 else list(strings)


def split(kept: object) -> list[str] | None:
    """The strings :func:`joined` kept; None when ``kept`` is neither form."""
    if isinstance(kept, str):
        return kept.split("\n")
    if isinstance(kept, list) and all(isinstance(value, str) for value in kept):
        return kept
    return None


def stretches(values: list) -> list[list]:
    """``values`` as stretches of equal values, ``[value, count]`` each, in order."""
    ends = stretch_ends(values)
    out, start = [], 0
    for end in ends:
        out.append([values[start], end - start])
        start = end
    return out


def stretch_ends(values: list) -> list[int]:
    """Where each stretch of equal values ends (exclusive), in order: found by C loops, not a Python one."""
    if not values:
        return []
    changes = list(compress(count(1), map(ne, values[1:], values[:-1])))
    changes.append(len(values))
    return changes


def expand(kept: object, valid) -> list | None:
    """The values :func:`stretches` kept; None when a stretch is not ``[valid value, count ≥ 1]``."""
    if not isinstance(kept, list):
        return None
    out: list = []
    for stretch in kept:
        if not (isinstance(stretch, list) and len(stretch) == 2 and valid(stretch[0]) and whole(stretch[1])
                and stretch[1] >= 1):
            return None
        out.extend([stretch[0]] * stretch[1])
    return out


def whole(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = ["expand", "joined", "split", "stretch_ends", "stretches", "whole"]
