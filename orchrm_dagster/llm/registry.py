"""The LLM backends by kind. Each backend module, `orchrm_dagster/llm/<name>_backend.py` (every such module is
imported with the package), defines its backend and one spec class, the backend's config, registered here:

    @register_backend
    @engine_config
    class EchoSpec:
        kind: Literal["echo"] = Field(default="echo", kw_only=True, description="Which backend")
        ...  # only this backend's own fields
        loads_model_folders: ClassVar[bool] = False

        def build(self) -> LLMBackend: ...

`build_backend(spec)` builds through the registry, configs take `BackendSpec` (the union of the registered spec
classes, discriminated by `kind`; `orchrm_dagster.llm.factory`), and a policy's overrides move a spec from one kind
to another with `respec`. `kind` is keyword-only so that a spec's required fields may follow it.
"""

from __future__ import annotations

import functools
import typing
from typing import ClassVar, Literal, Protocol

from orchrm_dagster.llm.base import LLMBackend


class BackendSpecClass(Protocol):
    """What a registered spec class offers."""

    kind: str
    # Whether the backend can load its `model` from a folder on this machine (a trained checkpoint): one that asks a
    # server cannot.
    loads_model_folders: ClassVar[bool]

    def build(self) -> LLMBackend: ...


_SPECS: dict[str, type] = {}


def register_backend(spec_class: type) -> type:
    """Registers `spec_class` under the kind its `kind` field names (a class decorator)."""
    kind = _kind_of(spec_class)
    for member in ("build", "loads_model_folders"):
        if not hasattr(spec_class, member):
            raise TypeError(f"backend spec {spec_class.__name__} has no `{member}` (see BackendSpecClass)")
    if _SPECS.get(kind, spec_class) is not spec_class:
        raise ValueError(f"backend kind {kind!r} is registered already, by {_SPECS[kind].__name__}")
    _SPECS[kind] = spec_class
    return spec_class


def _kind_of(spec_class: type) -> str:
    info = getattr(spec_class, "__pydantic_fields__", {}).get("kind")
    literal = info is not None and typing.get_origin(info.annotation) is Literal
    values = typing.get_args(info.annotation) if literal else ()
    if len(values) != 1 or info.default != values[0]:
        raise TypeError(f"backend spec {spec_class.__name__} needs an @engine_config field "
                        f"`kind: Literal[\"<kind>\"]` whose default is that kind")
    return values[0]


def backend_kinds() -> tuple[str, ...]:
    return tuple(_SPECS)


def spec_class(kind: str) -> type:
    if kind not in _SPECS:
        raise ValueError(f"unknown backend kind {kind!r}; registered kinds: {', '.join(_SPECS)}")
    return _SPECS[kind]


@functools.cache
def build_backend(spec: BackendSpecClass) -> LLMBackend:
    """The backend `spec` describes; built once per process and spec (models load once)."""
    if spec_class(spec.kind) is not type(spec):
        raise TypeError(f"{type(spec).__name__} is not the registered spec of backend kind {spec.kind!r}")
    return spec.build()


def respec(spec: BackendSpecClass, kind: str | None = None, **changes) -> BackendSpecClass:
    """`spec` with `changes`, as a spec of `kind` (default: its own). Fields the two kinds share keep their values;
    a change the kind has no field for is refused, naming both."""
    target = spec_class(kind or spec.kind)
    fields = target.__pydantic_fields__
    foreign = sorted(set(changes) - set(fields))
    if foreign:
        raise ValueError(f"a {target.__name__} (backend kind {_kind_of(target)!r}) has no field "
                         f"{', '.join(foreign)}; its fields: {', '.join(fields)}")
    shared = {name: getattr(spec, name) for name in fields if name != "kind" and name in type(spec).__pydantic_fields__}
    return target(**(shared | changes))
