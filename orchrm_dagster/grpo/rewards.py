"""Reward callables for TRL's GRPOTrainer: reward(prompts, completions, **dataset columns) -> one float per plan.

`OrchRMReward` scores each plan with the champion reward model (it tokenizes for the reward model itself: no
sub-agent runs); `TrajectoryReward` executes each plan and rewards a correct final answer (the expensive baseline);
`CollaborativeReward` executes it and scores the trajectory with the verifier panel, agreement taken within the
plan's group. A plan that does not parse gets the format penalty from all of them. Each counts the tokens it spent.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from orchrm_dagster.evaluation import VerifierSettings, agreement_score, static_scores, vote_key_of
from orchrm_dagster.labels import label_answer
from orchrm_dagster.llm import LLMBackend
from orchrm_dagster.orchestration import ExecutionSettings, PlanJob, execute_plans
from orchrm_dagster.plans import PlanError, parse_plan


def completion_text(completion) -> str:
    """A conversational completion is a list of messages; a plain one is text."""
    if isinstance(completion, list):
        return "".join(message.get("content", "") for message in completion)
    return str(completion)


class PlanReward:
    """Common bookkeeping: the reward's name (TRL logs rewards by __name__), token counts and the format rule."""

    __name__ = "plan_reward"

    def __init__(self, format_penalty: float):
        self.format_penalty = format_penalty
        self.reward_tokens = 0
        self.rollout_tokens = 0
        self.calls = 0

    @staticmethod
    def parses(plan: str) -> bool:
        return not isinstance(parse_plan(plan), PlanError)


class OrchRMReward(PlanReward):
    __name__ = "orchrm"

    def __init__(self, scorer, format_penalty: float):
        super().__init__(format_penalty)
        self.scorer = scorer

    def __call__(self, prompts, completions, question: Sequence[str], **_) -> list[float]:
        plans = [completion_text(c) for c in completions]
        valid = [i for i, plan in enumerate(plans) if self.parses(plan)]
        rewards = [self.format_penalty] * len(plans)
        if valid:
            scores, lengths = self.scorer.score_with_lengths([question[i] for i in valid], [plans[i] for i in valid])
            for i, score in zip(valid, scores):
                rewards[i] = float(score)
            self.reward_tokens += sum(lengths)
        self.calls += 1
        return rewards


class Rollouts:
    """Executes plans once for every reward that needs the trajectory (a cache keyed by question and plan)."""

    def __init__(self, backend: LLMBackend, settings: ExecutionSettings):
        self.backend = backend
        self.settings = settings
        self.results: dict[tuple[str, str], object] = {}
        self.tokens = 0
        self._lock = threading.Lock()

    def run(self, questions: Sequence[str], plans: Sequence[str], answer_types: Sequence[str]) -> list:
        todo = list(dict.fromkeys((q, p, t) for q, p, t in zip(questions, plans, answer_types)
                                  if (q, p) not in self.results))
        if todo:
            results = execute_plans([PlanJob(q, p, t) for q, p, t in todo], self.backend, self.settings)
            with self._lock:
                for (q, p, _), result in zip(todo, results):
                    self.results[(q, p)] = result
                    self.tokens += result.prompt_tokens + result.completion_tokens
        return [self.results[(q, p)] for q, p in zip(questions, plans)]


class TrajectoryReward(PlanReward):
    __name__ = "trajectory"

    def __init__(self, rollouts: Rollouts, format_penalty: float):
        super().__init__(format_penalty)
        self.rollouts = rollouts

    def __call__(self, prompts, completions, question, answer, answer_type, **_) -> list[float]:
        plans = [completion_text(c) for c in completions]
        before = self.rollouts.tokens
        results = self.rollouts.run(question, plans, answer_type)
        self.rollout_tokens += self.rollouts.tokens - before
        self.calls += 1
        return [self.format_penalty if not self.parses(plan) else
                float(result.error is None and label_answer(kind, reference, result.final_answer).is_correct)
                for plan, result, reference, kind in zip(plans, results, answer, answer_type)]


class CollaborativeReward(PlanReward):
    __name__ = "collaborative"

    def __init__(self, rollouts: Rollouts, settings: VerifierSettings, format_penalty: float, embedder=None):
        super().__init__(format_penalty)
        self.rollouts = rollouts
        self.settings = settings
        self.embedder = embedder

    def __call__(self, prompts, completions, question, answer_type, **_) -> list[float]:
        plans = [completion_text(c) for c in completions]
        before = self.rollouts.tokens
        results = self.rollouts.run(question, plans, answer_type)
        self.rollout_tokens += self.rollouts.tokens - before
        finals = [r.final_answer for r in results]
        texts = [f"Final answer: {r.final_answer or '(none)'}\n\n" + "\n\n".join(c.output for c in r.calls)
                 for r in results]
        static = static_scores(list(question), finals, texts, self.settings, self.embedder)
        self.reward_tokens += sum(static.tokens)
        fused = static.fused(self.settings.weights)
        keys = [vote_key_of(f) for f in finals]
        rewards = []
        for i, plan in enumerate(plans):
            group = [keys[j] for j in range(len(plans)) if j != i and question[j] == question[i]]
            agreement = agreement_score(keys[i], group)
            rewards.append(self.format_penalty if not self.parses(plan)
                           else fused[i] + self.settings.weights.agreement * agreement)
        self.calls += 1
        return rewards
