"""Build an LLM backend from a small, hashable description (for Dagster resources and configs)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Literal

from orchrm_dagster.llm.base import LLMBackend


@dataclass(frozen=True)
class BackendSpec:
    """Which backend to run and how. ``kind="transformers"`` with ``model=None`` is the embedded SmolLM2.

    ``api_key_env`` names the environment variable holding the OpenAI-compatible server's key (read
    when the backend is built; unset or None: no key). ``dtype`` is for transformers and vLLM;
    "auto" is float32 on CPU.
    """

    kind: Literal["transformers", "openai", "vllm"] = "transformers"
    model: str | None = None
    gguf_file: str | None = None
    base_url: str | None = None
    api_key_env: str | None = "OPENAI_API_KEY"
    max_batch_size: int = 8
    max_concurrency: int = 8
    timeout_s: float = 60
    max_retries: int = 4
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    dtype: str = "auto"


@functools.cache
def build_backend(spec: BackendSpec) -> LLMBackend:
    """The backend ``spec`` describes; built once per process and spec (models load once)."""
    if spec.kind == "transformers":
        from orchrm_dagster.llm.transformers_backend import TransformersBackend

        return TransformersBackend(model_path=spec.model, gguf_file=spec.gguf_file, dtype=spec.dtype,
                                   max_batch_size=spec.max_batch_size)
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
