"""LLM backends behind one interface (transformers on CPU or GPU, OpenAI-compatible HTTP, vLLM in-process)."""

from orchrm_dagster.llm.base import ChatRequest, Completion, LLMBackend, SamplingSettings
from orchrm_dagster.llm.coalescing import CoalescingBackend
from orchrm_dagster.llm.embedded import EMBEDDED_GGUF, embedded_model_dir
from orchrm_dagster.llm.factory import BackendKind, BackendSpec, build_backend
from orchrm_dagster.llm.grammar_constraint import GrammarLogitsProcessor, compile_grammar

__all__ = ["EMBEDDED_GGUF", "embedded_model_dir", "BackendKind", "BackendSpec", "ChatRequest", "CoalescingBackend", "Completion", "LLMBackend",
           "SamplingSettings", "build_backend", "GrammarLogitsProcessor", "compile_grammar"]
