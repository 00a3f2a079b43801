"""LLM backend on vLLM's offline engine (GPU). vLLM is an optional dependency: the ``gpu`` extra."""

from __future__ import annotations

import functools
from typing import ClassVar, Literal

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.llm.base import ChatRequest, Completion
from orchrm_dagster.llm.registry import register_backend

INSTALL_HINT = "pip install -e '.[gpu]'"


@functools.cache
def vllm_imports() -> bool:
    """vLLM is installed and imports (a build for another torch or CUDA fails here, not halfway through a round)."""
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


class VLLMBackend:
    """:class:`~orchrm_dagster.llm.base.LLMBackend` on ``vllm.LLM.chat``.

    Grammars go through vLLM's structured outputs: ``StructuredOutputsParams(grammar=...)`` in recent
    vLLM, ``GuidedDecodingParams(grammar=...)`` in older releases (whichever this vLLM has).
    """

    batches_in_process = True  # one engine: concurrent callers gain from sharing a batch (llm.coalescing)

    def __init__(self, model: str, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.85,
                 max_model_len: int | None = None, dtype: str = "auto", name: str = "vllm"):
        try:
            import vllm
        except ImportError as exc:
            raise ImportError(f"VLLMBackend needs vLLM, which is not installed; install the gpu extra: "
                              f"{INSTALL_HINT}") from exc
        self._vllm = vllm
        self.name = name
        self.model_id = model
        self._llm = vllm.LLM(model=model, tensor_parallel_size=tensor_parallel_size, dtype=dtype,
                             gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len)

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        try:
            return self._generate(requests)
        except Exception as exc:
            if len(requests) == 1:
                return [_failed(exc)]
            # one bad request fails vLLM's whole call: retry one by one to keep the good ones
            return [self._generate_one(request) for request in requests]

    def _generate_one(self, request: ChatRequest) -> Completion:
        try:
            return self._generate([request])[0]
        except Exception as exc:
            return _failed(exc)

    def _generate(self, requests: list[ChatRequest]) -> list[Completion]:
        conversations = [[dict(m) for m in request.messages] for request in requests]
        params = [self._sampling_params(request) for request in requests]
        outputs = self._llm.chat(conversations, sampling_params=params, use_tqdm=False)
        return [_completion(output, request.want_logprobs) for output, request in zip(outputs, requests)]

    def _sampling_params(self, request: ChatRequest):
        sampling = request.sampling
        return self._vllm.SamplingParams(
            temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_new_tokens,
            seed=sampling.seed, stop=list(sampling.stop) or None,
            logprobs=1 if request.want_logprobs else None, **self._grammar_params(request.grammar))

    def _grammar_params(self, grammar: str | None) -> dict:
        if grammar is None:
            return {}
        params = self._vllm.sampling_params
        if hasattr(params, "StructuredOutputsParams"):
            return {"structured_outputs": params.StructuredOutputsParams(grammar=grammar)}
        return {"guided_decoding": params.GuidedDecodingParams(grammar=grammar)}


@register_backend
@engine_config
class VLLMSpec:
    """vLLM's offline engine in this process (GPU; the `gpu` extra)."""

    kind: Literal["vllm"] = Field(default="vllm", kw_only=True, description="The backend kind")
    model: str = Field(description="Model folder or hub id")
    dtype: str = Field(default="auto", description="Weights dtype")
    tensor_parallel_size: int = Field(default=1, description="GPUs one model is split over")
    gpu_memory_utilization: float = Field(default=0.85, description="Share of GPU memory vLLM may take")

    loads_model_folders: ClassVar[bool] = True

    def build(self) -> VLLMBackend:
        return VLLMBackend(self.model, tensor_parallel_size=self.tensor_parallel_size, dtype=self.dtype,
                           gpu_memory_utilization=self.gpu_memory_utilization)


def _failed(exc: Exception) -> Completion:
    return Completion(text="", prompt_tokens=0, completion_tokens=0, finish_reason="error",
                      error=f"{type(exc).__name__}: {exc}")


def _completion(output, want_logprobs: bool) -> Completion:
    generated = output.outputs[0]
    logprobs = None
    if want_logprobs and generated.logprobs is not None:
        # one dict per generated token: token id -> Logprob; it always holds the chosen token
        logprobs = tuple(step[token].logprob for token, step in zip(generated.token_ids, generated.logprobs))
    return Completion(
        text=generated.text,
        prompt_tokens=len(output.prompt_token_ids or ()),
        completion_tokens=len(generated.token_ids),
        token_logprobs=logprobs,
        finish_reason=generated.finish_reason or "stop",
    )
