"""One schema per kind of file rocmbuild reads: small declarative field specs, and the one error
they raise (:class:`SchemaError`: the file, the field, what was expected, what was found).

A *spec* is a callable ``spec(value, field) -> value`` that returns the value as rocmbuild uses
it (a tuple for a JSON list, a frozen dataclass for an object) or raises :class:`SchemaError`.
Each kind keeps its schema next to its type (``Manifest`` in ``store/manifest.py``, ``Plan`` in
``swap/plan.py``, ...), most of them derived from the dataclass itself by :func:`record`.

Decisions:
* strict types: an ``int`` field takes no ``bool`` and no float, a ``str`` field no number; a
  field the type makes optional (``X | None``) takes ``null``; a field with a default may be
  left out (the default is used), one without may not;
* keys a schema does not name are ignored (a newer rocmbuild may add some), never guessed at;
* :class:`SchemaError` is a ``ValueError``: the layers that read a state file already treat a
  ``ValueError`` as "cannot be read"; each layer maps it to its own exit code (2 for a target's
  state and a lock file, 3 for an artifact's files) where it leaves that layer;
* a recipe name, a version and a commit are checked by :mod:`rocmbuild.names` (:func:`name`);
* what was found is described briefly and safely (:func:`rocmbuild.names.safe_text`), never
  dumped: a state file may be large or hostile.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, Callable

from rocmbuild.names import bad_name_reason, safe_text

Spec = Callable[[Any, str], Any]
_ABSENT = object()

__all__ = ["SchemaError", "Spec", "load", "fail", "describe", "string", "integer", "boolean", "number", "json_value",
           "optional", "valid", "list_of", "dict_of", "one_of", "check", "name", "record", "obj", "from_type", "REQUIRED", "OMIT",
           "MappingRecord"]


def describe(value: object) -> str:
    """A short, safe description of what was found (its JSON type, and the value if small)."""
    if value is _ABSENT:
        return "nothing (the field is missing)"
    kind = {dict: "an object", list: "a list", tuple: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
    if isinstance(value, (str, int, float, bool)) and value is not None:
        text = safe_text(repr(value))
        return f"{kind} {text[:60] + '...' if len(text) > 60 else text}"
    return kind


class SchemaError(ValueError):
    """A file rocmbuild reads does not hold what its schema says: ``file`` (None until the
    loader names it), ``field`` (``libraries[0].links``; empty: the whole document), what was
    ``expected`` and what was found (``got``, already described)."""

    def __init__(self, field: str, expected: str, got: str, file: str | None = None) -> None:
        self.field, self.expected, self.got, self.file = field, expected, got, file
        super().__init__(self.text())

    def text(self) -> str:
        where = f"field {self.field!r}" if self.field else "the document"
        return (f"{safe_text(self.file)}: " if self.file else "") + f"{where}: expected {self.expected}, got {self.got}"

    def located(self, file: object) -> "SchemaError":
        """This error naming ``file`` (kept when it names one already)."""
        return self if self.file else SchemaError(self.field, self.expected, self.got, str(file))

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "field": self.field, "expected": self.expected, "got": self.got}


def fail(field: str, expected: str, value: object) -> typing.NoReturn:
    raise SchemaError(field, expected, describe(value))


def load(spec: Spec, value: object, file: object) -> Any:
    """``spec`` applied to a whole document read from ``file`` (named in any error)."""
    try:
        return spec(value, "")
    except SchemaError as exc:
        raise exc.located(file) from None
    except RecursionError:
        raise SchemaError("", "a document nested less deeply", "one nested too deeply", str(file)) from None


def _at(field: str, key: str | int) -> str:
    return f"{field}[{key}]" if isinstance(key, int) else (f"{field}.{key}" if field else key)


def _typed(pytype: type, expected: str) -> Spec:
    def spec(v: Any, field: str) -> Any:
        if type(v) is not pytype:
            fail(field, expected, v)
        return v
    return spec


string = _typed(str, "a string")
integer = _typed(int, "an integer")
boolean = _typed(bool, "true or false")


def number(v: Any, field: str) -> Any:
    if type(v) not in (int, float):
        fail(field, "a number", v)
    return v


def json_value(v: Any, field: str) -> Any:
    """Any JSON value (objects with string keys), returned as it is."""
    if v is None or type(v) in (str, int, float, bool):
        return v
    if type(v) is list:
        for i, x in enumerate(v):
            json_value(x, _at(field, i))
        return v
    if type(v) is dict:
        for k, x in v.items():
            if type(k) is not str:
                fail(field, "an object with string keys", v)
            json_value(x, _at(field, k))
        return v
    fail(field, "a JSON value", v)


def valid(spec: Spec) -> Spec:
    """What ``spec`` takes, returned as the JSON value it was (for state kept as JSON)."""
    def parse(v: Any, field: str) -> Any:
        spec(v, field)
        return v
    return parse


def optional(spec: Spec) -> Spec:
    """``null`` (None) or what ``spec`` takes."""
    return lambda v, field: None if v is None else spec(v, field)


def list_of(spec: Spec) -> Spec:
    """A JSON list of what ``spec`` takes, as a tuple (a tuple is taken too: a value in memory)."""
    def parse(v: Any, field: str) -> tuple:
        if type(v) not in (list, tuple):
            fail(field, "a list", v)
        return tuple(spec(x, _at(field, i)) for i, x in enumerate(v))
    return parse


def dict_of(spec: Spec) -> Spec:
    """A JSON object whose every value ``spec`` takes, as a new dict."""
    def parse(v: Any, field: str) -> dict:
        if type(v) is not dict:
            fail(field, "an object", v)
        return {k: spec(x, _at(field, k)) for k, x in v.items()}
    return parse


def one_of(*values: str) -> Spec:
    expected = "one of " + ", ".join(repr(x) for x in values)

    def spec(v: Any, field: str) -> Any:
        if type(v) is not str or v not in values:
            fail(field, expected, v)
        return v
    return spec


def check(spec: Spec, ok: Callable[[Any], bool], expected: str) -> Spec:
    """What ``spec`` takes and ``ok`` accepts (``expected`` says what that is)."""
    def parse(v: Any, field: str) -> Any:
        out = spec(v, field)
        if not ok(out):
            fail(field, expected, v)
        return out
    return parse


def name(kind: str) -> Spec:
    """A recipe name, a version or a commit (``kind``), by the grammar of :mod:`rocmbuild.names`."""
    def parse(v: Any, field: str) -> str:
        why = bad_name_reason(kind, v)
        if why is not None:
            raise SchemaError(field, f"a {kind}: " + why.rsplit(", got ", 1)[0].removeprefix("expected "), describe(v))
        return v
    return parse


def obj(fields: dict[str, tuple[Spec, Any]], *, keep: bool = True) -> Spec:
    """A JSON object as a dict: each named field checked by its spec (``(spec, default)``; a
    default of ``REQUIRED`` makes it required), the others kept as they are (``keep``) or dropped."""
    def parse(v: Any, field: str) -> dict:
        if type(v) is not dict:
            fail(field, "an object", v)
        out = dict(v) if keep else {}
        for key, (spec, default) in fields.items():
            if key in v:
                out[key] = spec(v[key], _at(field, key))
            elif default is REQUIRED:
                fail(_at(field, key), f"a field {key!r}", _ABSENT)
            elif default is not OMIT:
                out[key] = default
        return out
    return parse


REQUIRED = object()  # obj(): the field must be there
OMIT = object()  # obj(): a missing field stays missing


def record(cls: type, **override: Spec) -> Spec:
    """The spec of a frozen dataclass, derived from its annotations (:func:`from_type`); a field
    with a default may be missing; ``override`` gives a field its own spec (a name, a check)."""
    hints = typing.get_type_hints(cls)
    fields = [(f.name, override.get(f.name) or from_type(hints[f.name]),
               f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
              for f in dataclasses.fields(cls) if f.init]

    def parse(v: Any, field: str) -> Any:
        if type(v) is not dict:
            fail(field, "an object", v)
        kw = {}
        for key, spec, required in fields:
            if key in v:
                kw[key] = spec(v[key], _at(field, key))
            elif required:
                fail(_at(field, key), f"a field {key!r}", _ABSENT)
        return cls(**kw)
    return parse


class MappingRecord(Mapping):
    """A frozen dataclass that also reads like its JSON object (``rec["status"]``, ``dict(rec)``),
    for records whose documented form is that object."""

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def _keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self))  # type: ignore[arg-type]  # a mixin of dataclasses


_SIMPLE: dict[Any, Spec] = {str: string, int: integer, bool: boolean, float: number, Any: json_value}


def from_type(tp: Any) -> Spec:
    """The spec of a type annotation: str, int, bool, float, Any (JSON), ``X | None``,
    ``tuple[X, ...]`` (a list), ``dict[str, X]``, a dataclass (:func:`record`)."""
    if tp in _SIMPLE:
        return _SIMPLE[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return optional(from_type(rest[0]))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return list_of(from_type(args[0]))
    if origin in (dict, Mapping) and args and args[0] is str:
        return dict_of(from_type(args[1]))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _record_cached(tp)
    raise TypeError(f"no schema for the type {tp!r}: give the field its own spec")


@functools.lru_cache(maxsize=None)
def _record_cached(cls: type) -> Spec:
    return record(cls)
