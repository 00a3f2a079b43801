"""Build an LLM backend from a small, hashable description (for Dagster resources and configs)."""

from __future__ import annotations

import functools
import os
from typing import Literal

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.llm.base import LLMBackend

BackendKind = Literal["transformers", "openai", "vllm"]


@engine_config
class BackendSpec:
    """Which LLM backend to run and how; switching backends is a change of this config, not of code."""

    kind: BackendKind = Field(default="transformers", description="transformers | openai | vllm")
    model: str | None = Field(default=None, description="Model folder or hub id; unset = the embedded SmolLM2 "
                              "(transformers only)")
    gguf_file: str | None = Field(default=None, description="A GGUF file inside `model` to load (transformers)")
    base_url: str | None = Field(default=None, description="OpenAI-compatible server, e.g. http://host:8000/v1")
    api_key_env: str | None = Field(default="OPENAI_API_KEY", description="Environment variable holding the "
                                    "server's API key, read when the backend is built (unset: no key)")
    device: str = Field(default="auto", description="auto | cpu | cuda (transformers; auto = cuda when visible)")
    dtype: str = Field(default="auto", description="Weights dtype (transformers, vllm); auto = float32 on CPU")
    max_batch_size: int = Field(default=8, description="Rows per forward pass (transformers)")
    max_concurrency: int = Field(default=8, description="Requests in flight at once (openai)")
    timeout_s: float = Field(default=60.0, description="Per-request timeout in seconds (openai)")
    max_retries: int = Field(default=4, description="Retries with backoff on transient errors (openai)")
    tensor_parallel_size: int = Field(default=1, description="GPUs one model is split over (vllm)")
    gpu_memory_utilization: float = Field(default=0.85, description="Share of GPU memory vLLM may take (vllm)")


@functools.cache
def build_backend(spec: BackendSpec) -> LLMBackend:
    """The backend ``spec`` describes; built once per process and spec (models load once)."""
    if spec.kind == "transformers":
        from orchrm_dagster.llm.transformers_backend import TransformersBackend

        return TransformersBackend(model_path=spec.model, gguf_file=spec.gguf_file, device=spec.device,
                                   dtype=spec.dtype, max_batch_size=spec.max_batch_size)
    if spec.kind == "openai":
        from orchrm_dagster.llm.openai_backend import OpenAICompatibleBackend

        if not spec.base_url or not spec.model:
            raise ValueError("an openai backend needs base_url and model")
        api_key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
        return OpenAICompatibleBackend(spec.base_url, spec.model, api_key=api_key, timeout_s=spec.timeout_s,
                                       max_concurrency=spec.max_concurrency, max_retries=spec.max_retries)
    if spec.kind == "vllm":
        from orchrm_dagster.llm.vllm_backend import VLLMBackend

        if not spec.model:
            raise ValueError("a vllm backend needs model")
        return VLLMBackend(spec.model, tensor_parallel_size=spec.tensor_parallel_size, dtype=spec.dtype,
                           gpu_memory_utilization=spec.gpu_memory_utilization)
    raise ValueError(f"unknown backend kind {spec.kind!r}; expected transformers, openai or vllm")
