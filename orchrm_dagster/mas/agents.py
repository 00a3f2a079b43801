"""The five MAS-Orchestra sub-agents (docs/method.md section 2), on top of any LLMBackend.

An agent turns (question, agent_input) into one output text through one or more LLM calls, each
recorded as a :class:`CallRecord`. Every request is a single user message rendered from a prompt
file (orchrm_dagster/mas/prompts/). Calls that can run together (SCAgent's samples, one debate
round's turns) go to the backend as one ``generate()`` batch.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from typing import ClassVar

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.labels import answer_types, labeler_for
from orchrm_dagster.llm import ChatRequest, Completion, LLMBackend, SamplingSettings
from orchrm_dagster.mas.answers import majority_index
from orchrm_dagster.mas.prompts import render_prompt
from orchrm_dagster.mas.retrieval import Hit, Retriever
from orchrm_dagster.plans import KNOWN_AGENTS, AgentSpec


@engine_config
class AgentSettings:
    sc_samples: int = Field(default=5, description="SCAgent: samples per vote")
    sc_temperature: float = Field(
        default=0.7, description="SCAgent's temperature when sub-agents decode greedily (greedy samples would agree)")
    debate_roles: tuple[str, ...] = Field(
        default=("Proposer", "Skeptic"), description="DebateAgent's roles when the plan gives none")
    debate_rounds: int = Field(default=2, description="DebateAgent: rounds before the judge decides")
    reflexion_rounds: int = Field(default=1, description="ReflexionAgent: critic + refine rounds at most")
    search_k: int = Field(default=3, description="WebSearchAgent: passages retrieved per query")
    passage_chars: int = Field(default=1500, description="WebSearchAgent: each passage is cut to this many characters")

    def __post_init__(self) -> None:
        for name in ("sc_samples", "debate_rounds", "search_k", "passage_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"AgentSettings.{name} must be >= 1")
        if self.reflexion_rounds < 0:
            raise ValueError("AgentSettings.reflexion_rounds must be >= 0")
        if not self.debate_roles:
            raise ValueError("AgentSettings.debate_roles must not be empty")


@dataclass(frozen=True)
class AgentContext:
    backend: LLMBackend
    sampling: SamplingSettings = SamplingSettings()
    answer_format: str = "math"  # an answer type: its labeler names the prompt that asks for that form
    # call n of an agent run samples with seed `seed + n` (replacing sampling.seed); None: unseeded
    seed: int | None = 0
    retriever: Retriever | None = None
    deadline: float | None = None  # time.monotonic() after which no new LLM call starts

    def __post_init__(self) -> None:
        if self.answer_format not in answer_types():
            raise ValueError(f"answer_format must be one of {answer_types()}, got {self.answer_format!r}")


@dataclass(frozen=True)
class CallRecord:
    """One LLM call; the fields of a run record's ``subagents`` entry, plus an optional note."""

    agent_id: str
    agent_name: str
    input: str
    output: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    note: str = ""

    def to_record(self) -> dict[str, object]:
        """The run-record ``subagents`` entry (``note`` only when set: the contract keeps extra fields)."""
        record: dict[str, object] = {
            "agent_id": self.agent_id, "agent_name": self.agent_name, "input": self.input, "output": self.output,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens, "model": self.model,
        }
        if self.note:
            record["note"] = self.note
        return record


@dataclass(frozen=True)
class AgentOutput:
    text: str
    calls: list[CallRecord]


class AgentError(RuntimeError):
    """A sub-agent run that failed; ``calls`` are the calls it completed before failing."""

    def __init__(self, message: str, calls: list[CallRecord] | None = None) -> None:
        super().__init__(message)
        self.calls = list(calls or [])


class AgentTimeout(AgentError):
    """The context's deadline passed before the agent's next LLM call."""


class AgentSession:
    """One agent run: sends prompts to the backend and records every completed call."""

    def __init__(self, agent_name: str, spec: AgentSpec, ctx: AgentContext) -> None:
        self.agent_name = agent_name
        self.spec = spec
        self.ctx = ctx
        self.calls: list[CallRecord] = []
        self._requests_sent = 0

    @property
    def answer_instruction(self) -> str:
        return render_prompt(labeler_for(self.ctx.answer_format).prompt_file)

    def ask(self, prompt: str, *, temperature: float | None = None, note: str = "") -> str:
        return self.ask_all([prompt], temperature=temperature, note=note)[0]

    def ask_all(self, prompts: list[str], *, temperature: float | None = None, note: str = "") -> list[str]:
        """The completions of ``prompts``, sent as one batch; AgentError on any failed request."""
        self._check_deadline()
        requests = [self._request(p, temperature) for p in prompts]
        completions = self.ctx.backend.generate(requests)
        if len(completions) != len(requests):
            raise AgentError(f"backend returned {len(completions)} completions for {len(requests)} requests")
        for prompt, completion in zip(prompts, completions):
            if completion.error is None:
                self._record(prompt, completion, note)
        failed = next((c for c in completions if c.error is not None), None)
        if failed is not None:
            raise AgentError(f"LLM call failed: {failed.error}")
        return [c.text for c in completions]

    def _request(self, prompt: str, temperature: float | None) -> ChatRequest:
        sampling = replace(self.ctx.sampling, seed=offset_seed(self.ctx.seed, self._requests_sent))
        if temperature is not None:
            sampling = replace(sampling, temperature=temperature)
        self._requests_sent += 1
        return ChatRequest(messages=({"role": "user", "content": prompt},), sampling=sampling)

    def _record(self, prompt: str, completion: Completion, note: str) -> None:
        self.calls.append(CallRecord(
            agent_id=self.spec.agent_id, agent_name=self.agent_name, input=prompt, output=completion.text,
            prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens,
            model=self.ctx.backend.model_id, note=note,
        ))

    def _check_deadline(self) -> None:
        if self.ctx.deadline is not None and time.monotonic() >= self.ctx.deadline:
            raise AgentTimeout("deadline passed before the next LLM call")


def offset_seed(seed: int | None, offset: int) -> int | None:
    return None if seed is None else seed + offset


def task_text(question: str, agent_input: str) -> str:
    """What an agent works on: the question, plus the plan's (filled-in) input when there is one."""
    if not agent_input.strip():
        return question
    return render_prompt("task_with_input", question=question, agent_input=agent_input)


class SubAgent:
    name: ClassVar[str] = ""

    def __init__(self, settings: AgentSettings = AgentSettings()) -> None:
        self.settings = settings

    def run(self, question: str, agent_input: str, spec: AgentSpec, ctx: AgentContext) -> AgentOutput:
        """Run on ``question`` with the filled-in ``agent_input``; AgentError (with the calls made) on failure."""
        session = AgentSession(self.name or type(self).__name__, spec, ctx)
        try:
            text = self.solve(task_text(question, agent_input), session)
        except AgentError as exc:
            exc.calls = list(session.calls)
            raise
        except Exception as exc:  # a backend or retriever bug: report it like a failed call
            raise AgentError(f"{type(exc).__name__}: {exc}", session.calls) from exc
        return AgentOutput(text=text, calls=list(session.calls))

    def solve(self, task: str, session: AgentSession) -> str:
        raise NotImplementedError


class CoTAgent(SubAgent):
    """One chain-of-thought call."""

    name = "CoTAgent"

    def solve(self, task: str, session: AgentSession) -> str:
        return session.ask(render_prompt("cot", question=task, answer_format=session.answer_instruction))


class SCAgent(SubAgent):
    """Self-consistency: ``sc_samples`` samples in one batch, each with its own seed; the first sample
    carrying the majority answer is the output."""

    name = "SCAgent"

    def solve(self, task: str, session: AgentSession) -> str:
        prompt = render_prompt("sc", question=task, answer_format=session.answer_instruction)
        greedy = session.ctx.sampling.temperature == 0
        temperature = self.settings.sc_temperature if greedy else None
        samples = session.ask_all([prompt] * self.settings.sc_samples, temperature=temperature)
        return samples[majority_index(samples)]


class DebateAgent(SubAgent):
    """One debater per role (the plan's debate_roles, else the settings'), ``debate_rounds`` rounds
    with each round's turns in one batch, then a judge call whose text is the output."""

    name = "DebateAgent"

    def solve(self, task: str, session: AgentSession) -> str:
        roles = session.spec.debate_roles or self.settings.debate_roles
        transcript: list[str] = []
        for round_number in range(1, self.settings.debate_rounds + 1):
            shown = _transcript_text(transcript)
            prompts = [render_prompt("debate_turn", role=role, question=task, transcript=shown,
                                     answer_format=session.answer_instruction) for role in roles]
            turns = session.ask_all(prompts)
            transcript += [f"[Round {round_number}] {role}: {turn.strip()}" for role, turn in zip(roles, turns)]
        return session.ask(render_prompt("debate_judge", question=task, transcript=_transcript_text(transcript),
                                         answer_format=session.answer_instruction))


def _transcript_text(turns: list[str]) -> str:
    return "\n\n".join(turns) if turns else render_prompt("debate_no_turns")


_VERDICT = re.compile(r"verdict\s*:\s*[*_`\"']*\s*(correct|incorrect)\b", re.IGNORECASE)


def critic_accepts(critique: str) -> bool:
    """Whether the critique's last "Verdict:" line says "correct"."""
    verdicts = _VERDICT.findall(critique)
    return bool(verdicts) and verdicts[-1].lower() == "correct"


class ReflexionAgent(SubAgent):
    """A first attempt, then up to ``reflexion_rounds`` critic + refine rounds; stops early when the
    critic's verdict is "correct"."""

    name = "ReflexionAgent"

    def solve(self, task: str, session: AgentSession) -> str:
        answer_format = session.answer_instruction
        attempt = session.ask(render_prompt("cot", question=task, answer_format=answer_format))
        for _ in range(self.settings.reflexion_rounds):
            critique = session.ask(render_prompt("reflexion_critic", question=task, attempt=attempt))
            if critic_accepts(critique):
                break
            attempt = session.ask(render_prompt("reflexion_refine", question=task, attempt=attempt,
                                                 critique=critique, answer_format=answer_format))
        return attempt


NO_RETRIEVER_NOTE = "no retriever: answered with one chain-of-thought call, without search"


class WebSearchAgent(SubAgent):
    """A query call, BM25 top-k over the context's retriever, then a summarize call. Without a
    retriever: one CoT call whose record carries :data:`NO_RETRIEVER_NOTE`."""

    name = "WebSearchAgent"

    def solve(self, task: str, session: AgentSession) -> str:
        answer_format = session.answer_instruction
        retriever = session.ctx.retriever
        if retriever is None:
            return session.ask(render_prompt("cot", question=task, answer_format=answer_format),
                               note=NO_RETRIEVER_NOTE)
        query = clean_query(session.ask(render_prompt("websearch_query", question=task))) or task
        hits = retriever.search(query, k=self.settings.search_k)
        note = f"query: {query!r}; retrieved: {', '.join(doc_id for doc_id, _, _ in hits) or 'nothing'}"
        passages = self._passages_text(hits)
        return session.ask(render_prompt("websearch_summarize", question=task, passages=passages,
                                         answer_format=answer_format), note=note)

    def _passages_text(self, hits: list[Hit]) -> str:
        if not hits:
            return render_prompt("websearch_no_passages")
        limit = self.settings.passage_chars
        return "\n\n".join(f"[{n}] ({doc_id}) {text[:limit]}" for n, (doc_id, text, _) in enumerate(hits, 1))


_QUERY_PREFIX = re.compile(r"^(?:search\s+)?query\s*:\s*", re.IGNORECASE)


def clean_query(text: str) -> str:
    """The first non-empty line, without a "Query:" prefix or surrounding quotes."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return _QUERY_PREFIX.sub("", line).strip().strip("\"'`*").strip()


# One class per agent name of the plan format (plans.KNOWN_AGENTS), in its order.
AGENTS: dict[str, type[SubAgent]] = {
    agent.name: agent for agent in (CoTAgent, SCAgent, DebateAgent, ReflexionAgent, WebSearchAgent)
}
if tuple(AGENTS) != KNOWN_AGENTS:
    raise ImportError(f"sub-agents {tuple(AGENTS)} do not match the plan format's agent names {KNOWN_AGENTS}")
