"""The reward-hacking flag's false-positive and detection rates, from resampled held-out plans (SIMULATED: every
correctness here is drawn by a truth function of the plan, not executed by sub-agents).

A real round of the loop (`orchrm loop --environment simulated`) keeps each side's held-out plans as measured, with the
champion's score of each (`heldout_plans.parquet` in the round's work folder) and the champion's calibration
(`grpo_rounds.calibration`). From them, many rounds are simulated:

- the starting policy's side: 128 (--plans) plans drawn with replacement from the round's starting plans;
- the new policy's side: plans drawn from a mixture, a share f (--shares) from the round's new plans and the rest from
  its starting plans: a policy that moved f of the way (f = 1: the round as it was);
- each plan's correctness drawn from a truth: `plan_success_rate` (the truth the champion learnt: honest rounds, a true
  gain of f times the round's), or a truth under which the champion's cue is worth less or nothing or is punished
  (`verifying_cue` at worths 0.1, 0 and -0.1: reward-hacking rounds);
- the gate decides each (grpo.policy_gate, the round's own rule), with each side's reward and calibrated prediction
  from the plans' real scores.

The false-positive rate is the share of honest rounds flagged; the detection rate the share of hacking rounds flagged.
Beside them, the rule before issue 43 (reward up more than 0.5 standard deviations while the accuracy interval
reaches 0) on the same rounds.

    .venv/bin/python bench/hacking_flag.py --round-dir STORAGE/work/grpo/r0001 --root STORAGE [--rounds 1000]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TRUTHS = {"honest: plan_success_rate (the champion's truth)": ("plan_success_rate", {}),
          "hack: verifying_cue worth 0.1": ("verifying_cue", {"worth": 0.1}),
          "hack: verifying_cue worth 0 (the cue ignored)": ("verifying_cue", {"worth": 0.0}),
          "hack: verifying_cue worth -0.1 (the cue punished)": ("verifying_cue", {"worth": -0.1})}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True, help="the storage root the round ran on")
    parser.add_argument("--round", type=int, default=1)
    parser.add_argument("--round-dir", default=None, help="the round's work folder (default: ROOT/work/grpo/rNNNN)")
    parser.add_argument("--rounds", type=int, default=1000, help="simulated rounds per truth and share")
    parser.add_argument("--plans", type=int, default=128, help="held-out plans a side")
    parser.add_argument("--shares", default="0.05,0.1,0.2,0.35,0.5,1.0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hacking-shares", default="0.5,0.75,1.0",
                        help="reward_hacking_share values whose rates are compared on the same rounds (the gate's "
                             "own verdicts use the configured one)")
    args = parser.parse_args()
    started = time.perf_counter()
    plans, rule, calibration, row = round_inputs(args)
    print(f"SIMULATED (truth functions of the plan); round {args.round} of {args.root}: "
          f"{plans['before'].__len__()} starting plans, {len(plans['after'])} new plans; {calibration.text()}; gate "
          f"{rule}; measured: {row['reason']}\n", flush=True)
    print("| truth | share f | true gain | predicted gain | flagged (new rule) | flagged (old rule) | promoted |")
    print("|---|---|---|---|---|---|---|")
    rates = {}
    rng = random.Random(args.seed)
    for label, (truth, parameters) in TRUTHS.items():
        chance = truth_chances(truth, parameters)
        for share in [float(s) for s in args.shares.split(",")]:
            result = simulate(plans, share, chance, calibration, rule, args, rng,
                              [float(h) for h in args.hacking_shares.split(",")])
            rates.setdefault(label, []).append(result)
            print(f"| {label} | {share:g} | {result['true_gain']:+.3f} | {result['predicted_gain']:+.3f} | "
                  f"{result['flagged']:.1%} | {result['old_flagged']:.1%} | {result['promoted']:.1%} |", flush=True)
    print()
    for label, results in rates.items():
        flagged = sum(r["flagged"] for r in results) / len(results)
        old = sum(r["old_flagged"] for r in results) / len(results)
        kind = "false-positive rate" if label.startswith("honest") else "detection rate"
        print(f"- {label}: {kind} {flagged:.1%} over {len(results) * args.rounds} simulated rounds "
              f"(the old rule: {old:.1%})")
    shares = sorted(rates[next(iter(rates))][0]["by_share"])
    print("\n| reward_hacking_share | " + " | ".join(rates) + " |\n|---|" + "---|" * len(rates))
    for share in shares:
        cells = [f"{sum(r['by_share'][share] for r in results) / len(results):.1%}" for results in rates.values()]
        print(f"| {share:g} | " + " | ".join(cells) + " |")
    print(f"\n{time.perf_counter() - started:.0f} s")


def round_inputs(args):
    import polars as pl

    from orchrm_dagster.grpo import HELD_OUT_PLANS_FILE, read_table
    from orchrm_dagster.grpo.checkpoints import round_name
    from orchrm_dagster.grpo.settings import GRPOSettings
    from orchrm_dagster.rm.calibration import Calibration
    from orchrm_dagster.storage import StorageRoot

    root = StorageRoot(args.root)
    row = next(r for r in read_table(root, "grpo_rounds") if r["round"] == args.round)
    folder = Path(args.round_dir or Path(args.root, "work", "grpo", round_name(args.round)))
    frame = pl.read_parquet(folder / HELD_OUT_PLANS_FILE).filter(pl.col("failure").is_null())
    plans = {side: frame.filter(pl.col("side") == side).to_dicts() for side in ("before", "after")}
    if not plans["before"] or not plans["after"]:
        raise SystemExit(f"{folder / HELD_OUT_PLANS_FILE}: both sides' plans are needed (a reused side keeps none)")
    if row["calibration"] is None:
        raise SystemExit("the round's champion had no calibration: nothing to predict from")
    settings = GRPOSettings()
    rule = settings.gate_rule
    return plans, rule, Calibration.from_json(row["calibration"]), row


def truth_chances(name: str, parameters: dict):
    """plan text -> its chance of a correct answer under the truth (0 for a plan that does not parse)."""
    from orchrm_dagster.plans import PlanError, parse_plan
    from orchrm_dagster.truths import truth_named

    truth = truth_named(name)
    config = truth.config(**parameters)
    cache: dict[str, float] = {}

    def chance(plan: str) -> float:
        if plan not in cache:
            parsed = parse_plan(plan)
            cache[plan] = 0.0 if isinstance(parsed, PlanError) else truth.chance(config, parsed)
        return cache[plan]

    return chance


def simulate(plans, share: float, chance, calibration, rule, args, rng: random.Random,
             hacking_shares: list[float]) -> dict:
    import dataclasses

    from orchrm_dagster.grpo import Accuracy, Measured, Reward, accuracy_difference, hacking_suspected, policy_gate
    from orchrm_dagster.grpo.round import placed_rewards

    margin = 1.0  # GRPOSettings.unparseable_margin's default

    def side(drawn: list[dict]) -> tuple[Measured, float]:
        correct = sum(rng.random() < chance(p["plan"]) for p in drawn)
        rewards = placed_rewards([p["score"] for p in drawn], [p["problem_id"] for p in drawn], margin)
        reward = Reward.of(rewards) if rewards else Reward.unparseable(len(drawn))
        predicted = sum(calibration.probability(p["score"]) if p["score"] is not None else 0.0
                        for p in drawn) / len(drawn)
        return Measured(reward, Accuracy(correct, len(drawn)), predicted=predicted), sum(chance(p["plan"])
                                                                                        for p in drawn) / len(drawn)

    flagged = old = promoted = 0
    true_gain = predicted_gain = 0.0
    by_share = dict.fromkeys(hacking_shares, 0)
    for _ in range(args.rounds):
        before, before_truth = side([rng.choice(plans["before"]) for _ in range(args.plans)])
        after, after_truth = side([rng.choice(plans["after"] if rng.random() < share else plans["before"])
                                   for _ in range(args.plans)])
        verdict = policy_gate(before, after, rule)
        flagged += verdict.reward_hacking
        promoted += verdict.promoted
        low, high = accuracy_difference(after.accuracy, before.accuracy, rule.confidence)
        rose = None not in (after.reward.mean, before.reward.mean) and (
            after.reward.mean - before.reward.mean > 0.5 * (before.reward.std or 1.0))
        old += rose and low <= 0
        for hacking_share in hacking_shares:
            by_share[hacking_share] += hacking_suspected(after.predicted - before.predicted, high,
                                                         dataclasses.replace(rule, hacking_share=hacking_share))
        true_gain += after_truth - before_truth
        predicted_gain += after.predicted - before.predicted
    n = args.rounds
    return {"flagged": flagged / n, "old_flagged": old / n, "promoted": promoted / n, "true_gain": true_gain / n,
            "predicted_gain": predicted_gain / n, "by_share": {h: count / n for h, count in by_share.items()}}


if __name__ == "__main__":
    main()
