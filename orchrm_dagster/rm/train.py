"""Bradley-Terry reward-model training on win-lose pairs with TRL's RewardTrainer.

Loss: -log sigmoid(r(x, z_w) - r(x, z_l)) (+ TRL's optional reward-centering term). The scalar r is the model's
sequence-classification head with num_labels=1: BERT-type backbones (the packaged MiniLM) read it from the pooled
[CLS] token; decoder backbones (Llama, Qwen: transformers' *ForSequenceClassification) read it at the last non-pad
token, which is why such a backbone gets a pad token distinct from EOS (the EOS that ends each input must not be
mistaken for padding). Inputs are padded on the right everywhere (TRL's collator, the scorer), and the score is
read at the last non-pad token.

The weights load in `config.dtype` (fp32 by default; bf16 halves them). With `config.lora` the backbone is frozen and
LoRA adapters plus the score head train (peft, task SEQ_CLS: the head is a module peft trains whole and saves with
the adapters); the checkpoint is the adapters merged into a plain model (save="merged") or the adapters alone
(save="adapter", loaded by `rm.adapters.load_reward_model`). Before anything is loaded, the memory the configuration
needs is estimated and logged (`rm.memory`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForSequenceClassification, AutoTokenizer, set_seed
from trl import RewardConfig, RewardTrainer

from orchrm_dagster.devices import resolve_device, torch_dtype
from orchrm_dagster.engine_config import config_to_json
from orchrm_dagster.lora import is_adapted, lora_config, save_trained
from orchrm_dagster.processes import run_data_parallel
from orchrm_dagster.rm.config import RMTrainConfig, backbone_path, use_bf16
from orchrm_dagster.rm.memory import backbone_shape, device_memory_gb, memory_estimate
from orchrm_dagster.rm.data import PairTexts
from orchrm_dagster.rm.score import RewardScorer, evaluate_pairs
from orchrm_dagster.rm.template import InputSpec, encode, write_input_spec
from orchrm_dagster.trainer_args import activation_checkpointing_arg, logged_tokens
from orchrm_dagster.trainer_checkpoints import (MODEL_SUBDIR, adapter_checkpoints, checkpoint_args, checkpoint_step,
                                               last_whole_checkpoint, timed_checkpoints)

RUN_KEY_FILE = "run_key.json"
ADDED_PAD_TOKEN = "<|rm_pad|>"
LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainResult:
    model_dir: str
    steps: int  # global optimizer steps of the whole training, resumed steps included
    train_pairs: int
    seconds: float  # this call's training time (not the resumed part)
    pairs_per_second: float  # pairs trained by this call / seconds
    final_loss: float  # the last logged training loss
    validation_metrics: dict = field(default_factory=dict)  # pairwise_metrics on the validation pairs, fp32
    memory: dict = field(default_factory=dict)  # the memory estimate made before loading (`rm.memory`)
    resumed_from: int = 0  # the trainer checkpoint's step this call resumed from (0: it started from the beginning)
    checkpoints: int = 0  # trainer checkpoints this call wrote (by the clock: config.checkpoint_minutes)
    checkpoint_seconds: float = 0.0  # of `seconds`, those spent writing them
    training_tokens: int = 0  # read in the training's forward passes (TRL's num_tokens: every pair, every epoch)


def train_reward_model(train: PairTexts, validation: PairTexts, config: RMTrainConfig, output_dir: str,
                       resume: bool = True) -> TrainResult:
    """Train r(x, z) on `train`, save it to output_dir/model/ (safetensors + tokenizer), score `validation` with it.

    Trainer checkpoints (checkpoint-*) go to output_dir every config.checkpoint_minutes; with resume=True an
    interrupted training continues from the last one, provided the pairs and the settings that shape the steps
    (backbone, max_length, batch_size, seed) are the same. Otherwise stale checkpoints are removed first.
    """
    if len(train) == 0:
        raise ValueError("no training pairs: ingest runs from more than one policy kind, or with labels, first")
    device = resolve_device(config.device)
    memory = training_memory(config, device)
    checkpoint = _checkpoint_to_resume(output_dir, _run_key(train, config), resume)
    with torch_threads(config.num_threads):
        if config.processes > 1:
            fitted = fit_data_parallel(train, config, output_dir, device, checkpoint)
        else:
            fitted = fit(train, config, output_dir, device, checkpoint)
        model_dir = os.path.join(output_dir, MODEL_SUBDIR)
        metrics = _validation_metrics(model_dir, validation, config, device)
    pairs = pairs_in_steps(checkpoint_step(checkpoint), fitted.steps, len(train), config.batch_size)
    return TrainResult(model_dir=model_dir, steps=fitted.steps, train_pairs=len(train), seconds=fitted.seconds,
                       pairs_per_second=pairs / fitted.seconds if fitted.seconds > 0 else 0.0,
                       final_loss=fitted.final_loss, validation_metrics=metrics, memory=memory,
                       resumed_from=checkpoint_step(checkpoint), checkpoints=fitted.checkpoints,
                       checkpoint_seconds=fitted.checkpoint_seconds, training_tokens=fitted.training_tokens)


@dataclass(frozen=True)
class Fitted:
    """What a training's processes report: its global steps, this call's seconds, its last logged loss (the mean over
    every process)."""

    steps: int
    seconds: float
    final_loss: float
    checkpoints: int = 0
    checkpoint_seconds: float = 0.0
    training_tokens: int = 0


def fit(train: PairTexts, config: RMTrainConfig, output_dir: str, device: str, checkpoint: str | None) -> Fitted:
    """Train from `checkpoint` (None: from the start) and save the model to output_dir/model/: in this process, or
    as one of `config.processes` data-parallel processes (`rm.fit_process`), where the first saves it."""
    trainer = _build_trainer(train, config, output_dir, device)
    checkpoints = timed_checkpoints(config.checkpoint_minutes)
    trainer.add_callback(checkpoints)
    first = trainer.is_world_process_zero()
    # only the first process starts the logs over: the others would race it removing them
    config.training_logs(output_dir).attach(trainer, resumed=checkpoint is not None or not first)
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=checkpoint)
    seconds = time.perf_counter() - started
    if first:
        model_dir = os.path.join(output_dir, MODEL_SUBDIR)
        if is_adapted(trainer.model):
            save_trained(trainer.model, trainer.processing_class, model_dir, merge=config.save == "merged")
        else:
            trainer.save_model(model_dir)
        write_input_spec(model_dir, config.input_spec())
    return Fitted(trainer.state.global_step, seconds, _last_logged_loss(trainer.state.log_history),
                  checkpoints.checkpoints, checkpoints.seconds, logged_tokens(trainer.state.log_history))


DATA_PARALLEL_DIR = "data_parallel"  # a data-parallel training's job: its pairs, settings, errors and result
PAIRS_FILE = "train.parquet"  # in the job's folder: the pairs `rm.fit_process` trains on


def fit_data_parallel(train: PairTexts, config: RMTrainConfig, output_dir: str, device: str,
                      checkpoint: str | None) -> Fitted:
    """`fit` in `config.processes` processes through `accelerate launch` (`rm.fit_process`); a failed process raises
    `TrainingProcessFailed` with its own error (its trainer checkpoints stay, to resume)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write_pairs(folder: Path) -> None:
        pq.write_table(pa.table({f.name: getattr(train, f.name) for f in fields(train)}), folder / PAIRS_FILE)

    job = {"config": config_to_json(config), "output_dir": output_dir, "device": device, "checkpoint": checkpoint}
    return Fitted(**run_data_parallel("orchrm_dagster.rm.fit_process", Path(output_dir, DATA_PARALLEL_DIR), job,
                                      config.processes, device, prepare=write_pairs))


def training_memory(config: RMTrainConfig, device: str) -> dict:
    """The memory estimate of `config` on `device` (`rm.memory`), logged; {} when the backbone's shape cannot be
    read."""
    try:
        shape = backbone_shape(backbone_path(config.backbone))
    except (OSError, ValueError, AttributeError, TypeError) as error:
        LOG.warning("reward-model memory estimate skipped: %s", error)
        return {}
    estimate = memory_estimate(shape, config, device_gb=device_memory_gb(device),
                               autocast_bf16=use_bf16(config.precision, device), device=device)
    (LOG.warning if estimate.fits is False else LOG.info)("reward model on %s: %s", device, estimate.message)
    return estimate.as_dict()


def load_backbone(path: str, seed: int, dtype: str = "fp32"):
    """Sequence-classification model with one output, its weights in `dtype` (fp32 | bf16 | fp16 | auto: the
    checkpoint's own), and a tokenizer whose pad token is set (and is not EOS) and which pads on the right."""
    set_seed(seed)  # the score head is initialised at random
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch_dtype(dtype))
    ensure_distinct_pad_token(model, tokenizer)
    tokenizer.padding_side = "right"  # as TRL's collator and the scorer pad
    return model, tokenizer


def rm_lora_config(config: RMTrainConfig, model_type: str | None):
    """The reward model's LoRA (the shared helper, task SEQ_CLS: the score head trains whole)."""
    return lora_config(config.lora_r, config.lora_alpha, config.lora_target_modules, task_type="SEQ_CLS",
                       model_type=model_type)


def ensure_distinct_pad_token(model, tokenizer) -> None:
    if tokenizer.pad_token is None or tokenizer.pad_token == tokenizer.eos_token:
        tokenizer.add_special_tokens({"pad_token": ADDED_PAD_TOKEN})
        model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id


def preference_dataset(tokenizer, pairs: PairTexts, spec: InputSpec) -> Dataset:
    """Pre-tokenized pairs in TRL 1.16's processed format (chosen_ids / rejected_ids), unpadded.

    Pre-tokenizing matters: given text, TRL appends tokenizer.eos_token (None for BERT-type tokenizers) and drops
    pairs longer than max_length instead of truncating them. `length` feeds the length-grouped sampler.
    """
    chosen = encode(tokenizer, pairs.question, pairs.chosen_plan, spec)
    rejected = encode(tokenizer, pairs.question, pairs.rejected_plan, spec)
    lengths = [max(len(c), len(r)) for c, r in zip(chosen, rejected)]
    return Dataset.from_dict({"chosen_ids": chosen, "rejected_ids": rejected, "length": lengths})


def reward_config(config: RMTrainConfig, output_dir: str, device: str) -> RewardConfig:
    return RewardConfig(
        output_dir=output_dir,
        per_device_train_batch_size=config.batch_size // config.processes,  # the global batch, whatever N
        learning_rate=config.learning_rate,
        num_train_epochs=config.epochs,
        seed=config.seed,
        use_cpu=device == "cpu",
        bf16=use_bf16(config.precision, device),
        **activation_checkpointing_arg(config.gradient_checkpointing),
        center_rewards_coefficient=config.center_rewards_coefficient,
        max_length=None,  # already truncated by preference_dataset
        train_sampling_strategy="group_by_length",  # batches of similar length pad less
        remove_unused_columns=False,  # keep `length` for the sampler; the collator ignores it
        dataloader_pin_memory=device == "cuda",
        **checkpoint_args(),  # by the clock: `fit`'s callback
        logging_steps=0.1,  # ten logs per training
        **config.training_logs(output_dir).trainer_args(),
        disable_tqdm=not sys.stderr.isatty(),
    )


def pairs_in_steps(first_step: int, last_step: int, n_pairs: int, batch_size: int) -> int:
    """Pairs consumed by optimizer steps first_step+1 .. last_step (an epoch's last batch may be short)."""
    steps_per_epoch = math.ceil(n_pairs / batch_size)
    last_batch = n_pairs - batch_size * (steps_per_epoch - 1)
    return sum(last_batch if step % steps_per_epoch == 0 else batch_size for step in range(first_step + 1, last_step + 1))


def _build_trainer(train: PairTexts, config: RMTrainConfig, output_dir: str, device: str):
    path = backbone_path(config.backbone)
    # an adapter checkpoint names its backbone: a folder by its absolute path, so it loads from any working directory
    model, tokenizer = load_backbone(os.path.abspath(path) if os.path.isdir(path) else path, config.seed, config.dtype)
    peft_config = rm_lora_config(config, model.config.model_type) if config.lora else None
    return adapter_checkpoints(RewardTrainer)(model=model, args=reward_config(config, output_dir, device),
                         train_dataset=preference_dataset(tokenizer, train, config.input_spec()),
                         processing_class=tokenizer, peft_config=peft_config)


def _validation_metrics(model_dir: str, validation: PairTexts, config: RMTrainConfig, device: str) -> dict:
    if len(validation) == 0:
        return {}
    return evaluate_pairs(RewardScorer(model_dir, device), validation)


def _checkpoint_to_resume(output_dir: str, run_key: dict, resume: bool) -> str | None:
    key_path = os.path.join(output_dir, RUN_KEY_FILE)
    last = last_whole_checkpoint(output_dir)
    if resume and last and _read_json(key_path) == run_key:
        return last
    for stale in Path(output_dir).glob("checkpoint-*"):
        shutil.rmtree(stale)
    os.makedirs(output_dir, exist_ok=True)
    with open(key_path, "w") as out:
        json.dump(run_key, out)
    return None


def _run_key(train: PairTexts, config: RMTrainConfig) -> dict:
    key = {"pairs": train.fingerprint(), "backbone": config.backbone,
           "input": list(config.input_spec().as_dict().values()), "batch_size": config.batch_size,
           "seed": config.seed}
    # what the trainer checkpoints hold: only a run of other weights (dtype, LoRA) is keyed by it
    weights = {"dtype": config.dtype, "lora": [config.lora_r, config.lora_alpha, list(config.lora_target_modules)]
               if config.lora else False}
    if weights != {"dtype": "fp32", "lora": False}:
        key["weights"] = weights
    if config.processes > 1:  # each process's share of the data and its random state are in the checkpoints
        key["processes"] = config.processes
    return key


def _read_json(path: str):
    try:
        with open(path) as source:
            return json.load(source)
    except (OSError, ValueError):
        return None


def _last_logged_loss(log_history: list[dict]) -> float:
    losses = [entry["loss"] for entry in log_history if "loss" in entry]
    return float(losses[-1]) if losses else math.nan


@contextlib.contextmanager
def torch_threads(num_threads: int | None):
    previous = torch.get_num_threads()
    if num_threads:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
