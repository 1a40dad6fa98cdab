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


class JoinedIds:
    """The ids of a :func:`joined` column as a set that answers a few questions without being made.

    A rig's log summary holds every record id of its log: 100,000 and more
    on a long queue.  Most commands ask it whether one or two ids are among
    them (an item looked up, a sling's new contexts), and making the set of
    all of them costs about 12 ms where a look in the joined text costs a
    fraction of one.  Whatever needs them all (iterating, a question about
    many ids, comparing) makes the set once.
    """

    __slots__ = ("_all", "_extra", "_text")
    #: A question about more ids than this makes the set.
    FEW = 16

    def __init__(self, text: str, extra: set[str] | None = None, made: set[str] | None = None):
        self._text = "\n" + text + "\n"  # each id between two newlines
        self._extra = extra or set()
        self._all = made

    def _made(self) -> set[str]:
        if self._all is None:
            self._all = set(self._text[1:-1].split("\n")) | self._extra
        return self._all

    def __contains__(self, value: object) -> bool:
        if self._all is not None or not isinstance(value, str) or "\n" in value:
            return value in self._made()
        return value in self._extra or "\n" + value + "\n" in self._text

    def isdisjoint(self, other) -> bool:
        other = other if isinstance(other, (set, frozenset, list, tuple)) else list(other)
        if self._all is None and len(other) <= self.FEW:
            return not any(value in self for value in other)
        return self._made().isdisjoint(other)

    def __rand__(self, other):
        if self._all is None and len(other) <= self.FEW:
            return {value for value in other if value in self}
        return other & self._made()

    __and__ = __rand__

    def __or__(self, other) -> JoinedIds:
        made = None if self._all is None else self._all | set(other)
        return JoinedIds(self._text[1:-1], self._extra | set(other), made)

    def __iter__(self):
        return iter(self._made())

    def __len__(self) -> int:
        if self._all is None and not self._extra:
            return self._text.count("\n") - 1
        return len(self._made())

    def __bool__(self) -> bool:
        return True  # a joined column holds at least one id (none is kept as a list)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JoinedIds):
            other = other._made()
        return isinstance(other, (set, frozenset)) and self._made() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"JoinedIds({len(self)} ids)"


def id_set(kept: object) -> JoinedIds | set[str] | None:
    """The set of the ids a :func:`joined` column holds (a :class:`JoinedIds` when joined); None when
    ``kept`` is no such column."""
    if isinstance(kept, str):
        return JoinedIds(kept)
    strings = split(kept)
    return None if strings is None else set(strings)


def whole(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = ["JoinedIds", "expand", "id_set", "joined", "split", "stretch_ends", "stretches", "whole"]
