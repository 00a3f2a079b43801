"""A deterministic test double of LLMBackend: canned replies chosen by what the prompt contains."""

from __future__ import annotations

from collections.abc import Callable

from orchrm_dagster.llm.base import ChatRequest, Completion

Reply = str | Completion | Callable[[ChatRequest], "str | Completion"]


def failed(message: str = "boom") -> Completion:
    return Completion(text="", prompt_tokens=0, completion_tokens=0, finish_reason="error", error=message)


def words(text: str) -> int:
    return len(text.split())


class ScriptedBackend:
    """Replies with the first scripted reply whose key occurs in the prompt, else ``default``.

    Tokens are word counts; every batch of requests is recorded in ``batches``.
    """

    name = "scripted"
    model_id = "scripted-model"

    def __init__(self, script: list[tuple[str, Reply]] | None = None,
                 default: Reply = "I am not sure.\nAnswer: unknown") -> None:
        self.script = list(script or [])
        self.default = default
        self.batches: list[list[ChatRequest]] = []

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        self.batches.append(list(requests))
        return [self._complete(request) for request in requests]

    @property
    def requests(self) -> list[ChatRequest]:
        return [request for batch in self.batches for request in batch]

    @property
    def prompts(self) -> list[str]:
        return [prompt_of(request) for request in self.requests]

    def _complete(self, request: ChatRequest) -> Completion:
        prompt = prompt_of(request)
        reply = next((r for key, r in self.script if key in prompt), self.default)
        if callable(reply):
            reply = reply(request)
        if isinstance(reply, Completion):
            return reply
        return Completion(text=reply, prompt_tokens=words(prompt), completion_tokens=words(reply))


def prompt_of(request: ChatRequest) -> str:
    return request.messages[-1]["content"]


# Keys that tell the prompts apart (phrases of the prompt files).
COT = "Solve the following problem. Think step by step"
SC = "Solve the following problem independently"
DEBATE_TURN = "in a debate among experts"
JUDGE = "You are the judge"
CRITIC = "Review the following attempt"
REFINE = "Write an improved solution"
QUERY = "Write one search query"
SUMMARIZE = "using the retrieved passages"
