"""The configs that name an LLM backend. `BackendSpec` is any registered backend's spec, told apart by `kind`;
`LLMSettings` is the sub-agents' backend (the `llm` resource). Every `orchrm_dagster/llm/*_backend.py` module is
imported here, so a spec registered in one (`orchrm_dagster.llm.registry`) is a member of `BackendSpec`."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Annotated, Union

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.llm.registry import BackendSpecClass, backend_kinds, spec_class
from orchrm_dagster.llm.transformers_backend import TransformersSpec


def _import_backend_modules() -> None:
    for path in sorted(Path(__file__).parent.glob("*_backend.py")):
        importlib.import_module(f"{__package__}.{path.stem}")


_import_backend_modules()
BackendSpec = Annotated[Union[tuple(spec_class(kind) for kind in backend_kinds())], Field(discriminator="kind")]


@engine_config
class LLMSettings:
    """The LLM the sub-agents run on, and the backend every orchestrator policy starts from."""

    backend: BackendSpec = Field(default_factory=TransformersSpec,
                                 description=f"The backend, by kind ({', '.join(backend_kinds())}), and its "
                                             f"settings; by default the embedded SmolLM2 on transformers")


def model_folder_kind(spec: BackendSpecClass) -> str:
    """The backend kind a model folder on this machine (a trained checkpoint) is sampled with: `spec`'s own kind when
    it loads model folders, else the default backend's."""
    return spec.kind if spec.loads_model_folders else LLMSettings().backend.kind
