"""A round's problems: the slice it trains on (moving on round after round), the ones it holds out, and the prompt
each is shown, as GRPO's dataset and as the supervised methods' prompts. Below the round and its training methods:
`settings` is the round's `GRPOSettings`, read by its fields (the settings stand above the methods, see
`grpo.methods.base`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from orchrm_dagster.mas import question_text, render_prompt
from orchrm_dagster.orchestration import PolicySpec, Problem, select_problems
from orchrm_dagster.storage import StorageRoot

Item = TypeVar("Item")


def round_slice(items: Sequence[Item], round_number: int, per_round: int) -> list[Item]:
    """Round `round_number`'s `per_round` items (all of them when there are fewer): each round takes the next ones,
    wrapping around."""
    start = (round_number - 1) * per_round % len(items)
    return [items[(start + i) % len(items)] for i in range(min(per_round, len(items)))]


def round_problems(root: StorageRoot, settings, round_number: int) -> tuple[list[Problem], list[Problem]]:
    """(training problems of this round, held-out problems): the benchmark's last `heldout_problems` are never
    trained on; the rest are taken `problems_per_round` at a time, round after round, wrapping around."""
    problems = select_problems(root, settings.benchmark, 10**9)
    held_out, pool = problems[-settings.heldout_problems:], problems[:-settings.heldout_problems]
    return round_slice(pool, round_number, settings.problems_per_round), held_out


def plan_dataset(policy: PolicySpec, problems: list[Problem], settings):
    """GRPO's prompt dataset: `settings.steps` rows, one problem's group per step, the problems in turn."""
    from datasets import Dataset

    rows = _prompt_rows(policy, problems, settings.max_agents)
    return Dataset.from_list((rows * (settings.steps // len(rows) + 1))[: settings.steps])


def plan_prompts(policy: PolicySpec, problems: list[Problem], settings) -> dict[str, list[dict]]:
    """Each problem's prompt messages exactly as GRPO's dataset renders them, by problem_id (what the supervised
    methods train on)."""
    return {row["problem_id"]: row["prompt"] for row in _prompt_rows(policy, problems, settings.max_agents)}


def _prompt_rows(policy: PolicySpec, problems: list[Problem], max_agents: int) -> list[dict]:
    """Each problem once: its orchestrator prompt (a chat) and the columns its rewards read."""
    return [{"prompt": [{"role": "user", "content": render_prompt(
                 policy.prompt, question=question_text(p.question, p.choices), max_agents=max_agents)}],
             "question": p.question, "answer": p.answer, "answer_type": p.answer_type, "problem_id": p.problem_id,
             "choices": list(p.choices) if p.choices else None}
            for p in problems]
