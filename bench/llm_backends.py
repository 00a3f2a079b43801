"""Embedded-model (SmolLM2-135M GGUF, transformers on CPU) throughput and plan parse rate.

    .venv/bin/python bench/llm_backends.py [--max-new-tokens 64] [--plans 16] [--plan-tokens 640] [--threads N]

1. tokens/s for 8 orchestrator prompts generated one at a time vs as one batch of 8 (greedy, fixed
   max_new_tokens), without and with the plan grammar;
2. plan parse rate (``parse_plan`` success) of the embedded policies as the pipeline samples them
   (their prompts and temperatures, ``--plans`` plans each over the first GSM8K problems, two per problem),
   without and with the plan grammar.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from orchrm_dagster.llm import ChatRequest, Completion, SamplingSettings  # noqa: E402
from orchrm_dagster.llm.transformers_decoding import TransformersBackend  # noqa: E402
from orchrm_dagster.problems import load_shipped  # noqa: E402
from orchrm_dagster.orchestration import Problem, sample_plans  # noqa: E402
from orchrm_dagster.plans import Plan, parse_plan, plan_grammar_ebnf  # noqa: E402
from assets.resources import LLMBackendResource, embedded_policies  # noqa: E402

ORCHESTRATOR_PROMPT = """You are an orchestrator. Read the question and write a plan: first \
<thinking>one or two lines</thinking>, then either <answer>the answer</answer> when it is trivial, or \
one or more agents (CoTAgent, SCAgent, DebateAgent, ReflexionAgent, WebSearchAgent) and an <edge> block. \
Example:
<thinking>
Arithmetic, one agent is enough.
</thinking>
<agent>
<agent_id>1</agent_id>
<agent_name>CoTAgent</agent_name>
<agent_description>Solves the problem step by step.</agent_description>
<required_arguments>
<agent_input>Compute 17 * 3.</agent_input>
</required_arguments>
</agent>
<edge>
</edge>"""

QUESTIONS = (
    "What is 12 + 30?",
    "Who wrote Hamlet?",
    "A train travels 60 km in 1.5 hours. What is its average speed?",
    "Which is larger, 2^10 or 10^3?",
    "What is the capital of the country where the Eiffel Tower stands?",
    "Solve for x: 3x - 7 = 11.",
    "Name the author of 'Pride and Prejudice' and the year it was published.",
    "How many prime numbers are there below 30?",
)


def request(question: str, grammar: str | None, sampling: SamplingSettings) -> ChatRequest:
    messages = ({"role": "system", "content": ORCHESTRATOR_PROMPT}, {"role": "user", "content": question})
    return ChatRequest(messages=messages, sampling=sampling, grammar=grammar)


def tokens_per_s(backend: TransformersBackend, requests: list[ChatRequest], batched: bool) -> tuple[float, int]:
    started = time.perf_counter()
    if batched:
        completions = backend.generate(requests)
    else:
        completions = [c for r in requests for c in backend.generate([r])]
    elapsed = time.perf_counter() - started
    check(completions)
    tokens = sum(c.completion_tokens for c in completions)
    return tokens / elapsed, tokens


def check(completions: list[Completion]) -> None:
    failed = [c.error for c in completions if c.error]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed, first: {failed[0]}")


def parse_rate(backend: TransformersBackend, policy, problems, samples_per_problem: int) -> dict:
    started = time.perf_counter()
    samples = sample_plans(policy, backend, problems, samples_per_problem, seed=0)
    elapsed = time.perf_counter() - started
    failed = [s.plan_error for s in samples if s.plan_error and s.plan_error.startswith("generation failed")]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed, first: {failed[0]}")
    parsed = [parse_plan(s.plan) for s in samples]
    return {
        "ok": sum(isinstance(p, Plan) for p in parsed),
        "truncated": sum(s.orchestrator_completion_tokens >= policy.max_new_tokens for s in samples),
        "errors": Counter(p.code for p in parsed if not isinstance(p, Plan)),
        "forms": Counter(p.form for p in parsed if isinstance(p, Plan)),
        "tokens": sum(s.orchestrator_completion_tokens for s in samples),
        "seconds": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--plans", type=int, default=16)
    parser.add_argument("--plan-tokens", type=int, default=640)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--only", choices=("throughput", "parse"), default=None, help="run one part only")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    backend = TransformersBackend(max_batch_size=8)
    started = time.perf_counter()
    backend.loaded()
    print(f"model {backend.model_id}: loaded in {time.perf_counter() - started:.1f} s, "
          f"torch threads {torch.get_num_threads()}, os.cpu_count() {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    grammar = plan_grammar_ebnf()
    backend.generate([request(QUESTIONS[0], grammar, SamplingSettings(max_new_tokens=4))])  # warm-up, compile

    if args.only != "parse":
        throughput(backend, grammar, args.max_new_tokens)
    if args.only != "throughput":
        parse_rates(backend, args.plans, args.plan_tokens)


def throughput(backend: TransformersBackend, grammar: str, max_new_tokens: int) -> None:
    greedy = SamplingSettings(max_new_tokens=max_new_tokens)
    print(f"\nthroughput: {len(QUESTIONS)} requests, greedy, max_new_tokens={max_new_tokens}")
    print(f"{'grammar':<8} {'mode':<12} {'tokens':>7} {'tokens/s':>9}")
    for label, g in (("none", None), ("plan", grammar)):
        requests = [request(q, g, greedy) for q in QUESTIONS]
        for batched in (False, True):
            rate, tokens = tokens_per_s(backend, requests, batched)
            print(f"{label:<8} {'batch of 8' if batched else 'one by one':<12} {tokens:>7} {rate:>9.1f}")


def parse_rates(backend: TransformersBackend, plans: int, plan_tokens: int) -> None:
    problems = [Problem(r["problem_id"], r["benchmark"], r["question"], r["answer"], "math")
                for r in load_shipped("gsm8k_test")[:max(1, plans // 2)]]
    print(f"\nplan parse rate: embedded policies, {len(problems)} GSM8K problems x 2 plans, seed 0, "
          f"max_new_tokens={plan_tokens}")
    print(f"{'policy':<16} {'grammar':<8} {'parsed':>7} {'truncated':>9} {'tokens':>7} {'s':>6}  errors / forms")
    llm, registry = LLMBackendResource(), embedded_policies()
    for config in registry.policies:
        for grammar in (False, True):
            policy = dataclasses.replace(registry.spec(config.name, llm), grammar=grammar,
                                         max_new_tokens=plan_tokens)
            r = parse_rate(backend, policy, problems, 2)
            n = len(problems) * 2
            print(f"{config.name:<16} {'plan' if grammar else 'none':<8} {r['ok']:>3}/{n:<3} {r['truncated']:>9} "
                  f"{r['tokens']:>7} {r['seconds']:>6.0f}  {dict(r['errors'])} / {dict(r['forms'])}")


if __name__ == "__main__":
    main()
