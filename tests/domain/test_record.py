"""``record`` is a dataclass in every way a caller can see, generated only when first built."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys
import threading
from typing import ClassVar

import pytest

from corral.domain import record as record_module
from corral.domain.record import asdict, field, materialize, record, replace


@record
class Point:
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    note: str | None = field(default=None, repr=False)
    KIND: ClassVar[str] = "point"


@record
class Labelled(Point):
    label: str = ""


@record(frozen=False)
class Counter:
    n: int
    seen: list[int] = field(default_factory=list)


@record
class Empty:
    pass


@record
class Custom:
    a: int

    def __repr__(self) -> str:
        return "custom"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Custom)

    def __hash__(self) -> int:
        return 7


def test_construction_defaults_and_factories() -> None:
    p = Point(1)
    assert (p.x, p.y, p.tags, p.note) == (1, 0, [], None)
    assert Point(1).tags is not Point(1).tags
    assert Point(x=2, y=3, tags=["a"], note="n") == Point(2, 3, ["a"], "n")
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, z=2)  # type: ignore[call-arg]


def test_fields_of_bases_come_first_in_order() -> None:
    item = Labelled(1, 2, ["t"], None, "L")
    assert [f.name for f in dataclasses.fields(item)] == ["x", "y", "tags", "note", "label"]
    assert Labelled.__match_args__ == ("x", "y", "tags", "note", "label")
    match item:
        case Labelled(x, y, label=label):
            assert (x, y, label) == (1, 2, "L")


def test_repr_eq_and_hash_are_a_frozen_dataclass() -> None:
    assert repr(Point(1, 2, ["a"], "secret")) == "Point(x=1, y=2, tags=['a'])"
    assert Point(1) == Point(1)
    assert Point(1) != Point(2)
    assert Point(1) != Labelled(1)  # another class, though the same values
    assert (Point(1) == (1, 0, [], None)) is False
    assert hash(Empty()) == hash(Empty()) and Empty() == Empty()
    assert hash(Labelled(1, tags=())) == hash(Labelled(1, tags=()))  # type: ignore[arg-type]
    assert Point.KIND == "point" and "KIND" not in [f.name for f in dataclasses.fields(Point(0))]


def test_frozen_and_mutable() -> None:
    p = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.x  # type: ignore[misc]
    c = Counter(1)
    c.n = 5
    assert c == Counter(5)
    with pytest.raises(TypeError, match="unhashable"):
        hash(c)


def test_a_class_keeps_the_methods_it_defines() -> None:
    assert repr(Custom(1)) == "custom"
    assert Custom(1) == Custom(2)
    assert hash(Custom(1)) == 7


def test_replace_and_asdict_both_ways() -> None:
    item = Labelled(1, tags=["a"], label="L")
    assert replace(item, y=9) == Labelled(1, 9, ["a"], None, "L")
    assert dataclasses.replace(item, y=9) == replace(item, y=9)
    nested = Counter(1, seen=[1])
    assert asdict(item) == dataclasses.asdict(item) == {"x": 1, "y": 0, "tags": ["a"], "note": None, "label": "L"}
    assert asdict(nested) == {"n": 1, "seen": [1]}
    with pytest.raises(TypeError, match="unexpected keyword"):
        replace(item, nope=1)
    with pytest.raises(TypeError, match="not a record"):
        replace(object())


def test_copy_and_pickle() -> None:
    item = Labelled(1, tags=["a"], label="L")
    assert pickle.loads(pickle.dumps(item)) == item
    assert copy.deepcopy(item) == item and copy.copy(item) == item


def test_dataclass_introspection_before_the_first_instance() -> None:
    @record
    class Late:
        a: int

    assert Late in record_module._PENDING
    assert dataclasses.is_dataclass(Late)  # reading __dataclass_fields__ generates it
    assert Late not in record_module._PENDING
    assert [f.name for f in dataclasses.fields(Late)] == ["a"]


def test_a_field_without_default_after_one_with_is_refused_when_generated() -> None:
    @record
    class Bad:
        a: int = 0
        b: int  # type: ignore[misc]

    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        materialize(Bad)


def test_a_record_may_not_define_init() -> None:
    with pytest.raises(TypeError, match="defines __init__"):

        @record
        class Bad:
            a: int

            def __init__(self) -> None:
                pass


def test_threads_building_a_new_record_at_once_all_get_it() -> None:
    @record
    class Shared:
        a: int
        b: str = "b"

    built: list[Shared] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def build() -> None:
        start.wait()
        try:
            built.append(Shared(1))
        except BaseException as exc:  # pragma: no cover - the failure this test looks for
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and built == [Shared(1)] * 8


def test_importing_the_records_generates_nothing_and_imports_no_dataclasses() -> None:
    probe = (
        "import sys; import corral.domain.records, corral.store, corral.engine.runtime.protocol; "
        "from corral.domain import record; "
        "print(len(record._PENDING), 'dataclasses' in sys.modules, 'inspect' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) > 20  # every record class of those modules still waits for its first use
    assert out[1:] == ["False", "False"]
