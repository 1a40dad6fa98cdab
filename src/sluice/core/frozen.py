"""Frozen records made without code generation: ``dataclass(frozen=True)``'s classes, cheaper to define.

``dataclasses.dataclass`` writes and compiles an ``__init__``, ``__repr__``,
``__eq__``, ``__hash__``, ``__setattr__`` and ``__delattr__`` for every
class it decorates: about 0.6 ms each, so the fifty classes a hot command
imports would cost it 30 ms of start-up, as long as a bare interpreter
takes.  :func:`frozen` gives the same frozen, keyword-or-positional,
compared-by-field classes from one shared set of methods.

``__post_init__`` runs after the fields are set, as a dataclass runs it.
What it does not give: ``__slots__``, ``__match_args__``,
and the ``dataclasses`` helpers (``replace``, ``fields``, ``asdict``).  Its
``__init__`` reads the field table on each call, a few times slower than a
generated one, so a class made by the thousand in a survey stays a
dataclass; this one is for the classes made a few times per command.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any

MISSING: Any = object()


class Field:
    """What :func:`field` says of one field: a default, or how to make one, and whether it shows."""

    __slots__ = ("compare", "default", "factory", "kw_only", "repr")

    def __init__(self, default, factory, repr_: bool, compare: bool, kw_only: bool):
        self.default, self.factory, self.repr, self.compare, self.kw_only = (
            default, factory, repr_, compare, kw_only)


def field(*, default: Any = MISSING, default_factory: Any = MISSING, repr: bool = True,
          compare: bool = True, kw_only: bool = False) -> Any:
    return Field(default, default_factory, repr, compare, kw_only)


def frozen(cls):
    """Make ``cls`` a frozen record of its annotated fields (base classes' first), like a dataclass.

    A class attribute that is a descriptor naming itself (``__set_name__``:
    a cached property, a part of a document) is not a field's default.
    """
    spec: dict[str, Field] = {}
    for klass in reversed(cls.__mro__[1:]):  # the bases' fields, as each base was made
        spec.update(klass.__dict__.get("_spec", {}))
    # The class's own annotations, read as inspect.get_annotations does, without importing inspect.
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063
        value = cls.__dict__.get(name, MISSING)
        if not str(annotation).startswith("ClassVar") and not hasattr(type(value), "__set_name__"):
            spec[name] = value if isinstance(value, Field) else Field(value, MISSING, True, True, False)
    for name, f in spec.items():
        if isinstance(cls.__dict__.get(name), Field):
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
    cls._spec = spec
    cls._positional = tuple(name for name, f in spec.items() if not f.kw_only)
    for name, method in (("__init__", _init), ("__repr__", _repr), ("__eq__", _eq), ("__hash__", _hash),
                         ("__setattr__", _refuse), ("__delattr__", _refuse)):
        setattr(cls, name, method)
    return cls


def _init(self, *args, **kwargs) -> None:
    spec = type(self)._spec
    if len(args) > len(self._positional):
        raise TypeError(f"{type(self).__name__}() takes {len(self._positional)} positional arguments")
    values = dict(zip(self._positional, args, strict=False))
    for name, value in kwargs.items():
        if name not in spec or name in values:
            raise TypeError(f"{type(self).__name__}() got an unexpected or repeated argument {name!r}")
        values[name] = value
    put = object.__setattr__
    for name, f in spec.items():
        if name in values:
            put(self, name, values[name])
        elif f.default is not MISSING:
            put(self, name, f.default)
        elif f.factory is not MISSING:
            put(self, name, f.factory())
        else:
            raise TypeError(f"{type(self).__name__}() missing required argument {name!r}")
    check = getattr(self, "__post_init__", None)
    if check is not None:
        check()


def _repr(self) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name, f in self._spec.items() if f.repr)
    return f"{type(self).__qualname__}({shown})"


def _compared(self) -> tuple:
    return tuple(getattr(self, name) for name, f in self._spec.items() if f.compare)


def _eq(self, other: object) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _compared(self) == _compared(other)


def _hash(self) -> int:
    return hash(_compared(self))


def _refuse(self, name: str, *value) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")
