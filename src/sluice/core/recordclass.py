"""sluice's record classes: what ``dataclass`` gives, without its cost at import.

``dataclasses.dataclass`` writes and compiles an ``__init__``, ``__repr__``,
``__eq__`` (and for frozen classes ``__hash__``, ``__setattr__`` and
``__delattr__``) for every class it decorates, about 0.6 ms a class, and the
module itself brings ``inspect``, ``ast`` and ``dis``: some 20 ms of a hot
command's start-up went there, more than half of what a bare interpreter
takes.  :func:`recordclass` makes the same classes from one shared set of methods
and compiles nothing at import.

``__init__`` is the one method whose speed matters in bulk (a survey makes
thousands of works and candidates), so each class starts with a shared
``__init__`` that reads the field table, and after :data:`COMPILE_AFTER`
instances it compiles its own, the code a dataclass would have written.  A
class made a few times per command never pays for code generation; one made
by the thousand pays once and then runs at a dataclass's speed.

Kept from dataclasses: positional-or-keyword and keyword-only fields,
defaults and default factories, ``init=False``, ``repr`` and ``compare``
per field, ``__post_init__``, ``__match_args__``, frozen classes
(:class:`FrozenInstanceError`), ``__slots__`` (pickling included), and the
helpers :func:`fields`, :func:`replace` and :func:`asdict`.  Left out:
ordering, ``InitVar``, and ``asdict``'s deep copy of leaf values.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

MISSING: Any = object()

#: How many instances a class makes with the shared ``__init__`` before it compiles its own: about
#: where compiling (0.2 ms) starts to pay for itself (1.5 µs a record, for a class of nine fields).
COMPILE_AFTER = 128


class FrozenInstanceError(AttributeError):
    """An assignment to a field of a frozen record."""


class Field:
    """One field: its name and annotation, a default or how to make one, and where it takes part."""

    __slots__ = ("compare", "default", "factory", "init", "kw_only", "name", "repr", "type")

    def __init__(self, default=MISSING, factory=MISSING, repr_: bool = True, compare: bool = True,
                 kw_only: bool = False, init: bool = True):
        self.default, self.factory, self.repr, self.compare, self.kw_only, self.init = (
            default, factory, repr_, compare, kw_only, init)
        self.name, self.type = "", ""

    def named(self, name: str, annotation: Any) -> Field:
        made = Field(self.default, self.factory, self.repr, self.compare, self.kw_only, self.init)
        made.name, made.type = name, annotation
        return made

    def __repr__(self) -> str:
        return f"Field({self.name!r})"


def field(*, default: Any = MISSING, default_factory: Any = MISSING, repr: bool = True,
          compare: bool = True, kw_only: bool = False, init: bool = True) -> Any:
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default, default_factory, repr, compare, kw_only, init)


def recordclass(cls=None, /, *, frozen: bool = False, slots: bool = False):
    """Make ``cls`` a record of its annotated fields (base classes' first), like ``@dataclass``.

    A class attribute that is a descriptor naming itself (``__set_name__``:
    a cached property, a part of a document) is not a field's default.
    Methods the class defines itself (``__repr__``, ``__hash__``...) are kept.
    """
    if cls is None:
        return lambda klass: _make(klass, frozen, slots)
    return _make(cls, frozen, slots)


def frozen(cls):
    """``@recordclass(frozen=True)``."""
    return _make(cls, True, False)


def _make(cls, is_frozen: bool, slots: bool):
    spec: dict[str, Field] = {}
    for klass in reversed(cls.__mro__[1:]):  # the bases' fields, as each base was made
        spec.update(klass.__dict__.get("_spec", {}))
    # The class's own annotations, read as inspect.get_annotations does, without importing inspect.
    own = cls.__dict__
    for name, annotation in own.get("__annotations__", {}).items():
        value = own.get(name, MISSING)
        if str(annotation).startswith("ClassVar") or hasattr(type(value), "__set_name__"):
            continue
        spec[name] = (value if isinstance(value, Field) else Field(value)).named(name, annotation)
    _check_order(cls, spec)
    if slots:
        cls = _slotted(cls, spec, is_frozen)
    else:
        for name, f in spec.items():
            if isinstance(cls.__dict__.get(name), Field):
                if f.default is MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, f.default)
    cls._spec = spec
    cls._positional = tuple(name for name, f in spec.items() if f.init and not f.kw_only)
    cls._made = 0
    compared = tuple(name for name, f in spec.items() if f.compare)
    getter = attrgetter(*compared) if len(compared) > 1 else (
        (lambda value, get=attrgetter(compared[0]): (get(value),)) if compared else (lambda value: ()))
    cls._compared = staticmethod(getter)
    cls.__match_args__ = cls._positional
    methods = {"__init__": _shared_init(cls), "__repr__": _repr, "__eq__": _eq}
    if is_frozen:
        methods.update(__setattr__=_refuse, __delattr__=_refuse)
        if "__hash__" not in cls.__dict__ or cls.__dict__["__hash__"] is None:
            methods["__hash__"] = _hash
    elif "__hash__" not in cls.__dict__:
        cls.__hash__ = None  # mutable and compared by value: unhashable, as a dataclass
    for name, method in methods.items():
        if name == "__hash__" or name not in cls.__dict__:
            setattr(cls, name, method)
    return cls


def _check_order(cls, spec: dict[str, Field]) -> None:
    seen_default = ""
    for name, f in spec.items():
        if not f.init or f.kw_only:
            continue
        if f.default is not MISSING or f.factory is not MISSING:
            seen_default = name
        elif seen_default:
            raise TypeError(f"{cls.__name__}: non-default argument {name!r} follows default argument "
                            f"{seen_default!r}")


def _slotted(cls, spec: dict[str, Field], is_frozen: bool):
    """The class made again with ``__slots__`` for its own fields, as ``dataclass(slots=True)`` does."""
    inherited = {name for klass in cls.__mro__[1:] for name in klass.__dict__.get("__slots__", ())}
    body = dict(cls.__dict__)
    for name in spec:
        body.pop(name, None)
    body.pop("__dict__", None)
    body.pop("__weakref__", None)
    body["__slots__"] = tuple(name for name in spec if name not in inherited)
    if is_frozen:  # pickle restores slots with setattr, which a frozen record refuses
        body.setdefault("__getstate__", _getstate)
        body.setdefault("__setstate__", _setstate)
    made = type(cls)(cls.__name__, cls.__bases__, body)
    made.__qualname__ = cls.__qualname__
    return made


def _getstate(self) -> tuple:
    return tuple(getattr(self, name) for name in self._spec)


def _setstate(self, state: tuple) -> None:
    for name, value in zip(self._spec, state, strict=True):
        object.__setattr__(self, name, value)


def _shared_init(cls):
    """The ``__init__`` a class starts with: it reads the field table, until the class compiles its own."""

    def __init__(self, *args, **kwargs) -> None:
        cls._made += 1
        if cls._made > COMPILE_AFTER and cls.__dict__.get("__init__") is __init__:
            cls.__init__ = _compiled_init(cls)
            cls.__init__(self, *args, **kwargs)
            return
        _init_by_table(cls, self, args, kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _init_by_table(cls, self, args: tuple, kwargs: dict) -> None:
    spec, positional = cls._spec, cls._positional
    if len(args) > len(positional):
        raise TypeError(f"{cls.__name__}() takes {len(positional)} positional arguments, "
                        f"{len(args)} were given")
    values = dict(zip(positional, args, strict=False))
    for name, value in kwargs.items():
        f = spec.get(name)
        if f is None or not f.init or name in values:
            raise TypeError(f"{cls.__name__}() got an unexpected or repeated argument {name!r}")
        values[name] = value
    put = object.__setattr__
    for name, f in spec.items():
        if name in values:
            put(self, name, values[name])
        elif f.default is not MISSING:
            put(self, name, f.default)
        elif f.factory is not MISSING:
            put(self, name, f.factory())
        elif f.init:
            raise TypeError(f"{cls.__name__}() missing required argument {name!r}")
    check = getattr(self, "__post_init__", None)
    if check is not None:
        check()


def _compiled_init(cls):
    """The ``__init__`` a dataclass would have written for ``cls``, compiled now."""
    names: dict[str, Any] = {"__put": object.__setattr__, "__MISSING": MISSING}
    plain = cls.__setattr__ is object.__setattr__  # not frozen: a plain assignment, cheaper than a call
    params, keywords, body = [], [], []
    for index, (name, f) in enumerate(cls._spec.items()):
        default = f"__d{index}"
        if f.default is not MISSING:
            names[default] = f.default
        if f.factory is not MISSING:
            names[f"__f{index}"] = f.factory
        if f.init:
            param = name if f.default is MISSING and f.factory is MISSING else (
                f"{name}={default}" if f.factory is MISSING else f"{name}=__MISSING")
            (keywords if f.kw_only else params).append(param)
            value = name if f.factory is MISSING else f"__f{index}() if {name} is __MISSING else {name}"
        elif f.factory is not MISSING:
            value = f"__f{index}()"
        elif f.default is not MISSING:
            value = default
        else:
            continue
        body.append(f"    self.{name} = {value}" if plain else f"    __put(self, {name!r}, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    signature = ", ".join(["self", *params, *(["*", *keywords] if keywords else [])])
    source = f"def __init__({signature}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(compile(source, f"<record {cls.__qualname__}>", "exec"), names)  # only our field names
    made = names["__init__"]
    made.__qualname__ = f"{cls.__qualname__}.__init__"
    return made


def _repr(self) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name, f in self._spec.items() if f.repr)
    return f"{type(self).__qualname__}({shown})"


def _eq(self, other: object) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return self._compared(self) == other._compared(other)


def _hash(self) -> int:
    return hash(self._compared(self))


def _refuse(self, name: str, *value) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


# -- the dataclasses helpers, for records ------------------------------------------------------------------


def is_record(value: Any) -> bool:
    """Whether ``value`` is a record class or an instance of one."""
    return isinstance(getattr(value, "_spec", None), dict)


def fields(value: Any) -> tuple[Field, ...]:
    """The fields of a record or record class, in order."""
    if not is_record(value):
        raise TypeError(f"{value!r} is not a record")
    return tuple(value._spec.values())


def replace(value: Any, /, **changes: Any) -> Any:
    """A copy of ``value`` with ``changes``, made through ``__init__`` (so ``__post_init__`` runs)."""
    spec = type(value)._spec
    for name in changes:
        f = spec.get(name)
        if f is not None and not f.init:
            raise ValueError(f"field {name!r} is declared with init=False, it cannot be replaced")
    kept = {name: getattr(value, name) for name, f in spec.items() if f.init and name not in changes}
    return type(value)(**kept, **changes)


def asdict(value: Any) -> dict[str, Any]:
    """The record as a dict, records inside it (in lists, tuples and dicts too) as dicts."""
    if not is_record(value) or isinstance(value, type):
        raise TypeError("asdict() should be called on record instances")
    return _plain(value)


def _plain(value: Any) -> Any:
    if is_record(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in value._spec}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return type(value)(*map(_plain, value)) if hasattr(value, "_fields") else tuple(map(_plain, value))
    if isinstance(value, dict):
        return {_plain(key): _plain(item) for key, item in value.items()}
    return value
