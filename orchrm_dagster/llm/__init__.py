"""LLM backends behind one interface (transformers on CPU or GPU, OpenAI-compatible HTTP, vLLM in-process). Each
backend module (`<name>_backend.py`) defines its spec class and registers it (`registry.py`; other distributions
through the `orchrm.backends` entry-point group); `TransformersSpec` is the default.

Names load lazily (`orchrm_dagster.lazy_names`)."""

from __future__ import annotations

from orchrm_dagster.lazy_names import lazy_names

_EXPORTS = {
    "ChatRequest": "base",
    "Completion": "base",
    "LLMBackend": "base",
    "SamplingSettings": "base",
    "CoalescingBackend": "coalescing",
    "EMBEDDED_GGUF": "embedded",
    "embedded_model_dir": "embedded",
    "BACKENDS": "registry",
    "BackendSpecClass": "registry",
    "backend_kinds": "registry",
    "build_backend": "registry",
    "register_backend": "registry",
    "respec": "registry",
    "spec_class": "registry",
    "BackendSpec": "factory",
    "LLMSettings": "factory",
    "model_folder_kind": "factory",
    "GrammarLogitsProcessor": "grammar_constraint",
    "compile_grammar": "grammar_constraint",
    "DecodingCache": "cache_kind",
    "decoding_cache_field": "cache_kind",
    "release_static_caches": "kv_cache",
    "resolved_cache_kind": "cache_kind",
    "TransformersSpec": "transformers_backend",
    "loaded_model": "transformers_decoding",
    "sample_rows": "transformers_decoding",
    "unload_model": "unloading",
    "vllm_imports": "vllm_backend",
    "MAX_RETRY_AFTER_S": "openai_backend",
    "retry_after_s": "openai_backend",
}
__getattr__, __dir__, __all__ = lazy_names(__name__, _EXPORTS)
