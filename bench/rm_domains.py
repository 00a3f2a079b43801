"""One shared reward model, or one per domain? Validation accuracy per domain and training seconds of both, on the
same math and multi-hop QA pairs.

    .venv/bin/python bench/rm_domains.py [--runs 3600] [--train-pairs 256] [--validation-pairs 128] [--threads 1]

Pairs are built as the pipeline builds them: generated runs where the plan decides correctness (gsm8k_test,
math500, hotpotqa_dev: two math benchmarks for one QA one), ingested, labeled and paired; each pair's domain is its
benchmark's answer type (`with_domains`). The training pairs are the `--train-pairs` lowest pair ids (as
`max_train_pairs` takes them), so each domain keeps its share; at most `--validation-pairs` validation pairs per
domain. Then, from the packaged MiniLM, one epoch each, same settings and seed:
  (a) shared: one model trained on every training pair, scoring every domain;
  (b) per domain: one model per domain trained on that domain's training pairs only, scoring its domain.
Both see the same pairs in all, so their training seconds compare. Torch runs on `--threads` threads (the machine
is shared: the load average is printed beside each time).

Measured (defaults, 1 thread, 2 shared cores; 176 math and 80 QA training pairs, 128 and 108 validation pairs):

    seed  domain  shared acc  own acc
    0     math    0.938       0.922
    0     qa      0.907       0.880
    1     math    0.945       0.945
    1     qa      0.898       0.898

Shared is as good or better on both domains (a domain alone has fewer pairs to learn from; here what makes a plan
good is the same in both), so `domain_models` defaults to shared. Training seconds are the same work either way
(the same pairs): shared 426 s vs per domain 609 s with seed 0, 623 s vs 397 s with seed 1, as the load average
went between 3 and 8. About 20 minutes a run at that load.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import polars as pl  # noqa: E402
import torch  # noqa: E402

from orchrm_dagster.ingest import ingest_batch  # noqa: E402
from orchrm_dagster.labels import label_batch  # noqa: E402
from orchrm_dagster.pairs import PairRules, build_pairs_table, training_pair_texts  # noqa: E402
from orchrm_dagster.problems import load_problems, problem_sources, reference_answers  # noqa: E402
from orchrm_dagster.rm import PairTexts, RewardScorer, RMTrainConfig, evaluate_pairs, train_reward_model  # noqa: E402
from orchrm_dagster.rm.domains import with_domains  # noqa: E402
from orchrm_dagster.storage import StorageRoot, Warehouse, land  # noqa: E402
from orchrm_dagster.synthetic import generate_runs, write_jsonl  # noqa: E402

BENCHMARKS = ("gsm8k_test", "math500", "hotpotqa_dev")


def domain_pairs(runs: int, work: Path) -> pl.DataFrame:
    """Every pair (with its texts, split and domain) of `runs` generated runs, through ingestion, labels and pairs."""
    root = StorageRoot(str(work / "storage"))
    batch = work / "runs.jsonl"
    write_jsonl(generate_runs(runs, seed=5, benchmarks=BENCHMARKS, plans_decide=True), batch)
    landed = land(root, batch)
    ingest_batch(root, landed.batch_id, landed.path)
    label_batch(root, landed.batch_id, reference_answers(load_problems(problem_sources([])).table))
    build_pairs_table(root, Warehouse(root), PairRules())
    return with_domains(root, training_pair_texts(root))


def split(texts: pl.DataFrame, train_pairs: int, validation_pairs: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    train = texts.filter(pl.col("split") == "train").sort("pair_id").head(train_pairs)
    validation = (texts.filter(pl.col("split") == "validation").sort("pair_id")
                  .group_by("domain", maintain_order=True).head(validation_pairs))
    return train, validation


def as_pairs(frame: pl.DataFrame) -> PairTexts:
    return PairTexts.from_arrow(frame.to_arrow())


def train(frame: pl.DataFrame, config: RMTrainConfig, out: str) -> tuple[RewardScorer, float]:
    result = train_reward_model(as_pairs(frame), PairTexts.empty(), config, out, resume=False)
    return RewardScorer(result.model_dir, "cpu"), result.seconds


def accuracy(scorer: RewardScorer, validation: pl.DataFrame, domain: str) -> float:
    return evaluate_pairs(scorer, as_pairs(validation.filter(pl.col("domain") == domain)))["val_accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3600)
    parser.add_argument("--train-pairs", type=int, default=256)
    parser.add_argument("--validation-pairs", type=int, default=128, help="at most, per domain")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-length", type=int, default=RMTrainConfig().max_length)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = RMTrainConfig(max_length=args.max_length, epochs=1.0, device="cpu", num_threads=args.threads,
                           seed=args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        train_set, validation = split(domain_pairs(args.runs, Path(tmp)), args.train_pairs, args.validation_pairs)
        domains = sorted(set(train_set["domain"].drop_nulls()) & set(validation["domain"].drop_nulls()))
        counts = {d: (train_set.filter(pl.col("domain") == d).height, validation.filter(pl.col("domain") == d).height)
                  for d in domains}
        print(f"{args.runs} runs over {', '.join(BENCHMARKS)}; pairs (train, validation) by domain: {counts}; "
              f"MiniLM, {args.max_length} tokens, batch {config.batch_size}, lr {config.learning_rate}, 1 epoch, "
              f"seed {args.seed}, {args.threads} torch thread(s)", flush=True)
        shared, shared_seconds = train(train_set, config, str(Path(tmp, "shared")))
        load = os.getloadavg()[0]
        rows = []
        per_domain_seconds = 0.0
        for domain in domains:
            own, seconds = train(train_set.filter(pl.col("domain") == domain), config, str(Path(tmp, domain)))
            per_domain_seconds += seconds
            rows.append((domain, accuracy(shared, validation, domain), accuracy(own, validation, domain), seconds))
        print(f"{'domain':8s} {'train':>6s} {'val':>5s} {'shared acc':>10s} {'own acc':>8s} {'own train s':>11s}")
        for domain, shared_acc, own_acc, seconds in rows:
            n_train, n_val = counts[domain]
            print(f"{domain:8s} {n_train:6d} {n_val:5d} {shared_acc:10.3f} {own_acc:8.3f} {seconds:11.1f}")
        print(f"training seconds: shared {shared_seconds:.1f} (load {load:.1f}), per domain {per_domain_seconds:.1f} "
              f"(load {os.getloadavg()[0]:.1f}) on {os.cpu_count()} CPUs", flush=True)


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"whole run {time.perf_counter() - start:.0f} s")
