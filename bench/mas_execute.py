"""Plans executed per minute, and tokens per plan, by sub-agent type, with the embedded model.

    .venv/bin/python bench/mas_execute.py [--questions 4] [--max-new-tokens 128] [--device auto]
    .venv/bin/python bench/mas_execute.py --questions 2 --max-new-tokens 192 --sc-samples 3 --debate-rounds 1 \
        --costs-out orchrm_dagster/data/environments/subagent_costs.json

With `--costs-out`, the mean prompt and completion tokens of one call of each agent type are written as the costs
the simulated environment charges (orchrm_dagster/environments/costs.py), with where they come from.

For each agent type, a single-delegation plan runs on the first N GSM8K test questions (one plan at a
time, as execute_plan runs them). WebSearchAgent searches a BM25 corpus made of the worked solutions
of the other GSM8K test questions (a stand-in corpus: this measures cost, not retrieval quality).
The model is loaded before timing starts.
"""

from __future__ import annotations

import argparse
import os
import sys
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
    from orchrm_dagster.llm.transformers_decoding import TransformersBackend

    backend = TransformersBackend(device=args.device, max_batch_size=args.max_batch_size)
    backend.generate([ChatRequest(messages=({"role": "user", "content": "Hi"},),
                                  sampling=SamplingSettings(max_new_tokens=2))])  # load the model now
    return backend


def bench_agent(agent_name: str, problems: list[dict], ctx: AgentContext, settings: AgentSettings) -> dict:
    plan = single_delegation(agent_name)
    calls = tokens = errors = correct = prompt = completion = 0
    started = time.perf_counter()
    for problem in problems:
        result = execute_plan(problem["question"], plan, ctx, settings)
        calls += len(result.calls)
        prompt += result.prompt_tokens
        completion += result.completion_tokens
        tokens += result.prompt_tokens + result.completion_tokens
        errors += result.error is not None
        answer = extract_answer(result.final_answer or "")
        correct += normalize_answer(answer) == normalize_answer(problem["answer"])
    seconds = time.perf_counter() - started
    n = len(problems)
    return {"agent": agent_name, "plans_per_min": 60 * n / seconds, "s_per_plan": seconds / n,
            "calls_per_plan": calls / n, "tokens_per_plan": tokens / n, "errors": errors, "correct": correct,
            "calls": calls, "prompt_tokens_per_call": prompt / max(1, calls),
            "completion_tokens_per_call": completion / max(1, calls)}


def write_costs(path: str, rows: list[dict], args: argparse.Namespace, model_id: str, settings: AgentSettings) -> None:
    """The simulated environment's per-call costs, with their provenance."""
    import dataclasses
    from datetime import date

    summary = (f"measured {date.today().isoformat()} with bench/mas_execute.py: {model_id} sub-agents, "
               f"{args.questions} GSM8K test questions per agent type, {args.max_new_tokens}-token budget")
    costs = {"source": {"summary": summary, "command": "bench/mas_execute.py " + " ".join(sys.argv[1:]),
                        "model": model_id, "questions": args.questions, "max_new_tokens": args.max_new_tokens,
                        "temperature": args.temperature, "agent_settings": dataclasses.asdict(settings)},
             "agents": {row["agent"]: {"prompt_tokens_per_call": round(row["prompt_tokens_per_call"], 1),
                                       "completion_tokens_per_call": round(row["completion_tokens_per_call"], 1),
                                       "calls": row["calls"], "calls_per_agent": round(row["calls_per_plan"], 2)}
                        for row in rows}}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(orjson.dumps(costs, option=orjson.OPT_INDENT_2).decode() + "\n")
    print(f"costs written to {path}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--agents", nargs="*", default=list(AGENTS), choices=list(AGENTS))
    parser.add_argument("--sc-samples", type=int, default=AgentSettings().sc_samples)
    parser.add_argument("--debate-rounds", type=int, default=AgentSettings().debate_rounds)
    parser.add_argument("--costs-out", default=None, help="write each agent type's mean tokens per call here (JSON)")
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
    settings = AgentSettings(sc_samples=args.sc_samples, debate_rounds=args.debate_rounds)
    print(HEADER, flush=True)
    rows = []
    for agent_name in args.agents:
        row = bench_agent(agent_name, problems, ctx, settings)
        rows.append(row)
        print(f"{row['agent']:<16}{row['plans_per_min']:>10.2f}{row['s_per_plan']:>9.1f}{row['calls_per_plan']:>11.1f}"
              f"{row['tokens_per_plan']:>12.0f}{row['errors']:>7}{row['correct']:>8}"
              f"{os.getloadavg()[0]:>6.1f}", flush=True)
    if args.costs_out:
        write_costs(args.costs_out, rows, args, backend.model_id, settings)


if __name__ == "__main__":
    main()
