"""``record``: a frozen dataclass that costs nothing until it is first built.

Every boundary of corral passes typed records, and there are about a hundred of them. The
standard ``@dataclass`` compiles five or six methods per class from source when its module is
imported — about a millisecond a class here — and importing ``dataclasses`` brings ``inspect``
with it: together more than a read command's whole work (docs/architecture.md#start-up).

A ``record`` behaves as the dataclass it declares (typed for mypy through
``dataclass_transform``): the same ``__init__`` (positional or by keyword, defaults and
``field(default_factory=…)``), ``repr``, equality between instances of the same class,
hashing when frozen, ``FrozenInstanceError`` on assignment, ``__match_args__``, and
``__dataclass_fields__`` for ``dataclasses.replace``, ``asdict`` and ``fields`` (those load
``dataclasses`` when they are called; this module's own :func:`replace` and :func:`asdict` do
not, and are what corral's code uses). What differs is when the work is done: the class carries
a stub ``__init__`` until its first construction, which generates ``__init__`` (the one method
compiled, so building an instance costs what a dataclass's does) and installs the others.
Classes a command never builds are never generated.
"""

from __future__ import annotations

import _thread
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

_T = TypeVar("_T", bound=type)

_MISSING: Any = object()
# the options each record class was declared with, until it is generated
_PENDING: dict[type, bool] = {}
# threads of one process (the supervisor's) may build a record type at the same moment
_LOCK = _thread.allocate_lock()


class _Field:
    """A field's options, as ``field()`` wrote them in a record's body."""

    __slots__ = ("default", "default_factory", "repr")

    def __init__(self, default: Any, default_factory: Callable[[], Any] | None, repr: bool) -> None:
        self.default = default
        self.default_factory = default_factory
        self.repr = repr


def field(*, default: Any = _MISSING, default_factory: Callable[[], Any] | None = None, repr: bool = True) -> Any:
    """``dataclasses.field`` for a record: a default, a default factory, or leaving it out of repr."""
    if default is not _MISSING and default_factory is not None:
        raise ValueError("a field takes a default or a default_factory, not both")
    return _Field(default, default_factory, repr)


@overload
def record(cls: _T, /) -> _T: ...
@overload
def record(*, frozen: bool = True) -> Callable[[_T], _T]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: _T | None = None, /, *, frozen: bool = True) -> _T | Callable[[_T], _T]:
    """Declare ``cls`` a dataclass (frozen unless ``frozen=False``), generated on first use."""

    def wrap(cls: _T) -> _T:
        if "__init__" in cls.__dict__:
            raise TypeError(f"record {cls.__qualname__} defines __init__: declare fields instead")
        _PENDING[cls] = frozen

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            materialize(cls)
            cls.__init__(self, *args, **kwargs)  # type: ignore[misc]

        __init__.__qualname__ = f"{cls.__qualname__}.__init__"
        cls.__init__ = __init__  # type: ignore[misc]
        cls.__dataclass_fields__ = _DataclassFields()  # type: ignore[attr-defined]
        return cls

    return wrap if cls is None else wrap(cls)


_R = TypeVar("_R")


def replace(obj: _R, /, **changes: Any) -> _R:
    """A copy of the record ``obj`` with ``changes`` (``dataclasses.replace``)."""
    for spec in _fields_of(obj):
        changes.setdefault(spec.name, getattr(obj, spec.name))
    return obj.__class__(**changes)


def asdict(obj: Any) -> dict[str, Any]:
    """The record ``obj`` as a dict, records inside it (and in its lists, tuples, dicts) too."""
    return {spec.name: _plain(getattr(obj, spec.name)) for spec in _fields_of(obj)}


def _plain(value: Any) -> Any:
    if hasattr(type(value), "__record_fields__") or type(value) in _PENDING:
        return asdict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _fields_of(obj: Any) -> tuple[_Spec, ...]:
    cls = materialize(type(obj))
    specs: tuple[_Spec, ...] | None = getattr(cls, "__record_fields__", None)
    if specs is None:
        raise TypeError(f"{cls.__qualname__} is not a record")
    return specs


def materialize(cls: type) -> type:
    """Generate ``cls`` (and every record base it has) now; a no-op once done or for a plain class."""
    with _LOCK:
        for base in reversed(cls.__mro__):
            frozen = _PENDING.get(base)
            if frozen is not None:
                _generate(base, frozen)
                del _PENDING[base]
    return cls


class _Spec:
    __slots__ = ("annotation", "default", "default_factory", "name", "repr")

    def __init__(self, name: str, annotation: Any, value: Any) -> None:
        self.name = name
        self.annotation = annotation
        spec = value if isinstance(value, _Field) else _Field(value, None, True)
        self.default = spec.default
        self.default_factory = spec.default_factory
        self.repr = spec.repr


def _is_classvar(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__origin__", annotation)
    if isinstance(text, str):
        return text.split("[", 1)[0].strip() in ("ClassVar", "typing.ClassVar")
    return repr(text).startswith("typing.ClassVar")


def _specs(cls: type) -> list[_Spec]:
    """The fields of ``cls`` in dataclass order: bases first, a redeclared field keeping its place."""
    fields: dict[str, _Spec] = {}
    for base in reversed(cls.__mro__):
        if base is cls:
            break
        fields.update((spec.name, spec) for spec in getattr(base, "__record_fields__", ()))
    own: dict[str, Any] = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 - inspect is what we avoid
    for name, annotation in own.items():
        if not _is_classvar(annotation):
            fields[name] = _Spec(name, annotation, cls.__dict__.get(name, _MISSING))
    return list(fields.values())


def _generate(cls: type, frozen: bool) -> None:
    specs = _specs(cls)
    defaulted = False
    for spec in specs:
        if spec.default is _MISSING and spec.default_factory is None:
            if defaulted:
                raise TypeError(f"non-default argument {spec.name!r} follows default argument in {cls.__qualname__}")
        else:
            defaulted = True
        if isinstance(cls.__dict__.get(spec.name), _Field):
            if spec.default is _MISSING:
                delattr(cls, spec.name)
            else:
                setattr(cls, spec.name, spec.default)
    cls.__record_fields__ = tuple(specs)  # type: ignore[attr-defined]
    del cls.__init__  # type: ignore[misc]  # the stub
    cls.__init__ = _init(cls, specs, frozen)  # type: ignore[misc]
    names = tuple(spec.name for spec in specs)
    values: Callable[[Any], Any] = attrgetter(*names) if names else (lambda _self: ())
    shown = [spec.name for spec in specs if spec.repr]

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{type(self).__qualname__}({inner})"

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return bool(values(self) == values(other))
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(values(self))

    own = cls.__dict__
    # as dataclass decides: a __hash__ is the class's own unless Python set it to None for its __eq__
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    if "__repr__" not in own:
        cls.__repr__ = __repr__  # type: ignore[assignment]
    if "__eq__" not in own:
        cls.__eq__ = __eq__  # type: ignore[assignment]
    if not explicit_hash:
        # frozen: hashed by its fields; mutable: unhashable, as a dataclass is
        cls.__hash__ = __hash__ if frozen else None  # type: ignore[assignment]
    if frozen:
        cls.__setattr__ = _frozen_setattr  # type: ignore[assignment]
        cls.__delattr__ = _frozen_delattr  # type: ignore[assignment]
    if "__match_args__" not in own:
        setattr(cls, "__match_args__", names)  # noqa: B010 - mypy forbids assigning it by name


def _init(cls: type, specs: list[_Spec], frozen: bool) -> Callable[..., None]:
    """``__init__``, compiled: the one method whose speed matters (a list builds thousands)."""
    scope: dict[str, Any] = {"_set": object.__setattr__, "_FACTORY": _FACTORY}
    params, body = ["self"], []
    for i, spec in enumerate(specs):
        if spec.default_factory is not None:
            scope[f"_f{i}"] = spec.default_factory
            params.append(f"{spec.name}=_FACTORY")
            value = f"_f{i}() if {spec.name} is _FACTORY else {spec.name}"
        elif spec.default is not _MISSING:
            scope[f"_d{i}"] = spec.default
            params.append(f"{spec.name}=_d{i}")
            value = spec.name
        else:
            params.append(spec.name)
            value = spec.name
        body.append(f"_set(self, {spec.name!r}, {value})" if frozen else f"self.{spec.name} = {value}")
    source = f"def __init__({', '.join(params)}):\n    " + ("\n    ".join(body) or "pass") + "\n"
    exec(compile(source, f"<record {cls.__module__}.{cls.__qualname__}>", "exec"), scope)
    init: Callable[..., None] = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise _frozen_error(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise _frozen_error(f"cannot delete field {name!r}")


def _frozen_error(message: str) -> Exception:
    from dataclasses import FrozenInstanceError  # the same error a frozen dataclass raises

    return FrozenInstanceError(message)


class _DataclassFields:
    """``__dataclass_fields__``, made on first access: what ``dataclasses``' functions read."""

    def __get__(self, instance: Any, owner: type) -> dict[str, Any]:
        materialize(owner)
        made = owner.__dict__.get("__record_dataclass_fields__")
        if made is None:
            made = _dataclass_fields(owner)
            owner.__record_dataclass_fields__ = made  # type: ignore[attr-defined]
        return made


def _dataclass_fields(cls: type) -> dict[str, Any]:
    """Real ``dataclasses.Field`` objects for ``cls``'s fields, from a twin made by ``make_dataclass``."""
    import dataclasses

    specs: tuple[_Spec, ...] = cls.__record_fields__  # type: ignore[attr-defined]
    twin = dataclasses.make_dataclass(
        cls.__name__,
        [
            (
                spec.name,
                spec.annotation,
                dataclasses.field(default_factory=spec.default_factory, repr=spec.repr)
                if spec.default_factory is not None
                else dataclasses.field(repr=spec.repr)
                if spec.default is _MISSING
                else dataclasses.field(default=spec.default, repr=spec.repr),
            )
            for spec in specs
        ],
    )
    fields: dict[str, Any] = getattr(twin, "__dataclass_fields__")  # noqa: B009 - twin is untyped here
    return fields
