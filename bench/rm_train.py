"""Reward-model training throughput and quality: our settings vs TRL's RewardTrainer defaults, side by side.

    .venv/bin/python bench/rm_train.py [--pairs 512] [--validation 64] [--max-length 256]

Both train the packaged all-MiniLM-L6-v2 for one epoch on the same synthetic pairs (the chosen plan's first agent is
a DebateAgent), same pre-tokenized ids, learning rate, batch size and seed:
  (a) train_reward_model: bf16 autocast where the CPU/GPU has native bf16, no gradient checkpointing,
      length-grouped batches;
  (b) RewardTrainer(model=<path>, args=RewardConfig(...)) with TRL 1.16's defaults, except bf16=False (fp32: TRL's
      bf16=True default needs use_cpu=True on a CPU) - so gradient checkpointing is on, as TRL sets it.
Validation accuracy: both saved models scored in fp32 by RewardScorer on held-out pairs (later GSM8K questions).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from datasets import Dataset  # noqa: E402
from trl import RewardConfig, RewardTrainer  # noqa: E402

from orchrm_dagster.rm import RMTrainConfig, RewardScorer, evaluate_pairs, synthetic_pairs, train_reward_model  # noqa: E402
from orchrm_dagster.rm.config import backbone_path  # noqa: E402
from orchrm_dagster.rm.train import load_backbone  # noqa: E402
from orchrm_dagster.rm.template import encode  # noqa: E402


def split_pairs(n_train: int, n_validation: int):
    pairs = synthetic_pairs(n_train + n_validation, seed=0)
    return pairs.select(range(n_train)), pairs.select(range(n_train, n_train + n_validation))


def run_ours(train, validation, config: RMTrainConfig, out: str) -> dict:
    result = train_reward_model(train, validation, config, out, resume=False)
    return {"pairs_per_second": result.pairs_per_second, "seconds": result.seconds,
            "val_accuracy": result.validation_metrics["val_accuracy"], "final_loss": result.final_loss}


def run_trl_defaults(train, validation, config: RMTrainConfig, out: str) -> dict:
    _, tokenizer = load_backbone(backbone_path(None), config.seed)
    dataset = Dataset.from_dict({
        "chosen_ids": encode(tokenizer, train.question, train.chosen_plan, config.input_spec()),
        "rejected_ids": encode(tokenizer, train.question, train.rejected_plan, config.input_spec())})
    args = RewardConfig(output_dir=out, per_device_train_batch_size=config.batch_size,
                        learning_rate=config.learning_rate, num_train_epochs=config.epochs, seed=config.seed,
                        bf16=False, report_to="none", disable_tqdm=True)
    trainer = RewardTrainer(model=backbone_path(None), args=args, train_dataset=dataset, processing_class=tokenizer)
    started = time.perf_counter()
    training_loss = trainer.train().training_loss
    seconds = time.perf_counter() - started
    trainer.save_model(os.path.join(out, "model"))
    scorer = RewardScorer(os.path.join(out, "model"), max_length=config.max_length)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return {"pairs_per_second": len(train) * config.epochs / seconds, "seconds": seconds,
            "val_accuracy": evaluate_pairs(scorer, validation)["val_accuracy"], "final_loss": losses[-1] if losses else training_loss,
            "gradient_checkpointing": args.gradient_checkpointing}


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def report(name: str, r: dict) -> None:
    print(f"{name:26s} {r['pairs_per_second']:6.2f} pairs/s  {r['seconds']:6.1f} s  "
          f"{r['cpu_seconds_per_pair']:5.2f} CPU s/pair (whole run)  val acc {r['val_accuracy']:.3f}  "
          f"final loss {r['final_loss']:.3f}  (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=512)
    parser.add_argument("--validation", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=256)
    args = parser.parse_args()
    train, validation = split_pairs(args.pairs, args.validation)
    config = RMTrainConfig(max_length=args.max_length, epochs=1.0, batch_size=16, learning_rate=5e-5)
    print(f"{args.pairs} pairs, {args.validation} held out, {args.max_length} tokens, batch 16, lr 5e-5, 1 epoch")
    runs = {"(a) train_reward_model": run_ours, "(b) TRL defaults, fp32": run_trl_defaults}
    results = {}
    with tempfile.TemporaryDirectory() as out:
        for name, run in runs.items():
            cpu_before = _cpu_seconds()
            results[name] = run(train, validation, config, os.path.join(out, name[:3]))
            results[name]["cpu_seconds_per_pair"] = (_cpu_seconds() - cpu_before) / len(train)
            report(name, results[name])
    ours, trl = results.values()
    print(f"speed-up {ours['pairs_per_second'] / trl['pairs_per_second']:.2f}x, "
          f"val accuracy difference {100 * (ours['val_accuracy'] - trl['val_accuracy']):+.1f} points")


if __name__ == "__main__":
    main()
