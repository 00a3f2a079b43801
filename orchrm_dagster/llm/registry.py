"""The LLM backends by kind. Each backend module of this package (`orchrm_dagster/llm/<name>_backend.py`) defines its
backend and one spec class, the backend's config, registered here when the module is imported:

    @register_backend
    @engine_config
    class EchoSpec:
        kind: Literal["echo"] = Field(default="echo", kw_only=True, description="Which backend")
        ...  # only this backend's own fields
        loads_model_folders: ClassVar[bool] = False

        def build(self) -> LLMBackend: ...

Another distribution adds a backend through the `orchrm.backends` entry-point group (the spec class, or a module
registering it), and a config may name a spec class by dotted path where a kind is expected
(`{"kind": "my_pkg.my_module:EchoSpec", ...}`, `PolicySpec.backend_kind`). `build_backend(spec)` builds through the
registry, configs take `BackendSpec` (the registered spec classes, discriminated by `kind`;
`orchrm_dagster.llm.factory`), and a policy's overrides move a spec from one kind to another with `respec`. `kind` is
keyword-only so that a spec's required fields may follow it.
"""

from __future__ import annotations

import functools
import typing
from typing import ClassVar, Literal, Protocol

from orchrm_dagster.llm.base import LLMBackend
from orchrm_dagster.registry import Registry


class BackendSpecClass(Protocol):
    """What a registered spec class offers."""

    kind: str
    # Whether the backend can load its `model` from a folder on this machine (a trained checkpoint): one that asks a
    # server cannot.
    loads_model_folders: ClassVar[bool]

    def build(self) -> LLMBackend: ...


def _kind_of(spec_class: type) -> str:
    """The kind `spec_class` registers as: its `kind` field's one literal value, which is also its default."""
    info = getattr(spec_class, "__pydantic_fields__", {}).get("kind")
    literal = info is not None and typing.get_origin(info.annotation) is Literal
    values = typing.get_args(info.annotation) if literal else ()
    if len(values) != 1 or info.default != values[0]:
        raise TypeError(f"backend spec {_name(spec_class)} needs an @engine_config field "
                        f"`kind: Literal[\"<kind>\"]` whose default is that kind")
    for member in ("build", "loads_model_folders"):
        if not hasattr(spec_class, member):
            raise TypeError(f"backend spec {_name(spec_class)} has no `{member}` (see BackendSpecClass)")
    return values[0]


def _name(spec_class) -> str:
    return getattr(spec_class, "__name__", type(spec_class).__name__)


BACKENDS: Registry[type] = Registry(
    "backend kind", __package__, group="orchrm.backends", key=_kind_of,
    skip=("base", "cache_kind", "coalescing", "embedded", "factory", "grammar_constraint", "kv_cache", "registry",
          "shared_prefix", "transformers_decoding", "unloading"))
register_backend = BACKENDS.register  # registers a spec class under the kind its `kind` field names (a decorator)
backend_kinds = BACKENDS.names
spec_class = BACKENDS.named  # the spec class of a kind (or of a dotted path to a spec class)


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
