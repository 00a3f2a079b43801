"""Synthetic win-lose pairs with a learnable rule, for benchmarks and smoke tests.

Rule: the chosen plan's first agent is a DebateAgent, the rejected plan's is not. Plans are the generator's
MAS-Orchestra-format plans; questions are GSM8K's. The first agent sits early in a plan, so the rule is visible within
a 256-token window for most pairs (not all: a long question and thinking block can push it out).
"""

from __future__ import annotations

import itertools
import random

from orchrm_dagster.problems import load_shipped
from orchrm_dagster.rm.data import PairTexts
from orchrm_dagster.synthetic import random_plan_text

WINNING_AGENT = "DebateAgent"
_FIRST_AGENT = "<agent_id>1</agent_id>\n<agent_name>"


def first_agent_wins(plan: str) -> bool:
    return (_FIRST_AGENT + WINNING_AGENT) in plan


def synthetic_pairs(n: int, seed: int = 0, min_agents: int = 2, max_agents: int = 4) -> PairTexts:
    """n pairs over varied GSM8K questions; pair i draws its plans from random_plan_text(random.Random(...), n_agents)."""
    questions = [problem["question"] for problem in load_shipped("gsm8k_test")]
    plan_seeds = itertools.count(seed * 1_000_003)
    rows = []
    for i in range(n):
        n_agents = random.Random(f"{seed}-{i}").randint(min_agents, max_agents)
        chosen = _next_plan(plan_seeds, n_agents, wins=True)
        rejected = _next_plan(plan_seeds, n_agents, wins=False)
        rows.append((f"synthetic-{seed}-{i:06d}", questions[(seed * 7919 + i) % len(questions)], chosen, rejected))
    pair_ids, question, chosen_plan, rejected_plan = (list(column) for column in zip(*rows))
    return PairTexts(pair_id=pair_ids, question=question, chosen_plan=chosen_plan, rejected_plan=rejected_plan,
                     source=["specialized_over_base" if i % 4 else "correct_over_incorrect" for i in range(n)])


def _next_plan(plan_seeds, n_agents: int, wins: bool) -> str:
    for plan_seed in plan_seeds:
        plan = random_plan_text(random.Random(plan_seed), n_agents)
        if first_agent_wins(plan) == wins:
            return plan
    raise AssertionError("unreachable")
