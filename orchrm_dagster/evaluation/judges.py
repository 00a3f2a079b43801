"""LLM judges that name the best of N candidates (the LLM_JUDGE methods: what each shows the judge, the plans or the
executed trajectories, and its prompt are the method's). Every verdict is cached by (method, problem, candidate
set, model)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from orchrm_dagster.evaluation.methods import method_named
from orchrm_dagster.evaluation.settings import JudgeSettings
from orchrm_dagster.llm import ChatRequest, LLMBackend, SamplingSettings
from orchrm_dagster.mas import render_prompt

_CHOICE = re.compile(r"<choice>\s*(\d+)\s*</choice>")
_NUMBER = re.compile(r"\b(\d+)\b")


@dataclass(frozen=True)
class JudgeCall:
    method: str
    problem_id: str
    question: str
    candidates: tuple[str, ...]  # run_ids in the order shown
    texts: tuple[str, ...]  # the plans or trajectories shown

    def key(self, model: str) -> str:
        return judge_key(self.method, self.problem_id, self.candidates, model)


@dataclass(frozen=True)
class Verdict:
    cache_key: str
    method: str
    problem_id: str
    candidates: tuple[str, ...]
    model: str
    choice: int  # 0-based position among the candidates
    parsed: bool  # False: the answer named no candidate, and the first one was taken
    prompt_tokens: int
    completion_tokens: int

    def row(self) -> dict:
        return {"cache_key": self.cache_key, "method": self.method, "problem_id": self.problem_id,
                "candidates": orjson.dumps(list(self.candidates)).decode(), "model": self.model,
                "choice": self.choice, "parsed": self.parsed, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens}

    @classmethod
    def from_row(cls, row: dict) -> Verdict:
        return cls(row["cache_key"], row["method"], row["problem_id"], tuple(orjson.loads(row["candidates"])),
                   row["model"], row["choice"], row["parsed"], row["prompt_tokens"], row["completion_tokens"])


def judge_key(method: str, problem_id: str, candidates: Sequence[str], model: str) -> str:
    text = orjson.dumps([method, problem_id, list(candidates), model])
    return hashlib.sha256(text).hexdigest()[:32]


def choice_grammar(n: int) -> str:
    options = " | ".join(f'"{k}"' for k in range(1, n + 1))
    return f'root ::= "<choice>" ({options}) "</choice>"'


def parse_choice(text: str, n: int) -> int | None:
    """The 0-based candidate the answer names: <choice>k</choice>, else the first number in 1..n; None if none."""
    tagged = _CHOICE.search(text)
    numbers = [tagged.group(1)] if tagged else _NUMBER.findall(text)
    for number in numbers:
        if 1 <= int(number) <= n:
            return int(number) - 1
    return None


def judge_prompt(call: JudgeCall, max_chars: int) -> str:
    shown = "\n\n".join(f"[Candidate {k}]\n{_cut(text, max_chars)}" for k, text in enumerate(call.texts, 1))
    prompt = method_named(call.method).judge_prompt
    return render_prompt(prompt, question=call.question, candidates=shown, n=len(call.texts))


def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + " ..."


def run_judges(calls: Sequence[JudgeCall], backend: LLMBackend, settings: JudgeSettings,
               cache: dict[str, Verdict]) -> tuple[dict[str, Verdict], list[Verdict]]:
    """Verdicts of every call (cached ones are not asked again), and the new ones. The calls not in the cache go
    to the backend as one batch."""
    model = backend.model_id
    todo = {call.key(model): call for call in calls if call.key(model) not in cache}
    keys = list(todo)
    requests = [ChatRequest(({"role": "user", "content": judge_prompt(todo[k], settings.max_candidate_chars)},),
                            SamplingSettings(temperature=0.0, max_new_tokens=settings.max_new_tokens, seed=0),
                            grammar=choice_grammar(len(todo[k].texts)) if settings.grammar else None)
                for k in keys]
    completions = backend.generate(requests) if requests else []
    fresh = []
    for key, completion in zip(keys, completions):
        call = todo[key]
        choice = None if completion.error else parse_choice(completion.text, len(call.texts))
        fresh.append(Verdict(key, call.method, call.problem_id, call.candidates, model,
                             0 if choice is None else choice, choice is not None, completion.prompt_tokens,
                             completion.completion_tokens))
    verdicts = {**cache, **{v.cache_key: v for v in fresh}}
    return {call.key(model): verdicts[call.key(model)] for call in calls}, fresh
