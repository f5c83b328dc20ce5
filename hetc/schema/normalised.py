"""The typed spec as JSON and back: what `hetc compile` records in its output as `spec.json`.

A compiled output is run, and later calibrated (`hetc calibrate`), where the spec's YAML file
and the files it names may not be: the normalised spec (defaults filled in, units converted,
the catalog's devices and model resolved) is everything the cost model needs, and its hash is
the plan's `spec_hash`, so a copy that was edited or belongs to another spec is caught.

The JSON is `dataclasses.asdict` of the `Spec`; `spec_from_json` rebuilds the dataclasses from
their type hints, so it follows the spec's types without a second list of fields.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import asdict
from typing import Any, Literal, Union

from hetc.schema.spec import Spec


class NormalisedSpecError(ValueError):
    """A normalised spec's JSON does not match the spec's types; the message names the key."""


def spec_json(spec: Spec) -> dict[str, Any]:
    """The spec as plain JSON values (tuples become lists)."""
    return asdict(spec)


def spec_from_json(data: object) -> Spec:
    """The `Spec` that `spec_json` wrote; `NormalisedSpecError` names the first bad key."""
    built = _typed(Spec, data, "spec")
    assert isinstance(built, Spec)
    return built


def _typed(kind: Any, value: object, where: str) -> object:
    """`value` as an instance of the annotation `kind` (recursively)."""
    origin = typing.get_origin(kind)
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return _dataclass(kind, value, where)
    if origin in (Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        for option in (o for o in options if o is not type(None)):
            try:
                return _typed(option, value, where)
            except NormalisedSpecError:
                continue
        raise NormalisedSpecError(f"{where}: {value!r} is none of {kind}")
    if origin is Literal:
        if value not in typing.get_args(kind):
            raise NormalisedSpecError(f"{where}: {value!r} is not one of {typing.get_args(kind)}")
        return value
    if origin is tuple:
        args = typing.get_args(kind)
        if not isinstance(value, list):
            raise NormalisedSpecError(f"{where}: expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_typed(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise NormalisedSpecError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(
            _typed(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True))
        )
    if origin is dict:
        _key, item = typing.get_args(kind)
        if not isinstance(value, dict):
            raise NormalisedSpecError(f"{where}: expected an object, got {type(value).__name__}")
        return {str(k): _typed(item, v, f"{where}.{k}") for k, v in value.items()}
    return _scalar(kind, value, where)


def _scalar(kind: Any, value: object, where: str) -> object:
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind in (str, bool) and isinstance(value, kind):
        return value
    raise NormalisedSpecError(f"{where}: expected {getattr(kind, '__name__', kind)}, got {value!r}")


def _dataclass(cls: type, value: object, where: str) -> object:
    if not isinstance(value, dict):
        raise NormalisedSpecError(f"{where}: expected an object, got {type(value).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise NormalisedSpecError(f"{where}: unknown keys {unknown}")
    missing = sorted(set(fields) - set(value))
    if missing:
        raise NormalisedSpecError(f"{where}: missing keys {missing}")
    return cls(**{name: _typed(hints[name], value[name], f"{where}.{name}") for name in fields})
