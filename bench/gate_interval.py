"""The policy gate's interval of the held-out accuracy difference, measured by simulation (SIMULATED: every correctness
here is drawn from a chance per problem, nothing is executed).

A round's gate measures both policies on the same held-out problems, the same number of plans a problem, with the
same seeds. Each simulated round draws its problems' chances of a correct plan from a difficulty distribution (the
problems are a sample of the benchmark's), moves them by an effect, and draws each plan's correctness:

- difficulty: Beta(0.5, 0.5) (U-shaped: most problems nearly always or nearly never solved, as a policy's per-problem
  pass rates on a benchmark are), or Beta(1, 1) (--difficulty);
- draws: `independent` (fresh random numbers on each side), or `shared` (a plan's random number is the same on both
  sides, as fixed seeds make an unchanged plan's draw);
- effects: `null` (no problem's chance moves), `uniform` (+0.10 on every problem, clipped to [0, 1]),
  `worthless` (each problem moves by N(0, 0.15), clipped to [0, 1]: a move worth about nothing that still
  changes plans), `varying` (N(+0.05, 0.15) by problem).

The truth is the expected difference over the difficulty distribution (the problems' population, 10^6 draws). Each
cell prints the coverage of a nominal 95% interval and its mean width, for the gate's interval
(`grpo.gate.paired_difference`: Student's t over per-problem differences) and for the Newcombe interval of two
independent proportions it replaced. Then the designs the gate could use (problems x plans a problem) side by side:
the interval's width and the verdicts of the gate's rule (margin 0.05) on a worthless move and on a 10-point fall.

    .venv/bin/python bench/gate_interval.py [--rounds 2000] [--difficulty 0.5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DESIGNS = ((32, 4), (32, 3), (16, 4), (64, 4))  # (problems, plans a problem): the loop's sizes, 32 x 3 the default
CANDIDATES = ((32, 4), (32, 3), (32, 2), (24, 4), (24, 3), (16, 4), (48, 2))
EFFECTS = ("null", "uniform", "worthless", "varying")
MARGIN = 0.05  # GRPOSettings.accuracy_margin's default


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000, help="simulated rounds per cell")
    parser.add_argument("--difficulty", type=float, default=0.5, help="Beta(a, a) of the problems' chances")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loops", type=int, default=2000, help="simulated 10-round loops per ratchet case")
    parser.add_argument("--ratchet-samples", type=int, default=3, help="plans a problem in the ratchet's loops")
    parser.add_argument("--parts", default="coverage,designs,ratchet")
    args = parser.parse_args()
    import numpy as np

    from orchrm_dagster.devices import cpu_flags

    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    print(f"SIMULATED (correctness drawn, nothing executed); {args.rounds} rounds a cell; difficulty "
          f"Beta({args.difficulty:g}, {args.difficulty:g}); nominal {args.confidence:.0%}; {os.cpu_count()} CPUs "
          f"({cpu_flags()})\n")
    parts = args.parts.split(",")
    if "coverage" in parts:
        coverage(rng, args)
    if "designs" in parts:
        designs(rng, args)
    if "ratchet" in parts:
        ratchet(rng, args)
    print(f"\n{time.perf_counter() - started:.0f} s")


def coverage(rng, args) -> None:
    print("| problems x plans | draws | effect | truth | paired: coverage | paired: width | Newcombe: coverage "
          "| Newcombe: width |")
    print("|---|---|---|---|---|---|---|---|")
    for problems, samples in DESIGNS:
        for draws in ("independent", "shared"):
            for effect in EFFECTS:
                cell = simulate(rng, problems, samples, draws, effect, args)
                degenerate = " (identical sides: exact by construction)" if draws == "shared" and effect == "null" \
                    else ""
                print(f"| {problems} x {samples} | {draws} | {effect}{degenerate} | {cell['truth']:+.3f} | "
                      f"{cell['paired_coverage']:.1%} | {cell['paired_width']:.3f} | {cell['newcombe_coverage']:.1%} | "
                      f"{cell['newcombe_width']:.3f} |", flush=True)


def designs(rng, args) -> None:
    print("\nDesigns, the gate's rule at margin 0.05 (promoted: lower bound above -0.05; rejected: upper bound below "
          "-0.05; else undecided). Today's gate: Newcombe at 32 x 4.\n")
    print("| problems x plans | plans a side | interval | draws | width (worthless move) | worthless move: promoted "
          "| worthless move: undecided | 10-point fall: rejected | 10-point fall: promoted |")
    print("|---|---|---|---|---|---|---|---|---|")
    for problems, samples in CANDIDATES:
        for draws in ("independent", "shared"):
            worthless = simulate(rng, problems, samples, draws, "worthless", args)
            fall = simulate(rng, problems, samples, draws, "fall", args)
            methods = ("paired", "newcombe") if (problems, samples) == (32, 4) else ("paired",)
            for method in methods:
                print(f"| {problems} x {samples} | {problems * samples} | {method} | {draws} | "
                      f"{worthless[method + '_width']:.3f} | {worthless[method + '_promoted']:.1%} | "
                      f"{worthless[method + '_undecided']:.1%} | {fall[method + '_rejected']:.1%} | "
                      f"{fall[method + '_promoted']:.1%} |", flush=True)


def ratchet(rng, args) -> None:
    """10-round loops whose every move is worth nothing (or a little less), each round's checkpoint judged by the
    product's gate (`grpo.policy_gate`) against its start only (before issue 55) or also against the best accuracy
    in use so far (now): where the in-use policy's true accuracy ends, against the base's."""
    import numpy as np

    from orchrm_dagster.grpo.gate import Accuracy, GateRule, Measured, Reference, Reward, policy_gate

    problems, loops = 32, args.loops
    print(f"\nThe ratchet: {loops} loops of 10 rounds, {problems} problems' held-out plans, the same seeds for every "
          f"policy (shared random numbers), each move's per-problem effect N(mean, spread) clipped to [0, 1]; "
          f"margin {MARGIN}.\n")
    print("| move's effect by problem | gate | moves promoted "
          "| in-use policy within one margin of the base after 10 rounds "
          "| mean true change of the in-use policy |")
    print("|---|---|---|---|---|")
    rule = GateRule(accuracy_margin=MARGIN, confidence=args.confidence)
    for mean, spread in ((0.0, 0.15), (-0.025, 0.15), (-0.03, 0.0), (-0.045, 0.0)):
        for method, samples, against_best in (("newcombe", 4, False), ("paired", args.ratchet_samples, False),
                                              ("paired", args.ratchet_samples, True)):
            promoted = within = 0
            change = 0.0
            for _ in range(loops):
                numbers = rng.random((problems, samples))  # fixed seeds: every policy meets the same draws
                base = rng.beta(args.difficulty, args.difficulty, size=problems)

                def measure(chances):
                    counts = (numbers < chances[:, None]).sum(axis=1)
                    accuracy = Accuracy.of_problems(tuple((str(i), int(c), samples) for i, c in enumerate(counts)))
                    if method == "newcombe":  # without its problems' counts: the interval before issue 55
                        accuracy = Accuracy(accuracy.correct, accuracy.plans)
                    return Measured(Reward(0.0, 0.0, problems * samples), accuracy)

                in_use, in_use_measure, current = base, measure(base), "base"
                best = ("base", in_use_measure.accuracy)
                for round_number in range(10):
                    moved = np.clip(in_use + rng.normal(mean, spread, size=problems), 0, 1)
                    after = measure(moved)
                    reference = Reference(*best) if against_best and best[0] != current else None
                    if policy_gate(in_use_measure, after, rule, reference).promoted:
                        promoted += 1
                        in_use, in_use_measure, current = moved, after, f"r{round_number}"
                        if after.accuracy.value > best[1].value:
                            best = (current, after.accuracy)
                true_change = float(in_use.mean() - base.mean())
                change += true_change
                within += true_change >= -MARGIN
            gate = (f"{method}, {problems} x {samples}, "
                    + ("against the start and the best in use" if against_best else "against the start only"))
            print(f"| N({mean:+.3f}, {spread:g}) | {gate} | "
                  f"{promoted / (loops * 10):.1%} | {within / loops:.1%} | {change / loops:+.3f} |", flush=True)


def effects(rng, chances, effect: str):
    import numpy as np

    if effect == "null":
        return chances
    if effect == "uniform":
        return np.clip(chances + 0.10, 0, 1)
    if effect == "fall":
        return np.clip(chances - 0.10, 0, 1)
    mean = 0.05 if effect == "varying" else 0.0
    return np.clip(chances + rng.normal(mean, 0.15, size=chances.shape), 0, 1)


def truth(rng, effect: str, args) -> float:

    chances = rng.beta(args.difficulty, args.difficulty, size=(1000, 1000))
    return float((effects(rng, chances, effect) - chances).mean())


def simulate(rng, problems: int, samples: int, draws: str, effect: str, args) -> dict:

    from orchrm_dagster.grpo.gate import Accuracy, newcombe_difference, paired_difference

    expected = truth(rng, effect, args)
    tallies = {f"{m}_{k}": 0.0 for m in ("paired", "newcombe")
               for k in ("coverage", "width", "promoted", "undecided", "rejected")}
    for _ in range(args.rounds):
        before_chances = rng.beta(args.difficulty, args.difficulty, size=problems)
        after_chances = effects(rng, before_chances, effect)
        numbers = rng.random((problems, samples))
        after_numbers = numbers if draws == "shared" else rng.random((problems, samples))
        before = (numbers < before_chances[:, None]).sum(axis=1)
        after = (after_numbers < after_chances[:, None]).sum(axis=1)
        before_counts = tuple((str(i), int(c), samples) for i, c in enumerate(before))
        after_counts = tuple((str(i), int(c), samples) for i, c in enumerate(after))
        intervals = {"paired": paired_difference(after_counts, before_counts, args.confidence),
                     "newcombe": newcombe_difference(Accuracy.of_problems(after_counts),
                                                     Accuracy.of_problems(before_counts), args.confidence)}
        for method, (low, high) in intervals.items():
            tallies[f"{method}_coverage"] += low <= expected <= high
            tallies[f"{method}_width"] += high - low
            tallies[f"{method}_promoted"] += low > -MARGIN
            tallies[f"{method}_rejected"] += high < -MARGIN
            tallies[f"{method}_undecided"] += low <= -MARGIN <= high
    return {"truth": expected} | {k: v / args.rounds for k, v in tallies.items()}


if __name__ == "__main__":
    main()
