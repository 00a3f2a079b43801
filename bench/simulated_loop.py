"""The loop against a known truth (SIMULATED: every accuracy here is drawn by a truth function, not executed by
sub-agents), run as a user runs it: `orchrm main` (what `make run` runs) prepares the root, then `orchrm loop --rounds
R --environment simulated` with the product's defaults (no other flag) runs the rounds. The orchestrator is the real
embedded SmolLM2-135M (few-shot prompt); executing its plans draws their correctness from the `plan_success_rate`
truth (0.15 + 0.7 x the share of verifying agents) and charges sub-agent tokens from the measured per-agent costs
(orchrm_dagster/data/environments/subagent_costs.json). Parts:

- learns: three loops side by side on copies of the same prepared root, problems and seeds (`--rewards`): rewarded
  by the champion reward model (`orchrm loop --rounds R --environment simulated`), by executed trajectories with the
  reward model kept current (`... --rewards trajectory`), and by execution with no reward model at all (`...
  --rewards trajectory --reward-model none`: rounds that neither wait for nor load a champion); plans of at most
  `--max-agents` agents. Held-out accuracy per round with its interval, and every token each loop spent, by kind:
  what rewarding its rounds cost (reward side, rollouts, retraining) apart from the work every loop does alike (the
  rounds' generation and training, the gate's held-out measures), its ratio to the execution-only loop's, and the
  break-even point projected from the measured per-round costs.
- fooled: one round rewarded by the same champion (it learnt that verifying agents win) whose held-out plans execute
  under another truth (`--fooled-truth`, default `verifying_cue`: verifying agents are worth 0.1, not the 0.7 the
  champion learnt, so accuracy can still move, less than the champion predicts; `debate_sink`: only a DebateAgent
  sink fed by two agents answers better, so every one-agent plan has the same odds): the gate's verdict and its
  hacking flag, beside what the truth expects of the same plans (the accuracy an infinite number of draws would
  measure).
- profile: one round (`run_round`, what the loop's round asset runs) at a small size (1 step of a group, 16 held-out
  plans a side), twice: as the round ran before #38 (every weight trained, activation checkpointing on, 2 plans a
  pass, every plan forwarding its prompt, transformers' own KV cache, each row its own copy of its prompt, held-out
  plans decoded 8 at a time) and as it runs now, each phase's seconds side by side.
- bon: Best-of-N on held-out problems, N plans sampled per problem and executed in the simulated environment:
  single vs the champion's pick (orchrm_bon) vs majority vote vs the oracle, with tokens.

    .venv/bin/python bench/simulated_loop.py [--parts learns,fooled] [--rewards orchrm,trajectory,execution-only]
        [--rounds 3] [--max-agents N]
        [--loop-flags "--steps 4 ..."] [--work DIR] [--figures DIR]

`--loop-flags` passes more flags to every `orchrm loop` (an experiment away from the defaults; the tables say so).
With --work, the prepared root and each part's loop root are kept in DIR (a part's loop root is made again on each
run), and each part's grpo_rounds rows in DIR/rows/.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from orchrm_dagster.devices import cpu_flags  # noqa: E402

PARTS = ("profile", "learns", "fooled", "bon")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="learns,fooled")
    parser.add_argument("--rewards", default="orchrm,trajectory,execution-only",
                        help=f"learns: the loops, in turn ({', '.join(LOOPS)}, or a reward's name)")
    parser.add_argument("--max-agents", type=int, default=None, help="learns: plans of at most this many agents "
                                                                     "(default: the product's, 1)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fooled-truth", default="verifying_cue")
    parser.add_argument("--loop-flags", default="", help="more flags for every `orchrm loop` (default: none, the "
                                                         "product's defaults)")
    parser.add_argument("--figures", default=None, help="write the rounds' plots (PNG) here")
    parser.add_argument("--bon-problems", type=int, default=8)
    parser.add_argument("--work", default=None, help="keep the prepared root and the loops' roots here, and reuse "
                                                     "the prepared root on the next run (default: a temporary folder)")
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; known: {', '.join(PARTS)}")
    print(f"SIMULATED environment (truth: plan_success_rate); load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs ({cpu_flags()}); {vars(args)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="orchrm-simulated-loop-") as scratch:
        tmp = Path(args.work) if args.work else Path(scratch)
        prepared = prepared_root(tmp / "prepared")
        if "profile" in parts:
            profile(prepared, tmp, args)
        if "learns" in parts:
            learns(prepared, tmp, args)
        if "fooled" in parts:
            fooled(prepared, tmp, args)
        if "bon" in parts:
            best_of_n(copied(prepared, tmp / "bon"), args)


# ---------------------------------------------------------------- set-up


def use_root(folder: Path) -> None:
    """Every orchrm entry point below reads its storage root and instance from here."""
    os.environ["ORCHRM_STORAGE"] = str(folder / "storage")
    os.environ["DAGSTER_HOME"] = str(folder / "dagster_home")
    os.environ["ORCHRM_CACHE"] = str(folder / "cache")


def orchrm(*args: str, log: Path | None = None) -> None:
    """`orchrm ARGS` as a user runs it, on the root `use_root` chose; its output printed (and kept in `log`)."""
    import subprocess

    command = [str(Path(sys.executable).with_name("orchrm")), *args]
    print(f"$ orchrm {' '.join(args)}", flush=True)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process, \
            (open(log, "w") if log else contextlib.nullcontext()) as out:
        for line in process.stdout:
            print("  " + line.rstrip(), flush=True)
            if out:
                out.write(line)
    if process.returncode:
        raise SystemExit(f"orchrm {' '.join(args)} failed with exit code {process.returncode}")


def prepared_root(folder: Path) -> Path:
    """A root as `make run` leaves it (`orchrm main`: real runs, a generated SIMULATED history of 1,200 runs, pairs,
    the champion reward model, its scores), the base model de-quantized once."""
    use_root(folder)
    if (folder / "prepared").exists():
        print(f"reusing the prepared root {folder}", flush=True)
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    started = time.perf_counter()
    orchrm("main", log=folder / "main.log")
    print(f"prepared in {time.perf_counter() - started:.0f} s", flush=True)
    (folder / "prepared").touch()
    return folder


def copied(source: Path, copy: Path) -> Path:
    """The prepared root's storage and cache, with a Dagster instance of its own (runs of one copy's loop must not count
    as another's)."""
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("dagster_home"))
    return copy


def run_loop(source: Path, copy: Path, args, *flags: str, rounds: int | None = None) -> list[dict]:
    """`orchrm loop --rounds R --environment simulated FLAGS` in a fresh copy of the prepared root: its rounds."""
    import shlex

    from orchrm_dagster.grpo import read_table
    from orchrm_dagster.storage import StorageRoot

    shutil.rmtree(copy, ignore_errors=True)
    use_root(copied(source, copy))
    orchrm("loop", "--rounds", str(rounds or args.rounds), "--environment", "simulated", *flags,
           *shlex.split(args.loop_flags), log=copy / "loop.log")
    return read_table(StorageRoot(str(copy / "storage")), "grpo_rounds")


# ---------------------------------------------------------------- the parts


# each loop the bench can run: the flags of `orchrm loop` that make it (beside --loop-flags and --max-agents)
LOOPS = {
    "orchrm": (),  # rewarded by the champion reward model: the product's default
    "trajectory": ("--rewards", "trajectory"),  # rewarded by execution, the reward model kept current beside
    "execution-only": ("--rewards", "trajectory", "--reward-model", "none"),  # no reward model at all
}


def learns(prepared: Path, tmp: Path, args) -> None:
    results, spent = {}, {}
    agents = ("--max-agents", str(args.max_agents)) if args.max_agents else ()
    for reward in [r for r in args.rewards.split(",") if r]:
        print(f"\nlearns: {args.rounds} rounds, loop {reward}", flush=True)
        folder = tmp / f"learns-{reward}"
        flags = LOOPS.get(reward, ("--rewards", reward)) + agents
        results[reward] = keep_rows(args, f"learns-{reward}", run_loop(prepared, folder, args, *flags))
        spent[reward] = loop_spending(folder, results[reward])
    print(f"\n## It learns (SIMULATED environment, truth plan_success_rate; `orchrm loop` "
          f"{args.loop_flags or 'with its defaults'})\n")
    for reward, rows in results.items():
        print(f"\nrewards: {reward}\n")
        print(rounds_markdown(rows))
        print("\n" + phases_markdown(rows))
        save_plot(rows, args, f"learns-{reward}")
    print("\n" + token_ratio(results, spent, champion_tokens(prepared)))


def keep_rows(args, name: str, rows: list[dict]) -> list[dict]:
    """`rows` as they are, kept in --work/rows/`name`.json when --work is given."""
    if args.work:
        import json

        folder = Path(args.work) / "rows"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(rows, default=str, indent=1))
    return rows


def profile(prepared: Path, tmp: Path, args) -> None:
    import dataclasses
    import json
    import resource

    from orchrm_dagster.definitions import build_definitions
    from orchrm_dagster.grpo import GRPOSettings, Profile, run_round

    size = dict(steps=1, train_problems=1, heldout_problems=1, heldout_samples=16)  # "before" trains every weight
    now = dataclasses.replace(GRPOSettings(), **size)
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
    """The decoding and log-probability speed-ups of #38 and #43 switched off (transformers' own KV cache with each
    row's copy of its prompt, every plan forwarding its prompt in training), for the profile's `before`."""
    from orchrm_dagster.grpo import shared_prefix
    from orchrm_dagster.llm import transformers_decoding as transformers_backend

    saved = transformers_backend.decoding_cache, transformers_backend.shares_prefixes, shared_prefix.can_share
    if active:
        transformers_backend.decoding_cache = lambda model: None
        transformers_backend.shares_prefixes = shared_prefix.can_share = lambda model: False
    try:
        yield
    finally:
        transformers_backend.decoding_cache, transformers_backend.shares_prefixes, shared_prefix.can_share = saved


def fooled(prepared: Path, tmp: Path, args) -> None:
    print(f"\nfooled: one round rewarded by the reward model that learnt that verifying agents win, its held-out "
          f"plans executed under {args.fooled_truth} (verifying agents worth less than the champion thinks)", flush=True)
    rows = keep_rows(args, "fooled", run_loop(prepared, tmp / "fooled", args, "--truth", args.fooled_truth, rounds=1))
    print(f"\n## It cannot be fooled (SIMULATED environment, truth {args.fooled_truth}; the reward model learnt from "
          f"plan_success_rate that verifying agents win)\n")
    print(rounds_markdown(rows))
    print("\n" + phases_markdown(rows))
    save_plot(rows, args, "fooled")
    for row in rows:
        print(f"- round {row['round']} (from {row['start_policy']}): {row['verdict']}: {row['reason']}")
        expected = truth_expectation(tmp / "fooled" / "storage", row["round"], args.fooled_truth)
        print(f"  what the truth expects of the same plans (its chance averaged over them, a plan that does not parse "
              f"0): " + ", ".join(f"{side} {value:.3f}" for side, value in expected.items()))


def truth_expectation(storage: Path, round_number: int, truth: str) -> dict[str, float]:
    """Side -> the accuracy `truth` expects of the round's kept held-out plans (what an infinite number of draws of
    the same plans would measure): the measured accuracy's target, known only because the environment is simulated."""
    import polars as pl

    from hacking_flag import truth_chances
    from orchrm_dagster.grpo import HELD_OUT_PLANS_FILE
    from orchrm_dagster.grpo.checkpoints import round_name

    frame = pl.read_parquet(storage / "work" / "grpo" / round_name(round_number) / HELD_OUT_PLANS_FILE)
    chance = truth_chances(truth, {})
    return {side: sum(chance(p) for p in plans) / len(plans)
            for side in ("before", "after")
            if (plans := frame.filter((pl.col("side") == side) & pl.col("failure").is_null())["plan"].to_list())}


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
            "accuracy after", "difference", "predicted gain", "failed plans", "verdict", "hacking?", "reward tokens", "rollout tokens", "total tokens"]
    index = [headers.index(h) for h in keep]
    lines = ["| " + " | ".join(keep) + " | start | seconds |", "|" + "---|" * (len(keep) + 2)]
    for row, shown in zip(rows, table):
        lines.append("| " + " | ".join(str(shown[i]) for i in index)
                     + f" | {row['start_policy']} | {row['seconds']:.0f} |")
    return "\n".join(lines)


def loop_spending(folder: Path, rows: list[dict]) -> dict[str, int]:
    """Every token a loop spent, by where (`LoopState.spending`, what its token_budget counts), and its rounds'
    reward-side tokens (reward models, panels or judges read; plans executed to reward)."""
    from orchrm_dagster.loop import read_state
    from orchrm_dagster.loop.settings import LoopSettings
    from orchrm_dagster.storage import StorageRoot

    defaults = LoopSettings()
    spending = read_state(StorageRoot(str(folder / "storage"))).spending(defaults.rollout_seed, defaults.rollout_base)
    reward_side = sum((r["reward_tokens"] or 0) + (r["rollout_tokens"] or 0) for r in rows)
    return {"reward side": reward_side, "rounds": spending.rounds, "rollouts": spending.rollouts,
            "retraining": spending.retraining, "total": spending.total}


def champion_tokens(prepared: Path) -> dict[str, int]:
    """What the first champion came from: the tokens of the runs in the prepared root (the generated history's are the
    generator's random counts: SIMULATED) and its training's."""
    import polars as pl

    from orchrm_dagster.rm import list_versions, synced_checkpoints_dir
    from orchrm_dagster.storage import StorageRoot, scan_table

    root = StorageRoot(str(prepared / "storage"))
    runs = scan_table(root, "runs").select((pl.col("orchestrator_tokens").fill_null(0)
                                            + pl.col("subagent_tokens").fill_null(0)).sum()).collect().item()
    trained = sum(int(v.get("training_tokens") or 0) for v in list_versions(str(synced_checkpoints_dir(root))))
    return {"history runs (SIMULATED counts)": int(runs or 0), "first reward-model training": trained}


def token_ratio(results: dict[str, list[dict]], spent: dict[str, dict[str, int]], champion: dict[str, int]) -> str:
    """Every token each loop spent, by kind, and what it cost to reward its rounds: its rounds' reward side (reward
    models read, plans executed to reward) plus what kept its reward model current (rollouts, retraining). The rounds'
    generation and training and the gate's held-out measures are the same work whatever rewards them: shown apart.
    Ratios are against the execution-only loop (else the trajectory loop); the break-even lines project the measured
    per-round costs (SIMULATED charges)."""
    from orchrm_dagster.grpo.plots import accuracy_text

    lines = ["| loop | reward side | rollouts | reward-model retraining | reward cost | common: generation + "
             "training | common: held-out measures | loop total | last held-out accuracy |",
             "|---|---|---|---|---|---|---|---|---|"]
    costs = {}
    for loop, rows in results.items():
        t = spent[loop]
        costs[loop] = t["reward side"] + t["rollouts"] + t["retraining"]
        common = sum((r["generation_tokens"] or 0) + (r["training_tokens"] or 0) for r in rows)
        held_out = sum(r["heldout_tokens"] or 0 for r in rows)
        lines.append(f"| {loop} | {t['reward side']:,} | {t['rollouts']:,} | {t['retraining']:,} | {costs[loop]:,} | "
                     f"{common:,} | {held_out:,} | {t['total']:,} | "
                     f"{accuracy_text(rows[-1], 'after') if rows else 'not measured'} |")
    lines.append("\nthe champion the reward-model loops start from: "
                 + ", ".join(f"{k} {v:,}" for k, v in champion.items()))
    baseline = next((b for b in ("execution-only", "trajectory") if b in spent), None)
    if "orchrm" in spent and baseline and spent["orchrm"]["reward side"]:
        rm, executed = spent["orchrm"], spent[baseline]["reward side"]
        rounds = max(len(results["orchrm"]), 1)
        per_round = (executed - costs["orchrm"]) / rounds
        lines += ["",
                  f"- {baseline} / orchrm, the rounds' reward side alone (the paper's 10-46x counts this): "
                  f"{executed / rm['reward side']:.1f}x",
                  f"- orchrm's reward cost (reward side, rollouts, retraining) / {baseline}'s: "
                  f"{costs['orchrm'] / max(executed, 1):.2f} (target: at most 1/3)",
                  f"- per round, orchrm saves {per_round:,.0f} tokens of reward cost against {baseline} "
                  + (f"(projected, SIMULATED charges: its first reward-model training's "
                     f"{champion['first reward-model training']:,} tokens are paid back after "
                     f"{champion['first reward-model training'] / per_round:.1f} rounds; counting the history's "
                     f"runs too, which a team's production paid for anyway, after "
                     f"{sum(champion.values()) / per_round:.0f})" if per_round > 0 else
                     "(it saves none: no break-even at these plans; more agents per plan raise what executing "
                     "costs, not what scoring costs)")]
    final = {loop: (rows[-1]["heldout_accuracy_low_after"], rows[-1]["heldout_accuracy_high_after"])
             for loop, rows in results.items() if rows}
    if "orchrm" in final and baseline in final and None not in (*final["orchrm"], *final[baseline]):
        (low_a, high_a), (low_b, high_b) = final["orchrm"], final[baseline]
        lines.append(f"- the last accuracies' intervals (orchrm, {baseline}) "
                     + ("overlap: equal accuracy within what the held-out sample can tell"
                        if low_a <= high_b and low_b <= high_a else "do not overlap"))
    return "\n".join(lines)

if __name__ == "__main__":
    main()
