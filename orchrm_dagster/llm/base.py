"""The one small interface every LLM backend implements (transformers on CPU, OpenAI-compatible HTTP, vLLM)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[dict[str, str], ...]  # [{"role": "system"|"user"|"assistant", "content": str}, ...]
    sampling: SamplingSettings = SamplingSettings()
    want_logprobs: bool = False  # return the log-probability of every generated token
    grammar: str | None = None  # EBNF (xgrammar syntax) the output must match; None: free text


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    token_logprobs: tuple[float, ...] | None = None
    finish_reason: str = "stop"  # "stop" | "length" | "error"
    error: str | None = None  # set when this one request failed (the batch goes on)

    @property
    def mean_logprob(self) -> float | None:
        if not self.token_logprobs:
            return None
        return sum(self.token_logprobs) / len(self.token_logprobs)


@runtime_checkable
class LLMBackend(Protocol):
    """Generates a batch of chat requests. Implementations batch or parallelise as they can, keep the order
    of `requests` in the result, and report a failed request as a Completion with `error` set instead of
    raising, so one bad request never costs the rest of the batch."""

    name: str
    model_id: str
    # True: the backend batches in its own process (one forward pass for many requests), so the calls of concurrent
    # callers should be merged into one batch before they reach it (llm.coalescing). False: it serves concurrent
    # calls itself (an HTTP server batches them; a CoalescingBackend has merged them already).
    batches_in_process: bool

    def generate(self, requests: list[ChatRequest]) -> list[Completion]: ...
