"""LLM backends behind one interface (transformers on CPU or GPU, OpenAI-compatible HTTP, vLLM in-process). Each
backend module (`<name>_backend.py`) defines its spec class and registers it (`registry.py`; other distributions
through the `orchrm.backends` entry-point group); `TransformersSpec` is the default."""

from orchrm_dagster.llm.base import ChatRequest, Completion, LLMBackend, SamplingSettings
from orchrm_dagster.llm.coalescing import CoalescingBackend
from orchrm_dagster.llm.embedded import EMBEDDED_GGUF, embedded_model_dir
# the registry's names first: `factory` reads the registry, loading `orchrm.backends` entry points, whose modules
# may import them from here
from orchrm_dagster.llm.registry import (BACKENDS, BackendSpecClass, backend_kinds, build_backend, register_backend,
                                         respec, spec_class)
from orchrm_dagster.llm.factory import BackendSpec, LLMSettings, model_folder_kind
from orchrm_dagster.llm.grammar_constraint import GrammarLogitsProcessor, compile_grammar
from orchrm_dagster.llm.kv_cache import DecodingCache, decoding_cache_field, release_static_caches, resolved_cache_kind
from orchrm_dagster.llm.transformers_backend import TransformersSpec, loaded_model, sample_rows, unload_model
from orchrm_dagster.llm.vllm_backend import vllm_imports
from orchrm_dagster.llm.openai_backend import MAX_RETRY_AFTER_S, retry_after_s  # shared with other HTTP clients

__all__ = ["BACKENDS", "EMBEDDED_GGUF", "embedded_model_dir", "BackendSpec", "BackendSpecClass", "ChatRequest",
           "CoalescingBackend", "Completion", "LLMBackend", "LLMSettings", "SamplingSettings", "TransformersSpec", "backend_kinds",
           "build_backend", "model_folder_kind", "register_backend", "respec", "spec_class", "GrammarLogitsProcessor",
           "compile_grammar", "loaded_model", "sample_rows", "unload_model", "DecodingCache", "decoding_cache_field",
           "release_static_caches", "resolved_cache_kind", "vllm_imports", "MAX_RETRY_AFTER_S", "retry_after_s"]
