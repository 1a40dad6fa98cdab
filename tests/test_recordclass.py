"""sluice's record classes behave as the dataclasses they replace, before and after compiling ``__init__``.

Each case builds one class layout twice, with :func:`recordclass` and with
``dataclasses.dataclass``, and holds the pair to the same answers: the
arguments each accepts or refuses, repr, equality, hashing, frozenness,
``fields``, ``replace`` and ``asdict``.  Every check runs on instances made
by the shared ``__init__`` and on instances made once the class has
compiled its own.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core import recordclass as rc
from sluice.core.recordclass import FrozenInstanceError, asdict, field, fields, recordclass, replace

# A field: how it gets a value (required, default, factory), then kw_only, init, repr, compare.
field_specs = st.tuples(st.sampled_from(["required", "default", "factory"]), st.booleans(), st.booleans(),
                        st.booleans(), st.booleans())
layouts = st.tuples(st.lists(field_specs, min_size=0, max_size=5), st.booleans(), st.booleans())


def _pair(specs, frozen: bool, slots: bool):
    """The layout as a record class and as a dataclass, or None when dataclasses refuses it too."""
    made = []
    makers = ((lambda c: recordclass(c, frozen=frozen, slots=slots), field),
              (lambda c: dataclasses.dataclass(c, frozen=frozen, slots=slots), dataclasses.field))
    for maker, field_of in makers:
        body: dict = {"__annotations__": {}, "__qualname__": "Shape", "__module__": __name__}
        for index, (how, kw_only, init, shown, compared) in enumerate(specs):
            init = init or how == "required"  # a field left out of __init__ needs a value
            name = f"f{index}"
            body["__annotations__"][name] = "object"
            options = {"kw_only": kw_only, "init": init, "repr": shown, "compare": compared}
            if how == "default":
                options["default"] = index
            elif how == "factory":
                options["default_factory"] = list
            body[name] = field_of(**options)
        try:
            made.append(maker(type("Shape", (), body)))
        except TypeError as err:
            made.append(err)
    return made


def _arguments(cls, values):
    """Positional values for the positional fields, keywords for the keyword-only ones."""
    given_fields = [f for f in fields(cls) if f.init]
    positional = [f for f in given_fields if not f.kw_only]
    keywords = {f.name: next(values) for f in given_fields if f.kw_only}
    return [next(values) for _ in positional], keywords


def _outcome(call):
    try:
        return call()
    except TypeError:
        return TypeError


@settings(max_examples=60, deadline=None)
@given(layouts, st.lists(st.integers(-3, 3), min_size=12, max_size=12))
def test_a_record_class_answers_as_its_dataclass_twin(layout, numbers):
    specs, frozen, slots = layout
    record_cls, twin_cls = _pair(specs, frozen, slots)
    if isinstance(twin_cls, TypeError) or isinstance(record_cls, TypeError):
        assert isinstance(twin_cls, TypeError) and isinstance(record_cls, TypeError)
        return
    assert [f.name for f in fields(record_cls)] == [f.name for f in dataclasses.fields(twin_cls)]
    assert record_cls.__match_args__ == twin_cls.__match_args__
    args, kwargs = _arguments(record_cls, iter(numbers))
    for phase in ("shared", "compiled"):
        if phase == "compiled":
            for _ in range(rc.COMPILE_AFTER + 1):
                record_cls(*args, **kwargs)
            assert record_cls.__init__.__code__.co_filename.startswith("<record")
        made, twin = record_cls(*args, **kwargs), twin_cls(*args, **kwargs)
        assert repr(made) == repr(twin)
        assert made == record_cls(*args, **kwargs) and made != twin
        assert asdict(made) == dataclasses.asdict(twin)
        if frozen:  # the same hash (of the compared fields), or unhashable for both (a list in them)
            assert _outcome(lambda m=made: hash(m)) == _outcome(lambda t=twin: hash(t))
            with pytest.raises(FrozenInstanceError):
                made.f0 = 1
        else:
            assert record_cls.__hash__ is None and twin_cls.__hash__ is None
        # Too many positional values, an unknown keyword, a value given twice: both refuse.
        assert _outcome(lambda: record_cls(*args, 9, **kwargs)) is TypeError
        assert _outcome(lambda: record_cls(*args, unknown=1, **kwargs)) is TypeError
        if args:
            first = next(f.name for f in fields(record_cls) if f.init and not f.kw_only)
            assert _outcome(lambda n=first: record_cls(*args, **{n: 1}, **kwargs)) is TypeError
        required = [f.name for f in fields(record_cls) if f.init and f.default is rc.MISSING
                    and f.factory is rc.MISSING]
        if required:
            assert _outcome(lambda: record_cls()) is TypeError and _outcome(lambda: twin_cls()) is TypeError
        changeable = [f.name for f in fields(record_cls) if f.init]
        if changeable:
            change = {changeable[-1]: "changed"}
            assert asdict(replace(made, **change)) == dataclasses.asdict(dataclasses.replace(twin, **change))


@recordclass(frozen=True, slots=True)
class FrozenSlotted:
    name: str
    tags: tuple = ()
    size: int = field(default=0, kw_only=True)
    kind: ClassVar[str] = "constant"


@recordclass(slots=True)
class Slotted:
    name: str
    seen: list = field(default_factory=list)


@recordclass
class WithCheck:
    name: str
    derived: str = field(init=False, repr=False, compare=False)
    notes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a name is required")
        self.derived = self.name.upper()


@pytest.mark.parametrize("made", [FrozenSlotted("a", ("x",), size=2), Slotted("b", [1]), WithCheck("c")],
                         ids=lambda made: type(made).__name__)
def test_records_survive_pickling_and_slotted_ones_have_no_dict(made):
    for _ in range(rc.COMPILE_AFTER + 2):  # through the compiled __init__ as well
        type(made)(*([made.name] if not isinstance(made, FrozenSlotted) else [made.name, made.tags]))
    assert pickle.loads(pickle.dumps(made)) == made
    if type(made).__dict__.get("__slots__") is not None:
        assert not hasattr(made, "__dict__") and type(made).__slots__ == tuple(f.name for f in fields(made))


def test_post_init_runs_on_every_path_and_init_false_fields_come_from_it():
    for _ in range(rc.COMPILE_AFTER + 2):
        assert WithCheck("x").derived == "X"
        with pytest.raises(ValueError, match="a name is required"):
            WithCheck("")
    assert replace(WithCheck("a"), name="b").derived == "B"
    with pytest.raises(ValueError, match="init=False"):
        replace(WithCheck("a"), derived="no")
    assert FrozenSlotted.kind == "constant" and "kind" not in {f.name for f in fields(FrozenSlotted)}
    assert WithCheck("a").notes is not WithCheck("a").notes  # a factory makes one per record


def test_a_required_field_after_a_defaulted_one_is_refused_when_the_class_is_made():
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument 'a'"):
        @recordclass
        class Broken:
            a: int = 0
            b: int
    assert not rc.is_record(object()) and rc.is_record(Slotted) and rc.is_record(Slotted("a"))
    with pytest.raises(TypeError):
        asdict(Slotted)
