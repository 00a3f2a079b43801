"""What every GRPO reward shares: its registry entry, what it is built from, the TRL calling convention, the
unparseable-plan rule and the token bookkeeping, and the rollouts: a round's one path from a plan to its verdict."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchrm_dagster.grpo.profile import phase
from orchrm_dagster.grpo.rewards.rule import group_rewards, held_out_rewards
from orchrm_dagster.environments import Executor, Labeled, PlanJob, execute_and_label
from orchrm_dagster.orchestration import PlanSample, plan_job
from orchrm_dagster.rm import plan_parses
from orchrm_dagster.spending import spend


@dataclass(frozen=True)
class RewardContext:
    """What a round hands every reward it builds."""

    scorer: object  # the champion reward model's scorer (score_with_lengths)
    rollouts: Rollouts  # plan executions shared by every reward of the round
    device: str  # the round's torch device setting
    margin: float  # the unparseable-plan margin of the rule, in standard deviations


@dataclass(frozen=True)
class RewardKind:
    """A registry entry: one module of `orchrm_dagster.grpo.rewards` registers one (`register_reward`)."""

    name: str  # what `GRPOSettings.rewards` and `orchrm loop --rewards` call it; also TRL's log name
    description: str  # one line: the CLI's help and the config section's description
    config: type  # an @engine_config class (possibly without fields): the reward's own settings section
    build: Callable[[object, RewardContext], PlanReward]  # (its config, the round's context) -> the TRL callable


def completion_text(completion) -> str:
    """A conversational completion is a list of messages; a plain one is text."""
    if isinstance(completion, list):
        return "".join(message.get("content", "") for message in completion)
    return str(completion)


class PlanReward:
    """A TRL reward function: reward(prompts, completions, **dataset columns) -> one float per plan.

    A subclass implements `raw_rewards` over the plans that parse (with the dataset columns of those plans only);
    this class applies the rule (`group_rewards`) with each plan's `problem_id` as its group, and keeps the token
    counts a round reports. The rewards TRL logs are normalized (mean 0 per group), so each call also logs
    `raw/<name>`: the mean on the reward's own scale, unparseable plans placed as the held-out reward places them."""

    def __init__(self, name: str, margin: float):
        self.__name__ = name  # TRL names a reward function's logs by its __name__
        self.margin = margin
        self.reward_tokens = 0
        self.rollout_tokens = 0
        self.calls = 0

    def raw_rewards(self, plans: list[str], **columns) -> list[float]:
        raise NotImplementedError

    def spent(self, reward: int = 0, rollout: int = 0) -> None:
        """Tokens this reward read (`reward`) and executed (`rollout`), counted in the round and, as they are spent,
        in its attempt's journal (`orchrm_dagster.spending`)."""
        self.reward_tokens += reward
        self.rollout_tokens += rollout
        spend("reward", reward)
        spend("rollout", rollout)

    def __call__(self, prompts, completions, problem_id: Sequence[str], log_metric=None, **columns) -> list[float]:
        with phase(f"reward: {self.__name__}"):
            return self._rewards(completions, problem_id, log_metric, **columns)

    def _rewards(self, completions, problem_id: Sequence[str], log_metric=None, **columns) -> list[float]:
        plans = [completion_text(c) for c in completions]
        parsed = [i for i, plan in enumerate(plans) if plan_parses(plan)]
        raw: list[float | None] = [None] * len(plans)
        if parsed:
            per_plan = {name: [values[i] for i in parsed] for name, values in
                        {**columns, "problem_id": problem_id}.items() if _one_per_plan(values, len(plans))}
            for i, value in zip(parsed, self.raw_rewards([plans[i] for i in parsed], **per_plan)):
                raw[i] = float(value)
        self.calls += 1
        placed = [v for v in held_out_rewards(raw, problem_id, self.margin) if v is not None]
        if log_metric is not None and placed:
            log_metric(raw_metric(self.__name__), sum(placed) / len(placed))
        return group_rewards(raw, problem_id, self.margin)


def raw_metric(name: str) -> str:
    """The log key of a reward's mean on its own scale."""
    return f"raw/{name}"


def _one_per_plan(values, plans: int) -> bool:
    return isinstance(values, (list, tuple)) and len(values) == plans


def choices_of(choices: Sequence | None, plans: int) -> list[tuple[str, ...] | None]:
    """The dataset's `choices` column as one tuple (or None) per plan; None for a dataset without the column."""
    if choices is None:
        return [None] * plans
    return [tuple(c) if c else None for c in choices]


class Rollouts:
    """Executes plans in the round's environment (its executor: real sub-agents with the execution's corpus, or a
    simulated truth) and labels each against its reference answer, each job once (a cache keyed by the job: question,
    choices, plan, reference answer and seed), counting the sub-agent tokens spent: the round's one path from a plan to
    its verdict, for the rewards that need the trajectory, the held-out accuracy and RFT."""

    def __init__(self, executor: Executor):
        self.executor = executor
        self.results: dict[PlanJob, Labeled] = {}
        self.tokens = 0
        self._lock = threading.Lock()

    def label(self, jobs: Sequence[PlanJob]) -> list[Labeled]:
        """Each job executed (once) and labeled against its reference (None: nothing to label against, the verdict
        is incorrect), in the order given."""
        todo = [job for job in dict.fromkeys(jobs) if job not in self.results]
        if todo:
            labeled = execute_and_label(todo, self.executor)
            with self._lock:
                for job, item in zip(todo, labeled):
                    self.results[job] = item
                    self.tokens += item.result.prompt_tokens + item.result.completion_tokens
        return [self.results[job] for job in jobs]

    def run(self, questions: Sequence[str], plans: Sequence[str], answer_types: Sequence[str],
            answers: Sequence[str | None] | None = None, choices: Sequence | None = None) -> list[Labeled]:
        """The plans of a reward's dataset columns, each labeled against its answer."""
        answers = answers if answers is not None else [None] * len(plans)
        return self.label([PlanJob(q, p, t, choices=c, reference=a) for q, p, t, a, c in
                           zip(questions, plans, answer_types, answers, choices_of(choices, len(plans)))])

    def run_samples(self, samples: Sequence[PlanSample]) -> list[Labeled]:
        """Sampled plans, each executed with its own seed and labeled against its problem's reference answer."""
        return self.label([plan_job(s) for s in samples])

    def run_counted(self, reward: PlanReward, questions, plans, answer_types, answers=None,
                    choices=None) -> list[Labeled]:
        """`run`, adding the sub-agent tokens it spent to `reward.rollout_tokens`."""
        before = self.tokens
        labeled = self.run(questions, plans, answer_types, answers, choices)
        reward.spent(rollout=self.tokens - before)
        return labeled
