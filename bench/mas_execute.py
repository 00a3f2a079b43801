"""Plans executed per minute, and tokens per plan, by sub-agent type, with the embedded model.

    .venv/bin/python bench/mas_execute.py [--questions 4] [--max-new-tokens 128] [--device auto]

For each agent type, a single-delegation plan runs on the first N GSM8K test questions (one plan at a
time, as execute_plan runs them). WebSearchAgent searches a BM25 corpus made of the worked solutions
of the other GSM8K test questions (a stand-in corpus: this measures cost, not retrieval quality).
The model is loaded before timing starts.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import orjson

from orchrm_dagster.llm.base import ChatRequest, SamplingSettings
from orchrm_dagster.mas import AGENTS, AgentContext, AgentSettings, BM25Retriever, execute_plan, extract_answer
from orchrm_dagster.mas.answers import normalize_answer
from orchrm_dagster.plans import AgentSpec, Plan, render_plan

HEADER = f"{'agent':<16}{'plans/min':>10}{'s/plan':>9}{'calls/plan':>11}{'tokens/plan':>12}{'errors':>7}{'correct':>8}{'load':>6}"
GSM8K = Path(__file__).parents[1] / "orchrm_dagster" / "data" / "benchmarks" / "gsm8k_test.jsonl"


def load_gsm8k() -> list[dict]:
    return [orjson.loads(line) for line in GSM8K.read_bytes().splitlines() if line.strip()]


def single_delegation(agent_name: str) -> str:
    agent = AgentSpec(agent_id="1", agent_name=agent_name, description="Solve the problem.", agent_input="")
    return render_plan(Plan(thinking=f"Delegate to one {agent_name}.", agents=(agent,)))


def make_backend(args: argparse.Namespace):
    from orchrm_dagster.llm.transformers_backend import TransformersBackend

    backend = TransformersBackend(device=args.device, max_batch_size=args.max_batch_size)
    backend.generate([ChatRequest(messages=({"role": "user", "content": "Hi"},),
                                  sampling=SamplingSettings(max_new_tokens=2))])  # load the model now
    return backend


def bench_agent(agent_name: str, problems: list[dict], ctx: AgentContext, settings: AgentSettings) -> dict:
    plan = single_delegation(agent_name)
    calls = tokens = errors = correct = 0
    started = time.perf_counter()
    for problem in problems:
        result = execute_plan(problem["question"], plan, ctx, settings)
        calls += len(result.calls)
        tokens += result.prompt_tokens + result.completion_tokens
        errors += result.error is not None
        answer = extract_answer(result.final_answer or "")
        correct += normalize_answer(answer) == normalize_answer(problem["answer"])
    seconds = time.perf_counter() - started
    n = len(problems)
    return {"agent": agent_name, "plans_per_min": 60 * n / seconds, "s_per_plan": seconds / n,
            "calls_per_plan": calls / n, "tokens_per_plan": tokens / n, "errors": errors, "correct": correct}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--agents", nargs="*", default=list(AGENTS), choices=list(AGENTS))
    args = parser.parse_args()

    rows = load_gsm8k()
    problems = rows[:args.questions]
    corpus = rows[args.questions:]
    retriever = BM25Retriever([r["meta"]["solution"] for r in corpus], [r["problem_id"] for r in corpus])
    load_started = time.perf_counter()
    backend = make_backend(args)
    print(f"model {backend.model_id} loaded in {time.perf_counter() - load_started:.1f} s; "
          f"{len(problems)} questions, max_new_tokens={args.max_new_tokens}, temperature={args.temperature}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    ctx = AgentContext(backend=backend, answer_format="math", retriever=retriever,
                       sampling=SamplingSettings(temperature=args.temperature, max_new_tokens=args.max_new_tokens))
    settings = AgentSettings()
    print(HEADER, flush=True)
    for agent_name in args.agents:
        row = bench_agent(agent_name, problems, ctx, settings)
        print(f"{row['agent']:<16}{row['plans_per_min']:>10.2f}{row['s_per_plan']:>9.1f}{row['calls_per_plan']:>11.1f}"
              f"{row['tokens_per_plan']:>12.0f}{row['errors']:>7}{row['correct']:>8}"
              f"{os.getloadavg()[0]:>6.1f}", flush=True)


if __name__ == "__main__":
    main()
