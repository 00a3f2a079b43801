"""Realistic generated run batches (contract v1) for examples, tests and benchmarks.

Questions and reference answers are the shipped benchmarks'; plans follow the MAS-Orchestra tag format
with 1-3 KB of text; final answers are right or wrong at a set rate, so labels and pairs are meaningful.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone
from importlib.resources import files
from pathlib import Path

import orjson

from orchrm_dagster.plans import KNOWN_AGENTS, AgentSpec, Plan, render_plan

# The shipped example batch (`example_batch()` wrote it): 48 good runs and 6 lines a producer could get wrong.
EXAMPLE_BATCH = Path(str(files("orchrm_dagster") / "data" / "examples" / "example_runs.jsonl"))

# The sub-agents generated plans use: every agent of the plan format but web search (no corpus is shipped).
AGENT_KINDS = tuple(name for name in KNOWN_AGENTS if name != "WebSearchAgent")
_STEPS = (
    "Restate the quantities given in the question and the unknown asked for.",
    "Set up the relations between the quantities as equations before solving anything.",
    "Check each intermediate result against the constraints of the problem.",
    "Try small cases first, look for a pattern, then prove that the pattern holds in general.",
    "Compare two independent methods and keep the answer on which they agree.",
    "Identify the entity the question asks about, then find the fact that links both documents.",
    "List the candidate answers, argue for and against each, and decide with a short justification.",
)
_POLICIES = (("base-orchestrator", "base", None), ("specialized-orchestrator", "specialized", None),
             ("grpo-orchestrator", "checkpoint", 200))


# Trained orchestrators learn to verify: their plans lean on voting, debate and reflection. The generated
# specialized plans do the same, so a reward model has something real to learn from the pairs.
BASE_AGENT_WEIGHTS = (6, 1, 1, 1)
SPECIALIZED_AGENT_WEIGHTS = (1, 3, 3, 3)


def random_plan(rng: random.Random, n_agents: int, agent_weights: tuple[int, ...] = (1, 1, 1, 1)) -> Plan:
    """A valid plan of `n_agents` agents in a chain where each agent reads the one or two before it."""
    thinking = " ".join(rng.choice(_STEPS) for _ in range(rng.randint(2, 5)))
    agents = []
    for i in range(1, n_agents + 1):
        kind = rng.choices(AGENT_KINDS, weights=agent_weights)[0]
        agent_input = "" if i == 1 else " ".join(f"${{{j}}}" for j in range(max(1, i - 2), i))
        description = " ".join(rng.choice(_STEPS) for _ in range(rng.randint(2, 4)))
        roles = ("Proposer", "Skeptic") if kind == "DebateAgent" else ()
        agents.append(AgentSpec(str(i), kind, description, agent_input, roles))
    edges = tuple((str(j), str(i)) for i in range(2, n_agents + 1) for j in range(max(1, i - 2), i))
    return Plan(thinking, tuple(agents), edges)


def random_plan_text(rng: random.Random, n_agents: int, agent_weights: tuple[int, ...] = (1, 1, 1, 1)) -> str:
    return render_plan(random_plan(rng, n_agents, agent_weights))


def generate_runs(n: int, seed: int = 0, benchmarks: tuple[str, ...] = ("gsm8k_test", "math500", "hotpotqa_dev"),
                  samples_per_problem: int = 8, correct_rate: float = 0.55, *, plans_decide: bool = False,
                  policies: tuple[tuple[str, str, int | None], ...] = _POLICIES,
                  first_problem: int = 0, environment: str | None = None,
                  rates: Mapping[str, float] | None = None) -> Iterator[dict]:
    """`n` runs, `samples_per_problem` per problem, problems taken round-robin over `benchmarks` from the
    `first_problem`-th on, each run's policy drawn from `policies`. Correctness is drawn at `correct_rate` (+0.15
    for trained policies), or, with `plans_decide`, at the chance the `plan_success_rate` truth function (its default
    parameters: 0.15 + 0.7 x the share of agents that check their work, the rule the simulated environment executes
    plans with) gives the run's plan, or, with `rates`, at
    the rate of the run's policy name whatever its plan (one rate for every policy: correctness is noise).
    `environment` names where the records say they were executed ("simulated": their correctness is drawn, as it is
    here)."""
    # imported here: the plan generator alone (bench/gpu_check.py's) needs no benchmarks, labels or storage
    from orchrm_dagster.labels import wrong_answer
    from orchrm_dagster.problems import load_shipped
    from orchrm_dagster.truths import truth_named

    rng = random.Random(seed)
    truth = truth_named("plan_success_rate")
    truth_settings = truth.config()
    per_benchmark = [load_shipped(name) for name in benchmarks]
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    for index in range(n):
        question_index = first_problem + index // samples_per_problem  # round-robin over benchmarks, then problems
        problems = per_benchmark[question_index % len(per_benchmark)]
        problem = problems[(question_index // len(per_benchmark)) % len(problems)]
        name, kind, step = policies[rng.randrange(len(policies))]
        specialized = kind != "base"
        n_agents = rng.randint(2, 6) if specialized else rng.randint(1, 3)
        weights = SPECIALIZED_AGENT_WEIGHTS if specialized else BASE_AGENT_WEIGHTS
        plan = random_plan(rng, n_agents, weights) if plans_decide else None
        success = (rates[name] if rates is not None else
                   truth.chance(truth_settings, plan) if plan else correct_rate + (0.15 if specialized else 0.0))
        correct = rng.random() < success
        is_math = problem["benchmark"] != "hotpotqa"
        answer = problem["answer"] if correct else wrong_answer(rng, problem["answer"], "math" if is_math else "qa")
        final = f"So the final answer is $\\boxed{{{answer}}}$." if is_math else f"<answer>{answer}</answer>"
        subagents = [
            {"agent_id": str(i), "agent_name": rng.choice(AGENT_KINDS), "input": problem["question"][:200],
             "output": f"Step {i}: {rng.choice(_STEPS)} Result: {answer}", "prompt_tokens": rng.randint(200, 900),
             "completion_tokens": rng.randint(50, 400), "model": "sub-agent-model"}
            for i in range(1, n_agents + 1)
        ]
        yield {
            "run_id": f"run-{seed}-{first_problem}-{index:09d}" if first_problem else f"run-{seed}-{index:09d}",
            "problem_id": problem["problem_id"],
            "benchmark": problem["benchmark"],
            "question": problem["question"],
            "policy": {"name": name, "kind": kind, "step": step},
            "plan": render_plan(plan) if plan else random_plan_text(rng, n_agents, weights),
            "reference_answer": problem["answer"],
            "sample_index": index % samples_per_problem,
            "final_answer": final,
            "subagents": subagents,
            "tokens": {"orchestrator": rng.randint(300, 1200),
                       "subagents": sum(s["prompt_tokens"] + s["completion_tokens"] for s in subagents)},
            "plan_logprob": -rng.uniform(0.05, 1.5),
            "is_correct": correct,
            "created_at": (start + timedelta(seconds=index)).isoformat(),
            **({"environment": environment} if environment else {}),
        }


def write_jsonl(records, path) -> int:
    count = 0
    with open(path, "wb") as out:
        for record in records:
            out.write(orjson.dumps(record) + b"\n")
            count += 1
    return count


def example_batch() -> list[bytes]:
    """The shipped example batch: 48 good runs and 6 lines a producer could plausibly get wrong."""
    records = list(generate_runs(48, seed=7, benchmarks=("gsm8k_test", "math500", "hotpotqa_dev", "aime24"),
                                 samples_per_problem=4))
    lines = [orjson.dumps(r) for r in records]
    missing_plan = {k: v for k, v in records[1].items() if k != "plan"} | {"run_id": "example-missing-plan"}
    bad_kind = records[2] | {"run_id": "example-bad-kind", "policy": {"name": "orch-v2", "kind": "finetuned"}}
    step_as_text = records[3] | {"run_id": "example-step-text", "policy": {"name": "orch-v2", "kind": "checkpoint",
                                                                           "step": "300"}}
    lines[10:10] = [b'{"run_id": "example-truncated", "problem_id": "gsm8k-test-0001", "plan": "<agent>']
    lines[20:20] = [orjson.dumps(missing_plan), orjson.dumps(bad_kind)]
    lines[30:30] = [orjson.dumps(step_as_text), lines[5], b'"just a string"']
    return lines
