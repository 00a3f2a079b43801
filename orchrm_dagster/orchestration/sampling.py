"""Sample N orchestration plans per problem from a policy, recording each plan's mean token log-probability."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchrm_dagster.contract import RunErrorKind
from orchrm_dagster.llm import ChatRequest, LLMBackend, SamplingSettings
from orchrm_dagster.mas import question_text, render_prompt
from orchrm_dagster.orchestration.policy import PolicySpec, run_id_for, sample_seed
from orchrm_dagster.plans import PlanError, TextBounds, parse_plan, plan_grammar_ebnf


@dataclass(frozen=True)
class Problem:
    problem_id: str
    benchmark: str
    question: str
    answer: str | None
    answer_type: str  # a registered labeler's (orchrm_dagster.labels)
    choices: tuple[str, ...] | None = None  # a multiple-choice problem's options (A = the first)


@dataclass(frozen=True)
class PlanSample:
    run_id: str
    problem_id: str
    benchmark: str
    question: str
    reference_answer: str | None
    answer_type: str
    policy_name: str
    policy_kind: str
    policy_step: int | None
    orchestrator_model: str
    sample_index: int
    seed: int
    plan: str
    plan_logprob: float | None
    plan_parses: bool
    plan_error: str | None  # the parse error, or the generation error
    plan_error_code: str | None  # PlanError.code when the plan does not parse
    plan_error_kind: str | None  # RunErrorKind when the plan cannot be executed
    grammar: bool
    orchestrator_prompt_tokens: int
    orchestrator_completion_tokens: int
    choices: tuple[str, ...] | None = None  # the problem's, for multiple choice

    def __post_init__(self) -> None:
        if self.choices is not None and not isinstance(self.choices, tuple):  # a list read back from Parquet
            object.__setattr__(self, "choices", tuple(self.choices) or None)


def orchestrator_request(policy: PolicySpec, question: str, seed: int,
                         choices: Sequence[str] | None = None) -> ChatRequest:
    prompt = render_prompt(policy.prompt, question=question_text(question, choices), max_agents=policy.max_agents)
    sampling = SamplingSettings(temperature=policy.temperature, top_p=policy.top_p,
                                max_new_tokens=policy.max_new_tokens, seed=seed)
    grammar = plan_grammar_ebnf(max_agents=policy.max_agents,
                                bounds=TextBounds.fit(policy.max_new_tokens, policy.max_agents)) if policy.grammar else None
    return ChatRequest(({"role": "user", "content": prompt},), sampling, want_logprobs=True, grammar=grammar)


def sample_plans(policy: PolicySpec, backend: LLMBackend, problems: list[Problem], n: int, seed: int,
                 skip_run_ids: frozenset[str] = frozenset(), run_tag: str = "") -> list[PlanSample]:
    """N plans per problem, in one batched generate call; samples whose run_id is in `skip_run_ids` are not redrawn.
    `run_tag` goes into the run ids (`run_id_for`), never into what is sampled."""
    wanted = [(problem, i) for problem in problems for i in range(n)
              if run_id_for(policy, problem.problem_id, seed, i, run_tag) not in skip_run_ids]
    requests = [orchestrator_request(policy, p.question, sample_seed(seed, p.problem_id, i), p.choices)
                for p, i in wanted]
    completions = backend.generate(requests) if requests else []
    return [_sample(policy, backend, problem, i, seed, completion, run_tag)
            for (problem, i), completion in zip(wanted, completions)]


def _sample(policy, backend, problem: Problem, index: int, seed: int, completion, run_tag: str = "") -> PlanSample:
    parsed = parse_plan(completion.text) if completion.error is None else None
    plan_error = plan_error_code = plan_error_kind = None
    if completion.error is not None:
        plan_error, plan_error_kind = f"generation failed: {completion.error}", RunErrorKind.GENERATION_FAILED.value
    elif isinstance(parsed, PlanError):
        plan_error, plan_error_code, plan_error_kind = str(parsed), parsed.code, RunErrorKind.PLAN_UNPARSEABLE.value
    return PlanSample(
        run_id=run_id_for(policy, problem.problem_id, seed, index, run_tag), problem_id=problem.problem_id,
        benchmark=problem.benchmark, question=problem.question, reference_answer=problem.answer,
        answer_type=problem.answer_type, policy_name=policy.name, policy_kind=policy.kind, policy_step=policy.step,
        orchestrator_model=backend.model_id, sample_index=index, seed=sample_seed(seed, problem.problem_id, index),
        plan=completion.text, plan_logprob=completion.mean_logprob, plan_parses=plan_error is None,
        plan_error=plan_error, plan_error_code=plan_error_code, plan_error_kind=plan_error_kind, grammar=policy.grammar,
        orchestrator_prompt_tokens=completion.prompt_tokens,
        orchestrator_completion_tokens=completion.completion_tokens, choices=problem.choices,
    )
