"""A round's decoding as it runs, each prompt held once (`llm.shared_prefix`) against a copy of the prompt per row:
held-out batches (32 plans: 8 problems x 4 samples, temperature 0.5) and a GRPO group (8 plans of one prompt,
temperature 1), of the embedded SmolLM2 with the few-shot orchestrator prompt, one-agent plans of at most 200 tokens
under the plan grammar (GRPOSettings' defaults). Prints seconds per plan and tokens/s of each, beside the CPU's flags.

    .venv/bin/python bench/heldout_decoding.py [--batches 1] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import contextmanager

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=1, help="held-out batches of 32 plans to time")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from orchrm_dagster.devices import cpu_flags

    print(f"{cpu_flags()}; torch threads {torch.get_num_threads()}; load average {os.getloadavg()[0]:.1f}",
          flush=True)
    cases = [("held-out batch (8 problems x 4 plans)", 8, 4, 0.5), ("GRPO group (1 problem x 8 plans)", 1, 8, 1.0)]
    for label, problems, samples, temperature in cases:
        for shared in (True, False):
            seconds, tokens, plans = decode(problems, samples, temperature, shared, args.batches)
            print(f"| {label} | {'each prompt once' if shared else 'a copy per row'} | {seconds / plans:.2f} s a "
                  f"plan | {tokens / seconds:.1f} tokens/s | {plans} plans, {tokens} tokens |", flush=True)


def decode(problems: int, samples: int, temperature: float, shared: bool, batches: int) -> tuple[float, int, int]:
    import dataclasses

    from assets.resources import embedded_policies
    from orchrm_dagster.grpo import GRPOSettings
    from orchrm_dagster.llm.transformers_decoding import TransformersBackend
    from orchrm_dagster.orchestration import Problem, sample_plans
    from orchrm_dagster.problems import load_shipped

    settings = GRPOSettings()
    policy = embedded_policies().all_policies()[settings.policy]
    policy = dataclasses.replace(policy, temperature=temperature, max_new_tokens=settings.max_completion_tokens,
                                 max_agents=settings.max_agents, grammar=settings.grammar)
    backend = TransformersBackend(device="cpu", max_batch_size=problems * samples)
    shipped = load_shipped("gsm8k_test")[-problems * batches:]
    wanted = [Problem(p["problem_id"], "gsm8k", p["question"], p["answer"], "math") for p in shipped]
    sample_plans(policy, backend, wanted[:1], 1, seed=99)  # the model loaded, outside the timing
    seconds = tokens = plans = 0
    with _sharing(shared):
        for start in range(0, len(wanted), problems):
            started = time.perf_counter()
            found = sample_plans(policy, backend, wanted[start:start + problems], samples, seed=10_000)
            seconds += time.perf_counter() - started
            tokens += sum(s.orchestrator_completion_tokens for s in found)
            plans += len(found)
    return seconds, tokens, plans


@contextmanager
def _sharing(on: bool):
    """Each prompt held once (the default) or, for the comparison, copied to every row."""
    from orchrm_dagster.llm import transformers_decoding as transformers_backend

    saved = transformers_backend.shares_prefixes
    if not on:
        transformers_backend.shares_prefixes = lambda model: False
    try:
        yield
    finally:
        transformers_backend.shares_prefixes = saved


if __name__ == "__main__":
    main()
