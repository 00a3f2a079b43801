"""Dagster `Config` and `ConfigurableResource` classes generated from the engine's config dataclasses.

The engine defines each config once (`orchrm_dagster.engine_config`); the launchpad sees the same fields with the
same defaults and descriptions because the Dagster class is built from it, field by field. Dagster's config system
takes lists, not tuples, and nested `Config` classes, not dataclasses: those are translated here and back again by
`to_engine()`. A field holding a union of engine configs discriminated by a `kind` field (pydantic
`Field(discriminator=...)`) becomes the union of their generated classes, which the launchpad shows as a selector:
`{openai: {base_url: ..., model: ...}}`; the generated classes also take `{"kind": "openai", ...}` and engine
instances for such fields when constructed in Python.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import dagster as dg
import pydantic
from pydantic.fields import FieldInfo

_GENERATED: dict[type, type] = {}  # generated Dagster class -> engine class
_DEFAULTS: dict[type, object] = {}  # generated Dagster class -> the engine instance whose values are its defaults


class EngineConfig(dg.Config):
    """Run config generated from an engine config; `to_engine()` gives the engine's frozen instance."""

    def __init__(self, **values):
        super().__init__(**_dagster_values(type(self), values))

    def to_engine(self):
        return _to_engine(self)


class EngineResource(dg.ConfigurableResource):
    """A resource whose fields are an engine config's; `to_engine()` gives the engine's frozen instance."""

    def __init__(self, **values):
        super().__init__(**_dagster_values(type(self), values))

    def to_engine(self):
        return _to_engine(self)


def dagster_config(engine_cls: type, name: str, base: type = EngineConfig, defaults=None) -> type:
    """A `base` subclass named `name` with one field per field of `engine_cls` (same default and description).
    With `defaults` (an engine_cls instance), its values are the defaults instead: a nested config whose parent
    sets other defaults than the nested class's own gets a class of its own, since Dagster's launchpad takes a
    nested field's defaults from its class."""
    fields = {field_name: _field(info, name, getattr(defaults, field_name) if defaults is not None else _UNSET)
              for field_name, info in engine_cls.__pydantic_fields__.items()}
    generated = pydantic.create_model(name, __base__=base, __module__=__name__, __doc__=engine_cls.__doc__, **fields)
    _GENERATED[generated] = engine_cls
    if defaults is not None:
        _DEFAULTS[generated] = defaults
    return generated


def defaults_of(generated: type):
    """The engine instance a generated class takes its defaults from (None: the engine class's own defaults)."""
    return _DEFAULTS.get(generated)


def engine_class_of(generated: type) -> type:
    for cls in generated.__mro__:
        if cls in _GENERATED:
            return _GENERATED[cls]
    raise TypeError(f"{generated.__name__} was not generated from an engine config")


def generated_classes() -> dict[type, type]:
    """Every generated Dagster class and the engine class it came from."""
    return dict(_GENERATED)


_UNSET = object()


def _field(info: FieldInfo, owner: str, override=_UNSET) -> tuple[Any, FieldInfo]:
    if info.discriminator:
        return _union_field(info, override)
    annotation = _dagster_type(info.annotation)
    validators = [item for item in info.metadata if isinstance(item, pydantic.AfterValidator)]
    if validators:  # a registry's name (or dotted path) is refused here as by the engine
        annotation = typing.Annotated[(annotation, *validators)]
    if override is not _UNSET:
        value = override
    elif info.default_factory is not None:
        value = info.default_factory()
    elif info.is_required():
        return annotation, pydantic.Field(description=info.description)
    else:
        value = info.default
    if dataclasses.is_dataclass(value) and value != type(value)():
        annotation = dagster_config(type(value), f"{owner}_{type(value).__name__}Config", defaults=value)
        return annotation, pydantic.Field(default=annotation(), description=info.description)
    return annotation, pydantic.Field(default=_dagster_value(value, annotation), description=info.description)


def _union_field(info: FieldInfo, override=_UNSET) -> tuple[Any, FieldInfo]:
    """A discriminated union of engine configs: the union of their generated classes, under the same discriminator."""
    annotation = typing.Union[tuple(_nested_class(member) for member in typing.get_args(info.annotation))]
    if override is _UNSET and info.is_required():
        return annotation, pydantic.Field(discriminator=info.discriminator, description=info.description)
    value = info.get_default(call_default_factory=True) if override is _UNSET else override
    return annotation, pydantic.Field(default=_dagster_value(value), discriminator=info.discriminator,
                                      description=info.description)


def _dagster_type(annotation):
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is tuple:
        return list[_inner_type(args[0])]
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _inner_type(inner[0]) | None
    if origin is dict:
        return dict[args[0], _inner_type(args[1])]
    if dataclasses.is_dataclass(annotation):
        return _nested_class(annotation)
    return annotation


def _inner_type(annotation):
    """Dagster takes a Literal (an enum) only as a plain field: inside a list, a dict or an optional it is a string,
    which the engine config validates."""
    return str if typing.get_origin(annotation) is typing.Literal else _dagster_type(annotation)


def _nested_class(engine_cls: type) -> type:
    for generated, source in _GENERATED.items():
        if source is engine_cls and issubclass(generated, EngineConfig):
            return generated
    return dagster_config(engine_cls, f"{engine_cls.__name__}Config")


def _dagster_value(value, annotation=None):
    if isinstance(value, tuple):
        return list(value)
    if dataclasses.is_dataclass(value):
        generated = annotation if isinstance(annotation, type) and issubclass(annotation, EngineConfig) else None
        return from_engine(generated or _nested_class(type(value)), value)
    return value


def _dagster_values(generated: type, values: dict) -> dict:
    """Constructor arguments as Dagster's config takes them: engine instances as generated classes; a discriminated
    union's member given as a dict holding its discriminator (`{"kind": "openai", ...}`) is validated by the engine
    first (Dagster's classes ignore unknown fields)."""
    engine_fields = engine_class_of(generated).__pydantic_fields__
    converted = {}
    for name, value in values.items():
        info = engine_fields.get(name)
        if info is not None and info.discriminator and isinstance(value, dict) and info.discriminator in value:
            union = typing.Annotated[info.annotation, pydantic.Field(discriminator=info.discriminator)]
            value = pydantic.TypeAdapter(union, config=pydantic.ConfigDict(title=f"{generated.__name__}.{name}")
                                         ).validate_python(value)
        if info is not None and dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = _dagster_value(value, generated.model_fields[name].annotation)
        converted[name] = value
    return converted


def from_engine(generated: type, value):
    """The generated Dagster class's instance holding an engine config's values (the reverse of `to_engine`):
    how run configs are built from the engine's settings, never as hand-written dictionaries."""
    values = {}
    for name, info in generated.model_fields.items():
        item = getattr(value, name)
        values[name] = _dagster_value(item, info.annotation)
    return generated(**values)


def _to_engine(config):
    engine_cls = engine_class_of(type(config))
    values = {}
    for name in engine_cls.__pydantic_fields__:
        value = getattr(config, name)
        values[name] = _to_engine(value) if isinstance(value, EngineConfig) else value
    return engine_cls(**values)
