"""LLM backend for any OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp, OpenAI...).

A batch is sent as concurrent HTTP requests (at most ``max_concurrency`` at a time). Connect errors,
timeouts, HTTP 429 and 5xx are retried with exponential backoff and jitter (``Retry-After`` is
honoured when the server sends it); other 4xx are not. A request that still fails comes back as a
``Completion`` with ``error`` set and ``finish_reason="error"``.

Grammars are sent the way vLLM's OpenAI server takes them: ``"structured_outputs": {"grammar": ...}``
(vLLM >= 0.10.2) and the older top-level ``"guided_grammar"`` (removed in vLLM 0.12; vLLM ignores
request fields it does not know, with a warning, so sending both works with old and new servers).
Servers that reject unknown fields (OpenAI itself) cannot take a grammar.
"""

from __future__ import annotations

import email.utils
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, ClassVar, Literal

if TYPE_CHECKING:
    import httpx

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.llm.base import ChatRequest, Completion
from orchrm_dagster.llm.registry import register_backend

MAX_RETRY_AFTER_S = 120.0  # a longer Retry-After is waited this long


class _RetryableHTTPError(Exception):
    def __init__(self, message: str, retry_after_s: float | None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class OpenAICompatibleBackend:
    """:class:`~orchrm_dagster.llm.base.LLMBackend` over HTTP: POST ``{base_url}/chat/completions``."""

    batches_in_process = False  # concurrent requests go to the server, which batches them

    def __init__(self, base_url: str, model: str, api_key: str | None = None, max_concurrency: int = 8,
                 timeout_s: float = 60.0, max_retries: int = 4, backoff_s: float = 0.5, name: str = "openai"):
        self.name = name
        self.model_id = model
        self.base_url = base_url.rstrip("/")
        self.max_concurrency = max(1, max_concurrency)
        self.max_retries = max(0, max_retries)
        self.backoff_s = backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        import httpx  # when a backend is built, not when the settings that name it are read

        self._client = httpx.Client(timeout=timeout_s, headers=headers,
                                    limits=httpx.Limits(max_connections=self.max_concurrency))

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        if len(requests) <= 1:
            return [self._complete(request) for request in requests]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(requests))) as pool:
            return list(pool.map(self._complete, requests))

    def close(self) -> None:
        self._client.close()

    def request_body(self, request: ChatRequest) -> dict:
        """The JSON body sent for ``request``."""
        sampling = request.sampling
        body: dict = {
            "model": self.model_id,
            "messages": [dict(message) for message in request.messages],
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if request.want_logprobs:
            body["logprobs"] = True
        if request.grammar is not None:
            body["structured_outputs"] = {"grammar": request.grammar}
            body["guided_grammar"] = request.grammar
        return body

    def _complete(self, request: ChatRequest) -> Completion:
        try:
            return _parse_completion(self._post_with_retries(self.request_body(request)), request.want_logprobs)
        except Exception as exc:
            return Completion(text="", prompt_tokens=0, completion_tokens=0, finish_reason="error",
                              error=f"{type(exc).__name__}: {exc}")

    def _post_with_retries(self, body: dict) -> dict:
        attempt = 0
        while True:
            try:
                return self._post(body)
            except (_RetryableHTTPError, *_retryable_errors()) as exc:
                if attempt >= self.max_retries:
                    raise
                time.sleep(self._wait_s(attempt, getattr(exc, "retry_after_s", None)))
                attempt += 1

    def _post(self, body: dict) -> dict:
        response = self._client.post(f"{self.base_url}/chat/completions", json=body)
        if response.status_code == 429 or response.status_code >= 500:
            raise _RetryableHTTPError(_describe(response), retry_after_s(response))
        if response.status_code >= 400:
            raise RuntimeError(_describe(response))
        return response.json()

    def _wait_s(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, MAX_RETRY_AFTER_S)
        return self.backoff_s * 2 ** attempt * random.uniform(0.5, 1.5)


@register_backend
@engine_config
class OpenAISpec:
    """Any OpenAI-compatible chat-completions server (`vllm serve`, SGLang, llama.cpp, hosted APIs)."""

    kind: Literal["openai"] = Field(default="openai", kw_only=True, description="The backend kind")
    base_url: str = Field(description="The server, e.g. http://host:8000/v1")
    model: str = Field(description="The model name the server serves")
    api_key_env: str | None = Field(default="OPENAI_API_KEY", description="Environment variable holding the "
                                    "server's API key, read when the backend is built (unset: no key)")
    max_concurrency: int = Field(default=8, description="Requests in flight at once")
    timeout_s: float = Field(default=60.0, description="Per-request timeout in seconds")
    max_retries: int = Field(default=4, description="Retries with backoff on transient errors")

    loads_model_folders: ClassVar[bool] = False

    def build(self) -> OpenAICompatibleBackend:
        api_key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return OpenAICompatibleBackend(self.base_url, self.model, api_key=api_key, timeout_s=self.timeout_s,
                                       max_concurrency=self.max_concurrency, max_retries=self.max_retries)


def _retryable_errors() -> tuple[type[Exception], ...]:
    import httpx

    return httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError


def _describe(response: httpx.Response) -> str:
    return f"HTTP {response.status_code}: {response.text[:500]}"


def retry_after_s(response: httpx.Response) -> float | None:
    """``Retry-After`` as seconds (a number, fractions accepted, or an HTTP date), None if absent/unreadable."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _parse_completion(data: dict, want_logprobs: bool) -> Completion:
    choice = data["choices"][0]
    usage = data.get("usage") or {}
    logprobs = None
    if want_logprobs:
        content = (choice.get("logprobs") or {}).get("content") or []
        logprobs = tuple(float(item["logprob"]) for item in content)
    return Completion(
        text=(choice.get("message") or {}).get("content") or "",
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        token_logprobs=logprobs,
        finish_reason=choice.get("finish_reason") or "stop",
    )
