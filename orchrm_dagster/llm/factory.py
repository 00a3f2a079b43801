"""The configs that name an LLM backend. `BackendSpec` is any registered backend's spec, told apart by `kind`;
`LLMSettings` is the sub-agents' backend (the `llm` resource). Reading the registry here imports every backend module
of the package and every `orchrm.backends` entry point, so a spec registered by one is a member of `BackendSpec`. A
spec whose `kind` is a dotted path to a spec class (`{"kind": "my_pkg.my_module:EchoSpec", ...}`), or whose class was
registered after this union was made, is validated by its own class."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import WrapValidator

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.llm.registry import BackendSpecClass, backend_kinds, spec_class
from orchrm_dagster.llm.transformers_backend import TransformersSpec

_MEMBERS = tuple(spec_class(kind) for kind in backend_kinds())
_MEMBER_KINDS = backend_kinds()


def _any_registered_spec(value, handler):
    """A spec of a kind `BackendSpec`'s members do not hold, given as a dict naming the kind (or a dotted path to its
    spec class) or as an instance, validated by its own spec class; everything else as the union validates it."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    if isinstance(kind, str) and kind not in _MEMBER_KINDS and (kind in backend_kinds() or "." in kind or ":" in kind):
        target = spec_class(kind)  # a dotted path that does not import is refused here, saying why
        if isinstance(value, dict):
            return target(**{name: item for name, item in value.items() if name != "kind"})
        if isinstance(value, target):
            return value
    return handler(value)  # an unknown kind: the union's error names the known ones


BackendSpec = Annotated[Union[_MEMBERS], Field(discriminator="kind"), WrapValidator(_any_registered_spec)]


@engine_config
class LLMSettings:
    """The LLM the sub-agents run on, and the backend every orchestrator policy starts from."""

    backend: BackendSpec = Field(default_factory=TransformersSpec,
                                 description=f"The backend, by kind ({', '.join(backend_kinds())}, or a dotted "
                                             f"path to a spec class), and its settings; by default the embedded "
                                             f"SmolLM2 on transformers")


def model_folder_kind(spec: BackendSpecClass) -> str:
    """The backend kind a model folder on this machine (a trained checkpoint) is sampled with: `spec`'s own kind when
    it loads model folders, else the default backend's."""
    return spec.kind if spec.loads_model_folders else LLMSettings().backend.kind
