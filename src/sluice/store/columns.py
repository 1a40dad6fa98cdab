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


class Slots:
    """A column of strings as one text of equal slots, each string padded to the slot with newlines.

    A reading of 100,000 queued items is carried past a sling or a cycle
    by a few lookups, removals and insertions in its columns; as lists,
    parsing them back made 100,000 strings a column each time (about 7 ms
    a column).  As slots, reading one is one string, the ``i``-th value is
    a slice, finding a value is a search in C, and taking out or putting
    in a value joins slices.  Most columns (context ids, enqueue times) are
    of one width already and need no padding.  Behaves as a list where
    readers use one: ``len``, ``[i]``, ``in``, ``index``, iteration.
    """

    __slots__ = ("size", "text", "width")

    def __init__(self, text: str, width: int, size: int):
        self.text, self.width, self.size = text, width, size

    @classmethod
    def of(cls, values: list[str]) -> Slots | None:
        """``values`` as slots; None when one of them holds a newline (then they stay a list)."""
        text = "".join(values)
        if "\n" in text:
            return None
        width = max(map(len, values), default=0)
        if len(text) != width * len(values):  # not all of one width: each padded to the widest
            text = "".join(value.ljust(width, "\n") for value in values)
        return cls(text, width, len(values))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> str:
        if index < 0:
            index += self.size
        if not 0 <= index < self.size:
            raise IndexError(index)
        width = self.width
        return self.text[index * width:(index + 1) * width].rstrip("\n")

    def index(self, value: str) -> int:
        """Where ``value`` stands first; ValueError when it does not."""
        width = self.width
        if not isinstance(value, str) or "\n" in value or len(value) > width or width == 0:
            if width == 0 and value == "" and self.size:
                return 0
            raise ValueError(value)
        slot = value.ljust(width, "\n")
        at = self.text.find(slot)
        while at != -1 and at % width:  # a match across two slots is no value
            at = self.text.find(slot, at + 1)
        if at == -1:
            raise ValueError(value)
        return at // width

    def __contains__(self, value: object) -> bool:
        try:
            self.index(value)  # type: ignore[arg-type]
        except ValueError:
            return False
        return True

    def __iter__(self):
        width, text = self.width, self.text
        return iter([text[k * width:(k + 1) * width].rstrip("\n") for k in range(self.size)])

    def inserted(self, index: int, value: str) -> Slots | list[str]:
        """The column with ``value`` put at ``index`` (a list when it holds a newline)."""
        if "\n" in value or len(value) > self.width:
            values = list(self)
            values.insert(index, value)
            return Slots.of(values) or values
        at = index * self.width
        self.text = self.text[:at] + value.ljust(self.width, "\n") + self.text[at:]
        self.size += 1
        return self

    def removed(self, gone: set[int]) -> Slots:
        """The column without the values at the positions ``gone``."""
        width, parts, start = self.width, [], 0
        for position in sorted(gone):
            parts.append(self.text[start * width:position * width])
            start = position + 1
        parts.append(self.text[start * width:])
        self.text, self.size = "".join(parts), self.size - len(gone)
        return self

    def to_json(self) -> dict:
        return {"width": self.width, "size": self.size, "text": self.text}

    @classmethod
    def from_json(cls, kept: object) -> Slots | None:
        if not isinstance(kept, dict):
            return None
        text, width, size = kept.get("text"), kept.get("width"), kept.get("size")
        if not (isinstance(text, str) and whole(width) and whole(size) and width >= 0 and size >= 0
                and len(text) == width * size):
            return None
        return cls(text, width, size)


def strings(values: list[str]) -> dict | list[str]:
    """A column of strings as it is kept: :class:`Slots`, or a list when one of them holds a newline."""
    slots = values if isinstance(values, Slots) else Slots.of(values)
    return slots.to_json() if slots is not None else list(values)


def strings_back(kept: object) -> Slots | list[str] | None:
    """The column :func:`strings` kept; None when ``kept`` is neither form."""
    if isinstance(kept, dict):
        return Slots.from_json(kept)
    if isinstance(kept, list) and all(isinstance(value, str) for value in kept):
        return kept
    return None


def inserted(column: Slots | list, index: int, value) -> Slots | list:
    """``column`` with ``value`` put at ``index``."""
    if isinstance(column, Slots):
        return column.inserted(index, value)
    column.insert(index, value)
    return column


def removed(column: Slots | list, gone: set[int]) -> Slots | list:
    """``column`` without the values at the positions ``gone``."""
    if isinstance(column, Slots):
        return column.removed(gone)
    if len(gone) < 64:  # a few: each a move of the rest of the column
        for position in sorted(gone, reverse=True):
            del column[position]
        return column
    return [value for position, value in enumerate(column) if position not in gone]


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


__all__ = ["JoinedIds", "Slots", "expand", "id_set", "inserted", "joined", "removed", "split", "stretch_ends",
           "stretches", "strings", "strings_back", "whole"]
