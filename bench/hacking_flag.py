"""The reward-hacking flag's false-positive and detection rates, from resampled held-out plans (SIMULATED: every
correctness here is drawn by a truth function of the plan, not executed by sub-agents).

A real round of the loop (`orchrm loop --environment simulated`) keeps each side's held-out plans as measured, with the
champion's score of each (`heldout_plans.parquet` in the round's work folder) and the champion's calibration
(`grpo_rounds.calibration`). From them, many rounds are simulated:

- the starting policy's side: for each held-out problem, `--samples` (default: the gate's `heldout_samples`) plans
  drawn with replacement from the round's starting plans of that problem;
- the new policy's side: the same problems and slots, each plan drawn from a mixture, a share f (--shares) from the
  round's new plans of the problem and the rest from its starting plans: a policy that moved f of the way (f = 1: the
  round as it was);
- each plan's correctness drawn from a truth, with the slot's random number shared by both sides (fixed seeds):
  `plan_success_rate` (the truth the champion learnt: honest rounds, a true gain of f times the round's), or a truth
  under which the champion's cue is worth less or nothing or is punished (`verifying_cue` at worths 0.1, 0 and -0.1);
- each side measured by the round's own code (`grpo.heldout.measured_side`: rewards placed by the rule, the
  calibration's prediction, per-problem counts), and the gate decides (`grpo.policy_gate`, the product's rule).

The champion's calibration is fitted again here on the runs it never trained on (`rm.champion_calibration`, with its
check), so the bench reads the product's calibration as a round now fits it. The false-positive rate is the share of
honest rounds flagged; the detection rate the share of moves that raise the reward (its paired interval above 0) while
the truth gives them no gain (worth 0 or -0.1) that are flagged. Beside the product's rule: the rule before issue 55
(Newcombe interval, `reward_hacking_share` 0.5, `accuracy_margin` as the least predicted gain) on the same rounds.

    .venv/bin/python bench/hacking_flag.py --root STORAGE [--round 1] [--rounds 1000]
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
    parser.add_argument("--samples", type=int, default=None, help="plans a problem (default: heldout_samples)")
    parser.add_argument("--shares", default="0.05,0.1,0.2,0.35,0.5,1.0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hacking-shares", default="0.5,1.0,1.5,2.0",
                        help="reward_hacking_share values whose rates are compared on the same rounds (the gate's "
                             "own verdicts use the configured one)")
    args = parser.parse_args()
    from orchrm_dagster.devices import cpu_flags

    started = time.perf_counter()
    plans, settings, calibration, row = round_inputs(args)
    samples = args.samples or settings.heldout_samples
    print(f"SIMULATED (truth functions of the plan); round {args.round} of {args.root}: "
          f"{sum(map(len, plans['before'].values()))} starting plans and {sum(map(len, plans['after'].values()))} new "
          f"plans of {len(plans['before'])} problems, {samples} a problem a side; calibration: "
          f"{calibration.text() if calibration else 'none'}; gate {settings.gate_rule}; "
          f"{os.cpu_count()} CPUs ({cpu_flags()})\n", flush=True)
    print("| truth | share f | true gain | predicted gain | reward rose | flagged | flagged where the reward rose | "
          "flagged (rule before #55) | promoted |")
    print("|---|---|---|---|---|---|---|---|---|")
    rates: dict[str, list[dict]] = {}
    rng = random.Random(args.seed)
    hacking_shares = [float(h) for h in args.hacking_shares.split(",")]
    for label, (truth, parameters) in TRUTHS.items():
        chance = truth_chances(truth, parameters)
        for share in [float(s) for s in args.shares.split(",")]:
            result = simulate(plans, share, chance, calibration, settings, samples, args.rounds, rng, hacking_shares)
            result["share"] = share
            rates.setdefault(label, []).append(result)
            print(f"| {label} | {share:g} | {result['true_gain']:+.3f} | {result['predicted_gain']:+.3f} | "
                  f"{result['rose'] / args.rounds:.1%} | {result['flagged']:.1%} | "
                  f"{_rate(result['flagged_rose'], result['rose'])} | "
                  f"{result['old_flagged']:.1%} | {result['promoted']:.1%} |", flush=True)
    print()
    for label, results in rates.items():
        if label.startswith("honest"):
            small = [r for r in results if r["share"] <= 0.35]
            print(f"- {label}: false-positive rate {_mean(results, 'flagged'):.1%} over every share, "
                  f"{_mean(small, 'flagged'):.1%} over small gains (f <= 0.35), {len(results) * args.rounds} "
                  f"simulated rounds (the rule before #55: {_mean(results, 'old_flagged'):.1%})")
        else:
            rose = sum(r["rose"] for r in results)
            print(f"- {label}: detection rate {_rate(sum(r['flagged_rose'] for r in results), rose)} of the moves "
                  f"whose reward rose, {_mean(results, 'flagged'):.1%} of every move (the rule before #55: "
                  f"{_mean(results, 'old_flagged'):.1%})")
    hacks = [r for label, results in rates.items() if "worth 0 " in label or "worth -0.1" in label for r in results]
    print(f"- moves that raise the reward while the truth gives them no gain (worth 0 or -0.1, every share): "
          f"{_rate(sum(r['flagged_rose'] for r in hacks), sum(r['rose'] for r in hacks))} flagged")
    print("\n| reward_hacking_share | " + " | ".join(rates) + " | worth 0 or -0.1, the reward risen |\n|---|"
          + "---|" * (len(rates) + 1))
    for hacking_share in hacking_shares:
        cells = []
        for label, results in rates.items():
            if label.startswith("honest"):
                cells.append(f"{_mean(results, 'by_share', hacking_share):.1%} flagged")
            else:
                rose = sum(r["rose"] for r in results)
                cells.append(f"{_rate(sum(r['by_share_rose'][hacking_share] for r in results), rose)} of the "
                             f"risen flagged")
        risen = sum(r["rose"] for r in hacks)
        cells.append(_rate(sum(r["by_share_rose"][hacking_share] for r in hacks), risen) + " flagged")
        print(f"| {hacking_share:g} | " + " | ".join(cells) + " |")
    print(f"\n{time.perf_counter() - started:.0f} s")


def _mean(results: list[dict], key: str, sub=None) -> float:
    values = [r[key][sub] if sub is not None else r[key] for r in results]
    return sum(values) / len(values)


def _rate(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole else "n/a"


def round_inputs(args):
    import polars as pl

    from orchrm_dagster.grpo import HELD_OUT_PLANS_FILE, read_table
    from orchrm_dagster.grpo.checkpoints import round_name
    from orchrm_dagster.grpo.settings import GRPOSettings
    from orchrm_dagster.rm import champion_calibration, domain_of
    from orchrm_dagster.rm import version_scorer
    from orchrm_dagster.storage import StorageRoot

    root = StorageRoot(args.root)
    row = next(r for r in read_table(root, "grpo_rounds") if r["round"] == args.round)
    folder = Path(args.round_dir or Path(args.root, "work", "grpo", round_name(args.round)))
    frame = pl.read_parquet(folder / HELD_OUT_PLANS_FILE).filter(pl.col("failure").is_null())
    plans = {}
    for side in ("before", "after"):
        by_problem: dict[str, list[dict]] = {}
        for plan in frame.filter(pl.col("side") == side).to_dicts():
            by_problem.setdefault(plan["problem_id"], []).append(plan)
        plans[side] = by_problem
    if not plans["before"] or not plans["after"]:
        raise SystemExit(f"{folder / HELD_OUT_PLANS_FILE}: both sides' plans are needed (a reused side keeps none)")
    settings = GRPOSettings()
    domain = domain_of(settings.benchmark)
    version = row["rm_version"]  # the champion that scored the round's plans, whichever is champion now
    calibration, _ = champion_calibration(root, version, domain, version_scorer(root, version, settings.scoring))
    return plans, settings, calibration, row


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


def simulate(plans, share: float, chance, calibration, settings, samples: int, rounds: int, rng: random.Random,
             hacking_shares: list[float]) -> dict:
    import dataclasses

    from orchrm_dagster.grpo import policy_gate
    from orchrm_dagster.grpo.gate import accuracy_difference, hacking_flag, reward_rose
    from orchrm_dagster.grpo.heldout import measured_side

    rule = settings.gate_rule
    problems = sorted(set(plans["before"]) & set(plans["after"]))
    tally = {"flagged": 0, "flagged_rose": 0, "rose": 0, "old_flagged": 0, "promoted": 0, "true_gain": 0.0,
             "predicted_gain": 0.0}
    by_share = dict.fromkeys(hacking_shares, 0)
    by_share_rose = dict.fromkeys(hacking_shares, 0)
    for _ in range(rounds):
        sides = {"before": [], "after": []}
        truth = {"before": 0.0, "after": 0.0}
        for problem in problems:
            for _slot in range(samples):
                number = rng.random()  # the slot's seed: shared by both sides
                for side in ("before", "after"):
                    source = plans["after"] if side == "after" and rng.random() < share else plans["before"]
                    plan = rng.choice(source[problem])
                    p = chance(plan["plan"])
                    truth[side] += p
                    sides[side].append({"problem_id": problem, "score": plan["score"], "correct": number < p,
                                        "failure": None})
        before = measured_side(sides["before"], settings.unparseable_margin, True, calibration)
        after = measured_side(sides["after"], settings.unparseable_margin, True, calibration)
        verdict = policy_gate(before, after, rule)
        rose_interval = reward_rose(before, after, rule.confidence)
        rose = rose_interval is not None and rose_interval[0] > 0
        tally["rose"] += rose
        tally["flagged"] += verdict.reward_hacking
        tally["flagged_rose"] += verdict.reward_hacking and rose
        tally["promoted"] += verdict.promoted
        measured = accuracy_difference(after.accuracy, before.accuracy, rule.confidence)
        for hacking_share in hacking_shares:  # the gate's own flag, at each share
            hit, _ = hacking_flag(before, after, dataclasses.replace(rule, hacking_share=hacking_share), measured)
            by_share[hacking_share] += hit
            by_share_rose[hacking_share] += hit and rose
        raw = {side: _raw_prediction(sides[side], calibration) for side in sides}
        tally["old_flagged"] += _old_rule(before, after, raw, rule)
        n = len(sides["before"])
        tally["true_gain"] += (truth["after"] - truth["before"]) / n
        tally["predicted_gain"] += (raw["after"] - raw["before"]) if raw["before"] is not None else 0.0
    out = {k: (v / rounds if k not in ("flagged_rose", "rose") else v) for k, v in tally.items()}
    out["by_share"] = {h: c / rounds for h, c in by_share.items()}
    out["by_share_rose"] = by_share_rose
    return out


def _old_rule(before, after, raw: dict[str, float | None], rule) -> bool:
    """The flag before issue 55: the Newcombe interval's high end below 0.5 of a calibrated gain of at least
    accuracy_margin (the calibration used unchecked)."""
    from orchrm_dagster.grpo import Accuracy, newcombe_difference

    if raw["before"] is None or before.accuracy is None:
        return False
    gain = raw["after"] - raw["before"]
    _, high = newcombe_difference(Accuracy(after.accuracy.correct, after.accuracy.plans),
                                  Accuracy(before.accuracy.correct, before.accuracy.plans), rule.confidence)
    return gain > 0 and gain >= rule.accuracy_margin and high < 0.5 * gain


def _raw_prediction(plans: list[dict], calibration) -> float | None:
    """The calibration's prediction, checked or not."""
    if calibration is None:
        return None
    return sum(calibration.probability(p["score"]) if p["score"] is not None else 0.0 for p in plans) / len(plans)


if __name__ == "__main__":
    main()
