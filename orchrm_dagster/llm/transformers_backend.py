"""LLM backend on Hugging Face transformers: its spec, `TransformersSpec`, the default backend. The engine (torch,
transformers, xgrammar) is `transformers_decoding`, imported when a spec builds its backend: reading or validating
settings imports no model code."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.llm.cache_kind import DecodingCache, decoding_cache_field
from orchrm_dagster.llm.registry import register_backend

if TYPE_CHECKING:
    from orchrm_dagster.llm.transformers_decoding import TransformersBackend


@register_backend
@engine_config
class TransformersSpec:
    """A local transformers causal LM on CPU or one GPU, batched in-process; by default the embedded SmolLM2."""

    kind: Literal["transformers"] = Field(default="transformers", kw_only=True, description="The backend kind")
    model: str | None = Field(default=None, description="Model folder or hub id; unset = the embedded SmolLM2")
    gguf_file: str | None = Field(default=None, description="A GGUF file inside `model` to load")
    device: str = Field(default="auto", description="auto | cpu | cuda (auto = cuda when visible)")
    dtype: str = Field(default="auto", description="Weights dtype; auto = float32 on CPU, the checkpoint's own "
                                                   "elsewhere")
    max_batch_size: int = Field(default=8, description="Rows per forward pass")
    decoding_cache: DecodingCache = decoding_cache_field()

    loads_model_folders: ClassVar[bool] = True

    def build(self) -> TransformersBackend:
        from orchrm_dagster.llm.transformers_decoding import TransformersBackend

        return TransformersBackend(model_path=self.model, gguf_file=self.gguf_file, device=self.device,
                                   dtype=self.dtype, max_batch_size=self.max_batch_size,
                                   decoding_cache=self.decoding_cache)
