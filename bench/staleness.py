"""The staleness rule's error rates (SIMULATED: pair outcomes drawn from chances, no model scores anything).

A champion's live accuracy (`rm.live.LiveAccuracy`: pairs it never trained on, problems as clusters) is held against
its validation accuracy (itself measured on `--validation-pairs` pairs) minus `staleness_margin`: the champion is
stale when the live accuracy's one-sided upper bound lies below it (`rm.live.staleness`, the rule the loop runs).
For each source of live pairs (a round's held-out plans: 32 problems x 3 plans, pairs within a problem; a batch's
pairs: up to 4 per problem) this prints

- the coverage of the live accuracy's 95% interval (problems vary: each problem's chance drawn from a Beta around
  the champion's accuracy),
- how often a champion as good as on its validation pairs is called stale (false alarms), by margin,
- how often one that lost 0.1, 0.2 or 0.3 of accuracy is (detections), by margin.

    .venv/bin/python bench/staleness.py [--sims 2000] [--accuracy 0.8] [--validation-pairs 150]
"""

from __future__ import annotations

import argparse

import numpy as np

from orchrm_dagster.rm.live import LiveAccuracy, StalenessRule, staleness

MARGINS = (0.0, 0.02, 0.05, 0.1)
DROPS = (0.1, 0.2, 0.3)


def held_out_pairs(rng, accuracy: float, base_rate: float = 0.5) -> tuple:
    """A round's held-out plans: 32 problems x 3 plans, each plan correct with the problem's own odds; each correct
    plan over each incorrect one of its problem is ranked right with the problem's chance (pairs of one problem share
    its plans: correlated)."""
    cells = []
    for k in range(32):
        correct = rng.binomial(3, rng.beta(2 * base_rate, 2 * (1 - base_rate)))
        pairs = correct * (3 - correct)
        if pairs:
            chance = rng.beta(8 * accuracy, 8 * (1 - accuracy))
            cells.append((f"p{k}", int(rng.binomial(pairs, chance)), pairs))
    return tuple(cells)


def batch_pairs(rng, accuracy: float) -> tuple:
    """A batch's new pairs: 40 problems, 1 to 4 pairs each."""
    cells = []
    for k in range(40):
        pairs = int(rng.integers(1, 5))
        chance = rng.beta(8 * accuracy, 8 * (1 - accuracy))
        cells.append((f"p{k}", int(rng.binomial(pairs, chance)), pairs))
    return tuple(cells)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sims", type=int, default=2000)
    parser.add_argument("--accuracy", type=float, default=0.8, help="the champion's true accuracy")
    parser.add_argument("--validation-pairs", type=int, default=150)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"SIMULATED; {vars(args)}")
    for name, draw in (("held-out plans (32 x 3)", held_out_pairs), ("a batch's pairs (40 problems)", batch_pairs)):
        covered, sizes = 0, []
        alarms = {(m, d): 0 for m in MARGINS for d in (0.0, *DROPS)}
        for _ in range(args.sims):
            validation = rng.binomial(args.validation_pairs, args.accuracy) / args.validation_pairs
            for drop in (0.0, *DROPS):
                truth = args.accuracy - drop
                # the pooled accuracy's expectation under Beta(8a, 8(1-a)) chances is a itself
                cells = draw(rng, truth)
                live = LiveAccuracy("math", 1, "sim", cells, validation)
                if drop == 0.0 and live.pairs:
                    low, high = live.interval()
                    covered += low <= truth <= high
                    sizes.append(live.pairs)
                for margin in MARGINS:
                    alarms[(margin, drop)] += staleness(live, StalenessRule(margin=margin, min_pairs=1))[0]
        print(f"\n{name}: mean {np.mean(sizes):.0f} pairs; 95% interval covers the truth in "
              f"{100 * covered / len(sizes):.1f}% of {len(sizes)} draws")
        print("| margin | false alarms (no drop) | " + " | ".join(f"detected, drop {d}" for d in DROPS) + " |")
        print("|---" * (2 + len(DROPS)) + "|")
        for margin in MARGINS:
            cells = [f"{100 * alarms[(margin, d)] / args.sims:.1f}%" for d in (0.0, *DROPS)]
            print(f"| {margin} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
