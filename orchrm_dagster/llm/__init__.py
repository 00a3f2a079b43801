"""LLM backends behind one interface (transformers on CPU or GPU, OpenAI-compatible HTTP, vLLM in-process)."""

from orchrm_dagster.llm.base import ChatRequest, Completion, LLMBackend, SamplingSettings
from orchrm_dagster.llm.coalescing import CoalescingBackend
from orchrm_dagster.llm.factory import BackendKind, BackendSpec, build_backend

__all__ = ["BackendKind", "BackendSpec", "ChatRequest", "CoalescingBackend", "Completion", "LLMBackend",
           "SamplingSettings", "build_backend"]
