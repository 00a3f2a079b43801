from orchrm_dagster.llm.base import ChatRequest, Completion, LLMBackend, SamplingSettings, TokenTally

__all__ = ["ChatRequest", "Completion", "LLMBackend", "SamplingSettings", "TokenTally"]
