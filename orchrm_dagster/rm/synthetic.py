"""Synthetic win-lose pairs with a learnable rule, for benchmarks and smoke tests.

Rule: the chosen plan's first agent is a DebateAgent, the rejected plan's is not. Plans are the generator's
MAS-Orchestra-format plans; questions are GSM8K's. The first agent sits early in a plan, so the rule is visible within
a 256-token window for most pairs (not all: a long question and thinking block can push it out).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from orchrm_dagster.problems import load_shipped
from orchrm_dagster.rm.data import PairTexts
from orchrm_dagster.plans import AgentSpec, Plan, render_plan
from orchrm_dagster.synthetic import AGENT_KINDS, random_plan_text

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


# ---------------------------------------------------------------- plans whose quality is in their closing agents

_THINKING_WORDS = ("first", "the", "question", "asks", "for", "a", "number", "so", "we", "should", "check", "each",
                   "step", "carefully", "and", "then", "combine", "partial", "results", "before", "answering",
                   "quantities", "given", "unknown", "relation", "between", "them", "is", "linear", "maybe")


@dataclass(frozen=True)
class ThinkingFirstProblem:
    question: str
    plans: tuple[str, ...]
    correct: tuple[bool, ...]


def thinking_first_problems(n_problems: int, plans_per_problem: int = 8, seed: int = 0,
                            thinking_words: tuple[int, int] = (400, 600)) -> list[ThinkingFirstProblem]:
    """Problems with candidate plans that open with a long thinking block (400-600 words, as many MiniLM
    tokens) and whose correctness shows only at their end: a plan is correct iff its last agent, the one that
    answers, is a DebateAgent. The adversary of a reward model that reads a plan's beginning only."""
    rng = random.Random(seed)
    questions = [problem["question"] for problem in load_shipped("gsm8k_test")]
    problems = []
    for i in range(n_problems):
        correct = tuple(rng.random() < 0.5 for _ in range(plans_per_problem))
        plans = tuple(render_plan(_thinking_first_plan(rng, wins, thinking_words)) for wins in correct)
        problems.append(ThinkingFirstProblem(questions[(seed * 7919 + i) % len(questions)], plans, correct))
    return problems


def _thinking_first_plan(rng: random.Random, wins: bool, thinking_words: tuple[int, int]) -> Plan:
    thinking = " ".join(rng.choice(_THINKING_WORDS) for _ in range(rng.randint(*thinking_words)))
    n_agents = rng.randint(2, 3)
    others = [name for name in AGENT_KINDS if name != WINNING_AGENT]
    names = [rng.choice(AGENT_KINDS) for _ in range(n_agents - 1)]
    names.append(WINNING_AGENT if wins else rng.choice(others))
    agents = tuple(AgentSpec(str(k), name, f"step {k} of the solution", "" if k == 1 else f"use ${{{k - 1}}}",
                             ("Proposer", "Skeptic") if name == WINNING_AGENT else ())
                   for k, name in enumerate(names, 1))
    edges = tuple((str(k - 1), str(k)) for k in range(2, n_agents + 1))
    return Plan(thinking, agents, edges)


def thinking_first_pairs(problems: list[ThinkingFirstProblem], per_problem: int = 2) -> PairTexts:
    """Correct-over-incorrect pairs of each problem's plans (up to per_problem each)."""
    rows = []
    for i, problem in enumerate(problems):
        good = [p for p, ok in zip(problem.plans, problem.correct) if ok]
        bad = [p for p, ok in zip(problem.plans, problem.correct) if not ok]
        for k, (chosen, rejected) in enumerate(list(zip(good, bad))[:per_problem]):
            rows.append((f"thinking-first-{i}-{k}", problem.question, chosen, rejected))
    pair_ids, question, chosen_plan, rejected_plan = (list(column) for column in zip(*rows)) if rows else ([],) * 4
    return PairTexts(pair_id=pair_ids, question=question, chosen_plan=chosen_plan, rejected_plan=rejected_plan,
                     source=["correct_over_incorrect"] * len(pair_ids))


def best_of_n_accuracy(problems: list[ThinkingFirstProblem], scores: list[list[float]]) -> tuple[float, float]:
    """(accuracy of the top-scored plan, mean accuracy of one plan) over the problems; ties go to the first plan."""
    best = [problem.correct[max(range(len(row)), key=lambda k: (row[k], -k))] for problem, row in zip(problems, scores)]
    single = [sum(problem.correct) / len(problem.correct) for problem in problems]
    return sum(best) / len(best), sum(single) / len(single)
