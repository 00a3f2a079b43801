"""LLM judges that name the best of N candidates (the LLM_JUDGE methods: what each shows the judge, the plans or the
executed trajectories, its prompt and its reading are the method's).

Reading modes: "full" shows every candidate whole. When the N whole candidates do not fit the judge's context
(`JudgeSettings.context_tokens`) they are judged in a knockout: consecutive groups that fit (at worst pairs), each
group's winner advances, until one is left; a pair that does not fit even alone is shown cut to fit, each cut
candidate ending in a note that says so. "truncated" cuts each candidate at `max_candidate_chars` first (the cheaper
variant). Every call's prompt + completion tokens are the verdict's verification tokens. Each call is cached by
(method, problem, candidates shown, model, reading).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import orjson

from orchrm_dagster.evaluation.methods import method_named
from orchrm_dagster.evaluation.settings import JudgeSettings
from orchrm_dagster.llm import ChatRequest, LLMBackend, SamplingSettings
from orchrm_dagster.mas import render_prompt

FULL, TRUNCATED = "full", "truncated"
CHARS_PER_TOKEN = 4  # the estimate used when the backend has no tokenizer
CHAT_MARGIN = 48  # tokens the chat template wraps a prompt in (role markers, system turn), kept free
CUT_NOTE = " ... [cut here: {shown:,} of {total:,} characters shown; the rest does not fit the judge's context]"
CUT_NOTE_TOKENS = 32

_CHOICE = re.compile(r"<choice>\s*(\d+)\s*</choice>")
_NUMBER = re.compile(r"\b(\d+)\b")


@dataclass(frozen=True)
class JudgeCall:
    """One prompt: a group of candidates the judge is shown, as shown."""

    method: str
    problem_id: str
    question: str
    candidates: tuple[str, ...]  # run_ids in the order shown
    texts: tuple[str, ...]  # the plans or trajectories shown (cut where the reading cut them)
    reading: str = FULL  # how they were read: see JUDGE_CACHE's `reading`

    def key(self, model: str) -> str:
        return judge_key(self.method, self.problem_id, self.candidates, model, self.reading)


@dataclass(frozen=True)
class CandidateSet:
    """A candidate set to judge, its texts whole: the judge's reading decides what of them it is shown."""

    method: str
    problem_id: str
    question: str
    candidates: tuple[str, ...]
    texts: tuple[str, ...]


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
    reading: str | None = None  # None: cached before reading modes

    def row(self) -> dict:
        return {"cache_key": self.cache_key, "method": self.method, "problem_id": self.problem_id,
                "candidates": orjson.dumps(list(self.candidates)).decode(), "model": self.model,
                "choice": self.choice, "parsed": self.parsed, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "reading": self.reading}

    @classmethod
    def from_row(cls, row: dict) -> Verdict:
        return cls(row["cache_key"], row["method"], row["problem_id"], tuple(orjson.loads(row["candidates"])),
                   row["model"], row["choice"], row["parsed"], row["prompt_tokens"], row["completion_tokens"],
                   row.get("reading"))

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class SetVerdict:
    """The judge's pick of one candidate set, over every call it took."""

    choice: int  # 0-based position in the set
    tokens: int  # prompt + completion tokens of all its calls (cached ones too: the cost as if run alone)
    calls: int
    cut: int  # candidates shown cut to fit the context


@dataclass
class JudgedSets:
    verdicts: list[SetVerdict]
    fresh: list[Verdict] = field(default_factory=list)  # asked now (the rest came from the cache)
    asked: int = 0  # calls, cached or not
    estimated: bool = False  # prompt lengths estimated at CHARS_PER_TOKEN (the backend has no tokenizer)


def judge_key(method: str, problem_id: str, candidates: Sequence[str], model: str, reading: str) -> str:
    text = orjson.dumps([method, problem_id, list(candidates), model, reading])
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


def judge_prompt(call: JudgeCall) -> str:
    return _render(call.method, call.question, call.texts)


def _render(method: str, question: str, texts: Sequence[str]) -> str:
    shown = "\n\n".join(f"{_header(k)}{text}" for k, text in enumerate(texts, 1))
    return render_prompt(method_named(method).judge_prompt, question=question, candidates=shown, n=len(texts))


def _header(k: int) -> str:
    return f"[Candidate {k}]\n"


def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + " ..."


# ---------------------------------------------------------------- token counts


def prompt_token_counter(backend: LLMBackend) -> tuple[Callable[[str], int], bool]:
    """Counts a text's tokens with the backend's tokenizer where it has one (a transformers backend, also behind a
    coalescing wrapper; any backend with a `tokenizer`), else estimates CHARS_PER_TOKEN characters a token; the
    second value says whether it estimates."""
    tokenizer = _tokenizer_of(backend)
    if tokenizer is None:
        return (lambda text: -(-len(text) // CHARS_PER_TOKEN)), True
    return (lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])), False


def _tokenizer_of(backend):
    inner = getattr(backend, "inner", None)
    if inner is not None:
        return _tokenizer_of(inner)
    loaded = getattr(backend, "loaded", None)
    return getattr(loaded(), "tokenizer", None) if callable(loaded) else getattr(backend, "tokenizer", None)


# ---------------------------------------------------------------- judging sets


def judge_sets(sets: Sequence[CandidateSet], backend: LLMBackend, settings: JudgeSettings,
               cache: dict[str, Verdict]) -> JudgedSets:
    """Every set's pick. Sets are judged in knockout rounds (one round when all N fit the context); the calls of a
    round, over all sets, go to the backend as one batch, and cached calls are not asked again."""
    count, estimated = prompt_token_counter(backend)
    counted: dict[str, int] = {}

    def tokens_of(text: str) -> int:
        if text not in counted:
            counted[text] = count(text)
        return counted[text]

    brackets = [_Bracket.of(s, settings, tokens_of) for s in sets]
    result = JudgedSets([], estimated=estimated)
    while pending := [b for b in brackets if not b.done]:
        rounds = [(b, b.next_round(settings.context_tokens)) for b in pending]
        calls = [call for _, groups in rounds for _, call in groups if call is not None]
        verdicts, fresh = run_judges(calls, backend, settings, cache)
        result.fresh += fresh
        result.asked += len(calls)
        for bracket, groups in rounds:
            bracket.advance(groups, verdicts, backend.model_id)
    result.verdicts = [SetVerdict(b.survivors[0], b.tokens, b.calls, len(b.cut)) for b in brackets]
    return result


@dataclass
class _Bracket:
    """One set's knockout: the positions still in, and what its calls cost."""

    candidates: CandidateSet
    texts: tuple[str, ...]  # as the reading shows them
    sizes: tuple[int, ...]  # their tokens, with their header
    budget: int  # prompt tokens left for candidates
    reading: str
    survivors: list[int]
    tokens: int = 0
    calls: int = 0
    cut: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, candidates: CandidateSet, settings: JudgeSettings, tokens_of: Callable[[str], int]) -> _Bracket:
        mode = method_named(candidates.method).judge_reading
        if mode not in (FULL, TRUNCATED):
            raise ValueError(f"judge {candidates.method!r}: unknown reading {mode!r} (known: {FULL}, {TRUNCATED})")
        texts = candidates.texts
        reading = FULL
        if mode == TRUNCATED:
            texts = tuple(_cut(text, settings.max_candidate_chars) for text in texts)
            reading = f"{TRUNCATED}:{settings.max_candidate_chars}"
        fixed = tokens_of(_render(candidates.method, candidates.question, ()))  # the prompt around the candidates
        budget = settings.context_tokens - settings.max_new_tokens - CHAT_MARGIN - fixed
        if budget < 2 * (tokens_of(_header(10)) + CUT_NOTE_TOKENS + 16):
            raise ValueError(f"judge {candidates.method!r}: a context of {settings.context_tokens} tokens leaves "
                             f"{budget} for candidates on problem {candidates.problem_id} (its question and prompt "
                             f"take {fixed}); raise JudgeSettings.context_tokens")
        sizes = tuple(tokens_of(_header(k)) + tokens_of(text) for k, text in enumerate(texts, 1))
        return cls(candidates, texts, sizes, budget, reading, list(range(len(texts))))

    @property
    def done(self) -> bool:
        return len(self.survivors) <= 1

    def next_round(self, context_tokens: int) -> list[tuple[list[int], JudgeCall | None]]:
        """The round's groups of positions, each with its call (None: a group of one advances unasked)."""
        groups, current, used = [], [], 0
        for position in self.survivors:
            size = self.sizes[position]
            if current and used + size > self.budget:
                if len(current) == 1:  # at worst a pair, cut to fit
                    groups.append(current + [position])
                    current, used = [], 0
                    continue
                groups.append(current)
                current, used = [], 0
            current.append(position)
            used += size
        if current:
            groups.append(current)
        return [(group, self._call(group, context_tokens) if len(group) > 1 else None) for group in groups]

    def _call(self, group: list[int], context_tokens: int) -> JudgeCall:
        texts = [self.texts[p] for p in group]
        reading = self.reading
        if sum(self.sizes[p] for p in group) > self.budget:  # only a pair gets here
            texts = self._fit_pair(group)
            reading = f"{self.reading}-cut:{context_tokens}"
        s = self.candidates
        return JudgeCall(s.method, s.problem_id, s.question, tuple(s.candidates[p] for p in group), tuple(texts),
                         reading)

    def _fit_pair(self, pair: list[int]) -> list[str]:
        """The pair's texts cut so that both fit: the shorter whole where it fits in half, the longer in the rest."""
        room = self.budget - 2 * CUT_NOTE_TOKENS
        first, second = (self.sizes[p] for p in pair)
        keep_first = min(first, max(room // 2, room - second))
        allowed = (keep_first, min(second, room - keep_first))
        texts = []
        for position, keep in zip(pair, allowed):
            text, size = self.texts[position], self.sizes[position]
            if keep < size:
                self.cut.add(position)
                shown = int(len(text) * keep / size)
                text = text[:shown] + CUT_NOTE.format(shown=shown, total=len(text))
            texts.append(text)
        return texts

    def advance(self, groups: list[tuple[list[int], JudgeCall | None]], verdicts: dict[str, Verdict],
                model: str) -> None:
        winners = []
        for group, call in groups:
            if call is None:
                winners.append(group[0])
                continue
            verdict = verdicts[call.key(model)]
            winners.append(group[verdict.choice])
            self.tokens += verdict.tokens
            self.calls += 1
        self.survivors = winners


def run_judges(calls: Sequence[JudgeCall], backend: LLMBackend, settings: JudgeSettings,
               cache: dict[str, Verdict]) -> tuple[dict[str, Verdict], list[Verdict]]:
    """Verdicts of every call, each shown as it is (cached ones are not asked again), and the new ones. The calls
    not in the cache go to the backend as one batch."""
    model = backend.model_id
    todo = {call.key(model): call for call in calls if call.key(model) not in cache}
    keys = list(todo)
    requests = [ChatRequest(({"role": "user", "content": judge_prompt(todo[k])},),
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
                             completion.completion_tokens, call.reading))
    cache.update({v.cache_key: v for v in fresh})  # a later round or set that repeats a call finds it
    return {call.key(model): cache[call.key(model)] for call in calls}, fresh
