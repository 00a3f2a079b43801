"""What every GRPO reward shares: its registry entry, what it is built from, the TRL calling convention, the
unparseable-plan rule and the token bookkeeping, and the rollouts that trajectory-based rewards execute once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchrm_dagster.grpo.rewards.rule import group_rewards, held_out_rewards
from orchrm_dagster.environments import Executor, Labeled, PlanJob, execute_and_label
from orchrm_dagster.rm import plan_parses


@dataclass(frozen=True)
class RewardContext:
    """What a round hands every reward it builds."""

    scorer: object  # the champion reward model's scorer (score_with_lengths)
    rollouts: Rollouts  # plan executions shared by every reward of the round
    device: str  # the round's torch device setting
    margin: float  # the unparseable-plan margin of the rule, in standard deviations


@dataclass(frozen=True)
class RewardKind:
    """A registry entry: one module of `orchrm_dagster.grpo.rewards` defines one, as `REWARD`."""

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

    def __call__(self, prompts, completions, problem_id: Sequence[str], log_metric=None, **columns) -> list[float]:
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
    """Executes and labels plans once for every reward that needs the trajectory (a cache keyed by question, choices,
    plan and reference answer), in the round's environment (its executor: real sub-agents with the execution's corpus, or a simulated
    truth)."""

    def __init__(self, executor: Executor):
        self.executor = executor
        self.results: dict[tuple, Labeled] = {}
        self.tokens = 0
        self._lock = threading.Lock()

    def run(self, questions: Sequence[str], plans: Sequence[str], answer_types: Sequence[str],
            answers: Sequence[str | None] | None = None, choices: Sequence | None = None) -> list[Labeled]:
        """Each plan executed (once per question, choices, plan and reference answer) and labeled against its answer
        (None: nothing to label against, the verdict is incorrect)."""
        answers = answers if answers is not None else [None] * len(plans)
        keys = [(q, c, p, a) for q, c, p, a in zip(questions, choices_of(choices, len(plans)), plans, answers)]
        todo = list(dict.fromkeys((key, t) for key, t in zip(keys, answer_types) if key not in self.results))
        if todo:
            jobs = [PlanJob(q, p, t, choices=c, reference=a) for (q, c, p, a), t in todo]
            labeled = execute_and_label(jobs, self.executor)
            with self._lock:
                for (key, _), item in zip(todo, labeled):
                    self.results[key] = item
                    self.tokens += item.result.prompt_tokens + item.result.completion_tokens
        return [self.results[key] for key in keys]

    def run_counted(self, reward: PlanReward, questions, plans, answer_types, answers=None,
                    choices=None) -> list[Labeled]:
        """`run`, adding the sub-agent tokens it spent to `reward.rollout_tokens`."""
        before = self.tokens
        labeled = self.run(questions, plans, answer_types, answers, choices)
        reward.rollout_tokens += self.tokens - before
        return labeled
