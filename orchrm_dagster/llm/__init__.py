from orchrm_dagster.llm.base import ChatRequest, Completion, LLMBackend, SamplingSettings, TokenTally
from orchrm_dagster.llm.factory import BackendSpec, build_backend

__all__ = ["BackendSpec", "ChatRequest", "Completion", "LLMBackend", "SamplingSettings", "TokenTally", "build_backend"]
