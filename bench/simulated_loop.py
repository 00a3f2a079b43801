"""The loop against a known truth (SIMULATED: every accuracy here is drawn by a truth function, not executed by
sub-agents). The orchestrator is the real embedded SmolLM2-135M (few-shot prompt); executing its plans draws their
correctness from the `plan_success_rate` truth (0.15 + 0.7 x the share of verifying agents) and charges sub-agent
tokens from the measured per-agent costs (orchrm_dagster/data/environments/subagent_costs.json). Three parts:

- learns: R rounds of the loop as the daemon runs them (`orchrm loop`'s in-process driver: rounds, rollouts, pairs,
  retraining), rewarded by the champion reward model, then the same rounds rewarded by executed trajectories: held-out
  accuracy per round with its interval, every token each spent, and the reward-side token ratio.
- fooled: the same reward model (it learnt that verifying agents win), rounds in an environment whose truth ignores that
  cue (`debate_sink`: only a DebateAgent sink fed by two agents answers better, which plans of at most --max-agents 1
  agent never are): its reward, the measured accuracy, the gate's verdicts and where each round started from.
- profile: one round (`run_round`, what the loop's round asset runs) at a small size (1 step of a group, 16 held-out
  plans a side), twice: as the round ran before #38 (every weight trained, activation checkpointing on, 2 plans a
  pass, every plan forwarding its prompt, transformers' own KV cache, held-out plans decoded 8 at a time) and as it
  runs now, each phase's seconds side by side.
- bon: Best-of-N on held-out problems, N plans sampled per problem and executed in the simulated environment:
  single vs the champion's pick (orchrm_bon) vs majority vote vs the oracle, with tokens.

    .venv/bin/python bench/simulated_loop.py [--parts learns,fooled,bon] [--rounds 3] [--fooled-rounds 1]
        [--steps 6] [--group-size 8] [--plan-tokens 200] [--max-agents 1] [--heldout-problems 8]
        [--heldout-samples 16] [--learning-rate 1e-3] [--lr-scheduler constant] [--kl-beta 0] [--no-lora]
        [--work DIR] [--figures DIR]

Sized for 2 CPU cores to decide: 128 executed held-out plans a side per round (8 problems x 16 samples; in this
environment correctness depends on the plan, not the problem), LoRA, one-agent plans of at most 200 tokens, 6 steps
of 8 plans per round at a constant learning rate of 1e-3, KL off (at MAS-Orchestra's 0.001 the term moves nothing a
round can measure, and it costs a reference forward per step). Each round's seconds by phase
(grpo_rounds.seconds_by_phase) are printed, and the plots of held-out accuracy and reward over rounds are written as
PNGs (--figures). With --work, each part's grpo_rounds rows are kept in DIR/rows/ too: the token ratio of a run of
one reward reads the other reward's rows from an earlier run there (and says so).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

PARTS = ("profile", "learns", "fooled", "bon")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="learns,fooled")
    parser.add_argument("--rewards", default="orchrm,trajectory", help="learns: the loops' rewards, in turn")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fooled-rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps (and training problems) per round")
    parser.add_argument("--lr-scheduler", default="constant", choices=lr_schedulers())
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--plan-tokens", type=int, default=200,
                        help="the plan budget (the grammar fits it: 1 agent needs at least 200, 2 agents 324)")
    parser.add_argument("--max-agents", type=int, default=1)
    parser.add_argument("--heldout-problems", type=int, default=8)
    parser.add_argument("--heldout-samples", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--kl-beta", type=float, default=0.0)
    parser.add_argument("--figures", default=None, help="write the rounds' plots (PNG) here")
    parser.add_argument("--no-lora", action="store_true")
    parser.add_argument("--bon-problems", type=int, default=8)
    parser.add_argument("--history-runs", type=int, default=2400)
    parser.add_argument("--work", default=None, help="keep the prepared roots here and reuse them on the next run "
                                                     "(default: a temporary folder)")
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; known: {', '.join(PARTS)}")
    print(f"SIMULATED environment (truth: plan_success_rate); load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs ({cpu_flags()}); {vars(args)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="orchrm-simulated-loop-") as scratch:
        prepared = Path(args.work) if args.work else Path(scratch)
        tmp = Path(scratch)
        prepared = prepared_root(prepared / "prepared", args)
        if "profile" in parts:
            profile(prepared, tmp, args)
        if "learns" in parts:
            learns(prepared, tmp, args)
        if "fooled" in parts:
            fooled(prepared, tmp, args)
        if "bon" in parts:
            best_of_n(copied(prepared, tmp / "bon"), args)


# ---------------------------------------------------------------- set-up


def lr_schedulers() -> tuple[str, ...]:
    """GRPOSettings.lr_scheduler's choices (its Literal decides them)."""
    from typing import get_args, get_type_hints

    from orchrm_dagster.grpo import GRPOSettings

    return get_args(get_type_hints(GRPOSettings)["lr_scheduler"])


def cpu_flags() -> str:
    """The CPU's matrix units that decide bf16 speed (AMX, AVX-512 BF16), beside every timing."""
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "CPU flags unknown"
    wanted = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f")
    return "CPU " + ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in wanted)


def use_root(folder: Path) -> None:
    """Every orchrm entry point below reads its storage root and instance from here."""
    os.environ["ORCHRM_STORAGE"] = str(folder / "storage")
    os.environ["DAGSTER_HOME"] = str(folder / "dagster_home")
    os.environ["ORCHRM_CACHE"] = str(folder / "cache")


def prepared_root(folder: Path, args) -> Path:
    """A generated history (simulated: the plan_success_rate truth decides correctness), its pairs, a champion reward
    model and its scores of every run, the base model de-quantized once."""
    from orchrm_dagster.definitions import build_definitions
    from orchrm_dagster.app.commands import ingest_files
    from orchrm_dagster.app.main_job import materialize_or_fail
    from orchrm_dagster.grpo import base_model_dir
    from orchrm_dagster.rm import current_champions
    from orchrm_dagster.synthetic import generate_runs, write_jsonl

    use_root(folder)
    if (folder / "prepared").exists():
        print(f"reusing the prepared root {folder}", flush=True)
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    started = time.perf_counter()
    defs = build_definitions()
    history = folder / "history.jsonl"
    records = generate_runs(args.history_runs, seed=1, plans_decide=True, first_problem=12, environment="simulated")
    write_jsonl(records, history)
    materialize_or_fail(defs, 'key:"problems"')
    ingest_files(defs, [history])
    materialize_or_fail(defs, 'key:"pairs"')
    materialize_or_fail(defs, 'key:"reward_model"', {"ops": {"reward_model": {"config": {"max_train_pairs": 320}}}})
    root = defs.resources["storage"].storage_root()
    champions = current_champions(root)
    if "math" not in champions:
        raise SystemExit(f"the history gave no champion reward model of the math domain (GSM8K's), nothing to reward "
                         f"the rounds with: champions {champions}")
    materialize_or_fail(defs, 'key:"rm_scores"')
    base_model_dir(root, None)
    rows = defs.resources["storage"].warehouse().query(
        "select version, round(val_accuracy, 3) AS val_accuracy, val_accuracy_by_domain, n_validation_pairs, "
        "champion_of from rm_checkpoints order by version").to_pylist()
    print(f"\nhistory: {args.history_runs} simulated runs (plan_success_rate), reward model "
          f"{rows}, {time.perf_counter() - started:.0f} s", flush=True)
    (folder / "prepared").touch()
    return folder


def copied(source: Path, copy: Path) -> Path:
    """The prepared root's storage and cache, with a Dagster instance of its own (runs of one copy's loop must not count
    as another's)."""
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("dagster_home"))
    return copy


def round_settings(args, reward: str):
    from orchrm_dagster.grpo import GRPOSettings

    return GRPOSettings(steps=args.steps, group_size=args.group_size, train_problems=args.steps,
                        max_completion_tokens=args.plan_tokens, max_agents=args.max_agents, lora=not args.no_lora,
                        learning_rate=args.learning_rate, lr_scheduler=args.lr_scheduler, kl_beta=args.kl_beta,
                        heldout_problems=args.heldout_problems, heldout_samples=args.heldout_samples,
                        rewards=(reward,))


def run_loop(source: Path, copy: Path, args, reward: str, truth: str = "plan_success_rate",
             rounds: int | None = None) -> list[dict]:
    """`rounds` (default `args.rounds`) rounds of the loop in a copy of the prepared root, as `orchrm loop` runs
    them."""
    from assets.config_bridge import from_engine
    from assets.resources import LoopResource
    from orchrm_dagster.app.loop import drive
    from orchrm_dagster.definitions import build_definitions
    from orchrm_dagster.grpo import read_table
    from orchrm_dagster.loop import LoopSettings

    use_root(copied(source, copy))
    loop = LoopSettings(rounds=rounds or args.rounds, round=round_settings(args, reward)).in_environment("simulated",
                                                                                                     truth)
    defs = build_definitions(loop=from_engine(LoopResource, loop))
    started = time.perf_counter()
    drive(defs, loop, on_step=lambda step: print(f"  [{time.perf_counter() - started:5.0f} s] {step.kind}: "
                                                 f"{step.why}", flush=True), poll_s=1.0)
    return read_table(defs.resources["storage"].storage_root(), "grpo_rounds")


# ---------------------------------------------------------------- the parts


def learns(prepared: Path, tmp: Path, args) -> None:
    results = {}
    for reward in [r for r in args.rewards.split(",") if r]:
        print(f"\nlearns: {args.rounds} rounds rewarded by {reward}", flush=True)
        results[reward] = keep_rows(args, f"learns-{reward}",
                                    run_loop(prepared, tmp / f"learns-{reward}", args, reward))
    print("\n## It learns (SIMULATED environment, truth plan_success_rate)\n")
    for reward, rows in results.items():
        print(f"\nrewards: {reward}\n")
        print(rounds_markdown(rows))
        print("\n" + phases_markdown(rows))
        save_plot(rows, args, f"learns-{reward}")
    earlier = {}  # the other reward's rows, from an earlier run kept in --work
    for reward in {"orchrm", "trajectory"} - set(results):
        if rows := kept_rows(args, f"learns-{reward}"):
            earlier[reward] = rows
    if earlier:
        print(f"\n(token ratio: the rows of {', '.join(earlier)} are from an earlier run kept in {args.work}/rows)")
    print("\n" + token_ratio({**earlier, **results}))


def keep_rows(args, name: str, rows: list[dict]) -> list[dict]:
    """`rows` as they are, kept in --work/rows/`name`.json when --work is given."""
    if args.work:
        import json

        folder = Path(args.work) / "rows"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(rows, default=str, indent=1))
    return rows


def kept_rows(args, name: str) -> list[dict] | None:
    """The rows `keep_rows` kept under `name` in --work (None: none kept)."""
    import json

    path = Path(args.work or "", "rows", f"{name}.json")
    return json.loads(path.read_text()) if args.work and path.exists() else None


def profile(prepared: Path, tmp: Path, args) -> None:
    import dataclasses
    import json
    import resource

    from orchrm_dagster.definitions import build_definitions
    from orchrm_dagster.grpo import Profile, run_round

    size = dict(steps=1, train_problems=1, heldout_problems=1, heldout_samples=16)  # "before" trains every weight
    now = dataclasses.replace(round_settings(args, "orchrm"), **size)
    now = dataclasses.replace(now, execution=now.execution.in_environment("simulated"))
    before = dataclasses.replace(now, lora=False, activation_checkpointing=True, micro_batch_size=2,
                                 heldout_batch_size=8)
    seconds = {}
    for label, settings in (("before", before), ("now", now)):
        use_root(copied(prepared, tmp / f"profile-{label}"))
        defs = build_definitions()
        root = defs.resources["storage"].storage_root()
        with _as_before(label == "before"):
            started = time.perf_counter()
            outcome = run_round(root, 1, settings, defs.resources["policy_registry"].all_policies(),
                                defs.resources["llm"].spec())
        seconds[label] = json.loads(outcome.row["seconds_by_phase"])
        rate = outcome.row["generation_tokens"] / max(outcome.generation_seconds, 1e-9)
        print(f"\n{label}: one round of {settings.steps} steps x {settings.group_size} plans, "
              f"{settings.heldout_problems * settings.heldout_samples} held-out plans a side, "
              f"{time.perf_counter() - started:.0f} s; training generation {rate:.1f} tok/s; peak RSS so far "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB; load average "
              f"{os.getloadavg()[0]:.1f}\n", flush=True)
        print(Profile(seconds[label]).markdown(), flush=True)
    names = sorted(set(seconds["before"]) | set(seconds["now"]), key=lambda n: -seconds["before"].get(n, 0.0))
    print("\n| phase | before (s) | now (s) |\n|---|---|---|")
    for name in names:
        print(f"| {name} | {seconds['before'].get(name, 0.0):.1f} | {seconds['now'].get(name, 0.0):.1f} |")
    print(f"| total | {sum(seconds['before'].values()):.1f} | {sum(seconds['now'].values()):.1f} |")


@contextmanager
def _as_before(active: bool):
    """The decoding and log-probability speed-ups of #38 switched off (transformers' own KV cache, every plan
    forwarding its prompt), for the profile's `before`."""
    from orchrm_dagster.grpo import shared_prefix
    from orchrm_dagster.llm import transformers_backend

    saved = transformers_backend.decoding_cache, shared_prefix.can_share
    if active:
        transformers_backend.decoding_cache, shared_prefix.can_share = (lambda model: None), (lambda model: False)
    try:
        yield
    finally:
        transformers_backend.decoding_cache, shared_prefix.can_share = saved


def fooled(prepared: Path, tmp: Path, args) -> None:
    print(f"\nfooled: {args.fooled_rounds} round(s) rewarded by the reward model that prefers verifying agents, in an "
          f"environment whose truth (debate_sink) ignores them", flush=True)
    rows = keep_rows(args, "fooled", run_loop(prepared, tmp / "fooled-rounds", args, "orchrm", truth="debate_sink",
                                              rounds=args.fooled_rounds))
    print("\n## It cannot be fooled (SIMULATED environment, truth debate_sink; the reward model learnt that verifying "
          "agents win, a cue this truth ignores)\n")
    print(rounds_markdown(rows))
    print("\n" + phases_markdown(rows))
    save_plot(rows, args, "fooled")
    for row in rows:
        print(f"- round {row['round']} (from {row['start_policy']}): {row['verdict']}: {row['reason']}")


def best_of_n(root_folder: Path, args) -> None:
    from orchrm_dagster.definitions import build_definitions
    from orchrm_dagster.app.commands import ingest_landed
    from orchrm_dagster.app.main_job import materialize_or_fail, orchestrate_policies
    from orchrm_dagster.orchestration import ExecutionSettings, PlanSamplingSettings, select_problems

    use_root(root_folder)
    defs = build_definitions()
    root = defs.resources["storage"].storage_root()
    problems = [p.problem_id for p in select_problems(root, "gsm8k", 10**9)[-args.bon_problems:]]
    sampling = PlanSamplingSettings(n_samples=8, problem_ids=tuple(problems), seed=7)
    execution = ExecutionSettings(concurrent_plans=8).in_environment("simulated")
    started = time.perf_counter()
    executions = orchestrate_policies(defs, "gsm8k", ["smollm2-fewshot"], sampling, execution)
    ingest_landed(defs, [e.metadata["landed_batch"] for e in executions])
    materialize_or_fail(defs, 'key:"rm_scores"')
    methods = ["single", "orchrm_bon", "majority_vote", "oracle"]
    materialize_or_fail(defs, 'key:"evaluation"', {"ops": {"evaluation": {"config": {
        "methods": methods, "ns": [1, 2, 4, 8], "benchmarks": ["gsm8k"], "policies": ["smollm2-fewshot"]}}}})
    rows = defs.resources["storage"].warehouse().query(
        "select policy, method, n, accuracy, ci_low, ci_high, n_problems, verification_tokens, generation_tokens, "
        "execution_tokens from evaluation order by method, n").to_pylist()
    print(f"\n## Best-of-N (SIMULATED environment): {len(problems)} held-out GSM8K problems x 8 plans of "
          f"smollm2-fewshot, {time.perf_counter() - started:.0f} s\n")
    print("| policy | method | N | accuracy [95% interval] | problems | verification tok | generation tok | "
          "execution tok |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['policy']} | {r['method']} | {r['n']} | {r['accuracy']:.3f} [{r['ci_low']:.3f}, "
              f"{r['ci_high']:.3f}] | {r['n_problems']} | {r['verification_tokens']:,.0f} | "
              f"{r['generation_tokens']:,.0f} | {r['execution_tokens']:,.0f} |")


# ---------------------------------------------------------------- tables


def phases_markdown(rows: list[dict]) -> str:
    """Where the rounds' seconds went, phase by phase (each phase's own time), summed over the rounds."""
    import json

    totals: dict[str, float] = {}
    for row in rows:
        for name, seconds in json.loads(row.get("seconds_by_phase") or "{}").items():
            totals[name] = totals.get(name, 0.0) + seconds
    from orchrm_dagster.grpo import Profile

    return f"seconds by phase over {len(rows)} round(s):\n\n" + Profile(totals).markdown()


def save_plot(rows: list[dict], args, name: str) -> None:
    """The rounds' plot (held-out accuracy and reward over rounds, with intervals; SIMULATED in its title)."""
    if not args.figures or not rows:
        return
    from orchrm_dagster.grpo import rounds_png

    folder = Path(args.figures)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.png").write_bytes(rounds_png(rows))
    print(f"plot: {folder / f'{name}.png'}", flush=True)


def rounds_markdown(rows: list[dict]) -> str:
    from orchrm_dagster.grpo import rounds_table

    headers, table = rounds_table(rows)
    keep = ["round", "rewards", "environment", "held-out reward before", "held-out reward after", "accuracy before",
            "accuracy after", "difference", "verdict", "hacking?", "reward tokens", "rollout tokens", "total tokens"]
    index = [headers.index(h) for h in keep]
    lines = ["| " + " | ".join(keep) + " | start | seconds |", "|" + "---|" * (len(keep) + 2)]
    for row, shown in zip(rows, table):
        lines.append("| " + " | ".join(str(shown[i]) for i in index)
                     + f" | {row['start_policy']} | {row['seconds']:.0f} |")
    return "\n".join(lines)


def token_ratio(results: dict[str, list[dict]]) -> str:
    """The reward-side tokens (what each reward spent to score plans) of the two loops, and the accuracy each ended
    at, beside the paper's 10-46x."""
    spent = {reward: sum((r["reward_tokens"] or 0) + (r["rollout_tokens"] or 0) for r in rows)
             for reward, rows in results.items()}
    from orchrm_dagster.grpo.plots import accuracy_text

    lines = [f"- {reward}: {spent[reward]:,} reward-side tokens over {len(rows)} rounds; last held-out accuracy "
             f"{accuracy_text(rows[-1], 'after') if rows else 'not measured'}" for reward, rows in results.items()]
    final = {reward: (rows[-1]["heldout_accuracy_low_after"], rows[-1]["heldout_accuracy_high_after"])
             if rows else (None, None) for reward, rows in results.items()}
    if spent.get("orchrm") and "trajectory" in spent:
        lines.append(f"- trajectory / orchrm reward-side tokens: {spent['trajectory'] / spent['orchrm']:.1f}x (the "
                     f"paper: 10-46x fewer tokens for the reward model at equal accuracy)")
    (low_a, high_a), (low_b, high_b) = final.get("orchrm", (None, None)), final.get("trajectory", (None, None))
    if None not in (low_a, high_a, low_b, high_b):
        overlap = low_a <= high_b and low_b <= high_a
        lines.append("- the two last accuracies' intervals " + ("overlap: equal accuracy within what the held-out "
                                                               "sample can tell" if overlap else "do not overlap"))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
