"""Score (question, plan) pairs with a trained reward model: the plain function later code calls on plans that were
never executed."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from orchrm_dagster.devices import resolve_device
from orchrm_dagster.rm.data import PairTexts
from orchrm_dagster.rm.metrics import pairwise_metrics
from orchrm_dagster.rm.template import encode, read_input_spec

CPU_BATCH_TOKENS = 2048  # measured with MiniLM on one core: 8 x 256, 16 x 128 tokens ran faster than 32-input batches


class RewardScorer:
    """r(x, z) from a model folder written by `train_reward_model`, always in fp32 (bf16 scores tie too often).

    Inputs are sorted by token length and batched so a batch pads little; results come back in input order. A batch
    holds at most batch_size inputs and max_batch_tokens padded tokens (None: 2048 on CPU, where larger batches
    run slower per token, as they spill out of cache; unbounded on GPU).
    Loaded models are cached per (model_dir, device) in this process, so constructing a scorer twice is cheap.
    Plans are read in the input format the model was trained with, at its trained length unless max_length is given.
    """

    def __init__(self, model_dir: str, device: str = "auto", max_length: int | None = None, batch_size: int = 32,
                 max_batch_tokens: int | None = None):
        self.device = resolve_device(device)
        trained = read_input_spec(model_dir)
        self.spec = dataclasses.replace(trained, max_length=max_length) if max_length else trained
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens or (CPU_BATCH_TOKENS if self.device == "cpu" else None)
        self.model, self.tokenizer = _load(os.path.realpath(model_dir), self.device, _weights_stamp(model_dir))

    def score(self, questions: Sequence[str], plans: Sequence[str]) -> list[float]:
        return self.score_with_lengths(questions, plans)[0]

    def score_with_lengths(self, questions: Sequence[str], plans: Sequence[str]) -> tuple[list[float], list[int]]:
        """Scores, and the number of tokens the model read for each input (its verification cost)."""
        ids = encode(self.tokenizer, questions, plans, self.spec)
        lengths = [len(row) for row in ids]
        scores = [0.0] * len(ids)
        for batch in self.batches(lengths):
            for index, value in zip(batch, self.forward([ids[i] for i in batch])):
                scores[index] = value
        return scores, lengths

    def batches(self, lengths: Sequence[int]) -> list[list[int]]:
        return length_sorted_batches(lengths, self.batch_size, self.max_batch_tokens)

    def forward(self, batch_ids: list[list[int]]) -> list[float]:
        """Scores of one batch of token ids (right-padded here)."""
        input_ids, attention_mask = pad_right(batch_ids, self.tokenizer.pad_token_id)
        with torch.inference_mode():
            logits = self.model(input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device)).logits
        return logits.squeeze(-1).float().cpu().tolist()

    def count_plan_tokens(self, plans: Sequence[str]) -> list[int]:
        """Untruncated plan lengths in tokens (no special tokens), e.g. for `length_spearman`."""
        if not plans:
            return []
        return [len(row) for row in self.tokenizer(list(plans), add_special_tokens=False, verbose=False)["input_ids"]]


def evaluate_pairs(scorer: RewardScorer, pairs: PairTexts) -> dict:
    """`pairwise_metrics` of the scorer on pairs; lengths are untruncated plan tokens."""
    n = len(pairs)
    scores = scorer.score(pairs.question * 2, pairs.chosen_plan + pairs.rejected_plan)
    lengths = scorer.count_plan_tokens(pairs.chosen_plan + pairs.rejected_plan)
    return pairwise_metrics(scores[:n], scores[n:], pairs.source, lengths[:n], lengths[n:])


def length_sorted_batches(lengths: Sequence[int], batch_size: int, max_batch_tokens: int | None) -> list[list[int]]:
    """Indices grouped shortest first; a batch closes at batch_size inputs or when padding the next input (the
    longest so far) would exceed max_batch_tokens. An input longer than the budget gets a batch of its own."""
    batches: list[list[int]] = []
    batch: list[int] = []
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        too_many_tokens = max_batch_tokens is not None and (len(batch) + 1) * lengths[index] > max_batch_tokens
        if batch and (len(batch) == batch_size or too_many_tokens):
            batches.append(batch)
            batch = []
        batch.append(index)
    if batch:
        batches.append(batch)
    return batches


def pad_right(batch_ids: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(row) for row in batch_ids)
    input_ids = torch.full((len(batch_ids), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(batch_ids), width), dtype=torch.long)
    for i, row in enumerate(batch_ids):
        input_ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        attention_mask[i, :len(row)] = 1
    return input_ids, attention_mask


@functools.lru_cache(maxsize=4)
def _load(model_dir: str, device: str, weights_stamp: tuple):
    # weights_stamp is part of the cache key so that a model retrained into the same folder is reloaded.
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
    return model, tokenizer


def _weights_stamp(model_dir: str) -> tuple:
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    return tuple((f, os.stat(os.path.join(model_dir, f)).st_mtime_ns) for f in files)
