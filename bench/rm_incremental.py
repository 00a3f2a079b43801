"""Incremental retraining against a full one, on the same pairs (real pairs of a prepared root: the runs `make run`
ingests, whose history is SIMULATED; the reward model is the real packaged MiniLM, trained with the product's
defaults).

The root's training pairs are cut by problem: the first `1 - --new-share` of the problems are the champion's (a base
model trained on their pairs), the rest arrive new. Then, on the same validation pairs:

- full: the backbone trained on every training pair (seeds 0..S-1: how far two full retrainings differ is the noise
  an incremental one is held to),
- incremental: the base model continued on the new pairs plus `r` old pairs replayed per new one
  (`rm.challenger.replay_selection`, what `start_from: champion` runs), for each r in --ratios.

Prints each one's validation accuracy with its 95% interval, its paired difference to the full retraining (seed 0)
on the same pairs, the pairs it read and the tokens its training read (what the loop's ledger counts).

    .venv/bin/python bench/rm_incremental.py [--root DIR] [--new-share 0.3] [--ratios 0,0.5,1,2] [--seeds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from orchrm_dagster.devices import cpu_flags  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default="/tmp/simwork/prepared/storage",
                        help="a storage root with pairs (bench/simulated_loop.py --work /tmp/simwork prepares one)")
    parser.add_argument("--new-share", type=float, default=0.3)
    parser.add_argument("--ratios", default="0,0.5,1,2")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    from orchrm_dagster.pairs import TRAIN, VALIDATION, training_pair_texts
    from orchrm_dagster.rm import PairTexts, RMTrainConfig
    from orchrm_dagster.rm.challenger import replay_selection
    from orchrm_dagster.storage import StorageRoot

    print(f"{cpu_flags()}; load {os.getloadavg()[0]:.1f}; {vars(args)}", flush=True)
    texts = training_pair_texts(StorageRoot(args.root))
    train, validation = texts.filter(pl.col("split") == TRAIN), texts.filter(pl.col("split") == VALIDATION)
    problems = sorted(train["problem_id"].unique().to_list(), key=lambda p: hashlib.md5(p.encode()).hexdigest())
    new_problems = set(problems[:round(args.new_share * len(problems))])
    new_part = train.filter(pl.col("problem_id").is_in(sorted(new_problems)))
    old = train.filter(~pl.col("problem_id").is_in(sorted(new_problems)))
    print(f"pairs: {train.height} training ({old.height} old, {new_part.height} new, on {len(new_problems)} of "
          f"{len(problems)} problems), {validation.height} validation", flush=True)
    pairs = lambda frame: PairTexts.from_arrow(frame.to_arrow())  # noqa: E731
    config = RMTrainConfig()
    results = []
    with tempfile.TemporaryDirectory(prefix="orchrm-rm-incremental-") as work:
        for seed in range(args.seeds):
            results.append(train_and_judge(f"full (seed {seed})", pairs(train), validation, config, seed, work))
        base = train_and_judge("base (old pairs only)", pairs(old), validation, config, 0, work)
        for ratio in [float(r) for r in args.ratios.split(",")]:
            _, replayed = replay_selection(train, old.select("pair_id"), ratio, seed=0)
            read = pl.concat([new_part, replayed])
            results.append(train_and_judge(f"incremental, replay {ratio:g}", pairs(read), validation,
                                           RMTrainConfig(backbone=base["model"]), 0, work))
    reference = results[0]
    print("\n| retraining | pairs read | training tokens | seconds | val accuracy [95%] | paired difference to "
          "full seed 0 [95%] |\n|---|---|---|---|---|---|")
    for r in [base] + results:
        difference = paired(r["wins"], reference["wins"])
        print(f"| {r['name']} | {r['pairs']} | {r['tokens']:,} | {r['seconds']:.0f} | {r['accuracy']:.3f} "
              f"[{r['low']:.3f}, {r['high']:.3f}] | {difference} |")


def train_and_judge(name: str, train, validation: pl.DataFrame, config, seed: int, work: str) -> dict:
    import dataclasses

    from orchrm_dagster.rm import PairTexts, RewardScorer, train_reward_model

    folder = os.path.join(work, name.replace(" ", "_").replace("(", "").replace(")", "").replace(",", ""))
    started = time.perf_counter()
    result = train_reward_model(train, PairTexts.empty(), dataclasses.replace(config, seed=seed), folder,
                                resume=False)
    seconds = time.perf_counter() - started
    texts = PairTexts.from_arrow(validation.to_arrow())
    scorer = RewardScorer(result.model_dir, "cpu")
    scores = scorer.score(texts.question * 2, texts.chosen_plan + texts.rejected_plan)
    wins = np.asarray(scores[:len(texts)]) > np.asarray(scores[len(texts):])
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(int(wins.sum()), len(wins), alpha=0.05, method="wilson")
    print(f"{name}: {len(train)} pairs, val accuracy {wins.mean():.3f}, {seconds:.0f} s", flush=True)
    return {"name": name, "model": result.model_dir, "pairs": len(train), "tokens": result.training_tokens,
            "seconds": seconds, "wins": wins, "accuracy": float(wins.mean()), "low": low, "high": high}


def paired(wins: np.ndarray, reference: np.ndarray) -> str:
    """The difference in accuracy on the same pairs, with its paired 95% interval (t over per-pair differences)."""
    from scipy.stats import t

    d = wins.astype(float) - reference.astype(float)
    if not d.any():
        return "+0.000 (the same pairs right)"
    half = t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return f"{d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}]"


if __name__ == "__main__":
    main()
