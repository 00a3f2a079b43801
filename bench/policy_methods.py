"""The policy round's training methods side by side, the paper's comparison: GRPO rewarded by the reward model
(`orchrm`), GRPO rewarded by executed correctness (`trajectory`), DPO on the reward model's own pairs, and RFT on the
policy's own correct plans. One generated history and one trained champion; then round 1 of each method from the same
starting policy (the embedded SmolLM2-135M, few-shot prompt) on the same problems and seed, each in its own copy of
the storage root, and one Markdown table: held-out reward and accuracy before/after, every token each spent, seconds.

    .venv/bin/python bench/policy_methods.py [--steps 2] [--group-size 8] [--samples 4] [--pairs 4]
    .venv/bin/python bench/policy_methods.py --steps 1 --group-size 2 --samples 2 --pairs 2   # the smallest

--steps: GRPO steps (and training problems) per round; --group-size: GRPO's plans per step; --samples: RFT's plans
per training problem; --pairs: DPO's pairs per round. Held-out plans are executed (held-out accuracy) unless
--no-heldout-execute. Defaults are CPU-sized: minutes per method on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TOKEN_COLUMNS = ("generation_tokens", "reward_tokens", "rollout_tokens", "training_tokens")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4, help="RFT: plans sampled and executed per problem")
    parser.add_argument("--pairs", type=int, default=4, help="DPO: pairs per round")
    parser.add_argument("--no-heldout-execute", action="store_true")
    parser.add_argument("--heldout-problems", type=int, default=3)
    parser.add_argument("--heldout-samples", type=int, default=2)
    parser.add_argument("--environment", default="agents", help="where plans execute: agents, or simulated (SIMULATED: "
                                                                 "correctness drawn by the plan_success_rate truth)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orchrm-policy-methods-") as tmp:
        storage = Path(tmp, "storage")
        os.environ["ORCHRM_STORAGE"] = str(storage)
        os.environ["DAGSTER_HOME"] = str(Path(tmp, "dagster_home"))
        os.environ["ORCHRM_CACHE"] = str(Path(tmp, "cache"))
        _, registry = trained_champion(tmp)
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        rows = {label: run_method(storage, Path(tmp, label), settings, registry)
                for label, settings in variants(args).items()}
        simulated = " (SIMULATED environment: accuracy drawn by a truth function)" if args.environment != "agents" else ""
        print(f"\nround 1 of each method from smollm2-fewshot, {args.steps} training problems, same seed{simulated}:\n")
        print(markdown(rows))


def trained_champion(tmp: str) -> tuple:
    """The generated history ingested, its pairs built and the champion trained (bench/grpo.py starts the same way):
    the storage root and the policy registry."""
    from orchrm_dagster.definitions import build_definitions
    from orchrm_dagster.app.commands import ingest_files
    from orchrm_dagster.app.main_job import materialize_or_fail
    from orchrm_dagster.grpo import base_model_dir
    from orchrm_dagster.synthetic import generate_runs, write_jsonl

    defs = build_definitions()
    history = Path(tmp, "history.jsonl")
    write_jsonl(generate_runs(1200, seed=1, plans_decide=True, first_problem=12), history)
    materialize_or_fail(defs, 'key:"problems"')
    ingest_files(defs, [history])
    materialize_or_fail(defs, 'key:"pairs"')
    materialize_or_fail(defs, 'key:"reward_model"', {"ops": {"reward_model": {"config": {"max_train_pairs": 320}}}})
    root = defs.resources["storage"].storage_root()
    base_model_dir(root, None)  # de-quantized once, before the root is copied
    return root, defs.resources["policy_registry"].all_policies()


def variants(args) -> dict:
    from orchrm_dagster.grpo import GRPOSettings

    base = GRPOSettings(steps=args.steps, group_size=args.group_size, train_problems=args.steps,
                        heldout_execute=not args.no_heldout_execute, policy_margin=1e9,
                        heldout_problems=args.heldout_problems, heldout_samples=args.heldout_samples)
    base = dataclasses.replace(base, execution=base.execution.in_environment(args.environment))
    sections = base.method_settings
    return {
        "grpo (orchrm)": dataclasses.replace(base, method="grpo", rewards=("orchrm",)),
        "grpo (trajectory)": dataclasses.replace(base, method="grpo", rewards=("trajectory",)),
        "dpo": dataclasses.replace(base, method="dpo", method_settings=dataclasses.replace(
            sections, dpo=dataclasses.replace(sections.dpo, pairs_per_round=args.pairs))),
        "rft": dataclasses.replace(base, method="rft", method_settings=dataclasses.replace(
            sections, rft=dataclasses.replace(sections.rft, samples_per_problem=args.samples))),
    }


def run_method(storage: Path, copy: Path, settings, registry) -> dict:
    """Round 1 of `settings` in a fresh copy of the trained storage root."""
    from orchrm_dagster.grpo import run_round
    from orchrm_dagster.llm import TransformersSpec
    from orchrm_dagster.storage import StorageRoot

    shutil.copytree(storage, copy)
    started = time.perf_counter()
    outcome = run_round(StorageRoot(str(copy)), 1, settings, registry, TransformersSpec(),
                        on_step=lambda text: print(f"  {text}", flush=True))
    return {**outcome.row, "wall": time.perf_counter() - started}


def markdown(rows: dict) -> str:
    header = ["method", "held-out reward before", "after", "held-out accuracy before", "after", "generation tok",
              "reward tok", "rollout tok", "training tok", "total tok", "seconds", "verdict"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, row in rows.items():
        cells = [label, _num(row["heldout_reward_before"]), _num(row["heldout_reward_after"]),
                 _num(row["heldout_accuracy_before"]), _num(row["heldout_accuracy"]),
                 *(f"{row[key] or 0:,}" for key in TOKEN_COLUMNS), f"{sum(row[key] or 0 for key in TOKEN_COLUMNS):,}",
                 f"{row['wall']:.0f}", row["verdict"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _num(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    main()
