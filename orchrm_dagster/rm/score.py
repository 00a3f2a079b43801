"""Score (question, plan) pairs with a trained reward model: the plain function later code calls on plans that were
never executed."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch
from transformers import AutoTokenizer
from transformers.modeling_layers import GenericForSequenceClassification

from orchrm_dagster.devices import DTYPE_NAMES, resolve_device, torch_dtype
from orchrm_dagster.rm.adapters import load_reward_model
from orchrm_dagster.rm.data import PairTexts
from orchrm_dagster.rm.metrics import pairwise_metrics
from orchrm_dagster.rm.template import encode, read_input_spec

CPU_BATCH_TOKENS = 2048  # measured with MiniLM on one core: 8 x 256, 16 x 128 tokens ran faster than 32-input batches
GPU_BATCH_TOKENS = 65_536  # 64 inputs of 1,024 tokens: a 135M model's forward pass fills a GPU only in large batches
ENCODED_CHUNK = 16  # inputs a worker thread encodes at a time, ahead of the forward passes (the first is a stall)


def resolve_dtype(dtype: str, device: str) -> str:
    """"auto": fp32 on the CPU; on a GPU bf16 where it runs it natively (torch.cuda.is_bf16_supported), else fp16."""
    if dtype == "auto":
        if device != "cuda":
            return "fp32"
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"unknown scoring dtype {dtype!r}; known: auto, {', '.join(DTYPE_NAMES)}")
    return dtype


class LengthBatchedScorer:
    """What every scorer shares: (question, plan) inputs encoded in the checkpoint's input format (`self.spec`,
    `self.tokenizer`), scored by `forward` in length-sorted batches cut by padded tokens (`self.max_batch_tokens`;
    `self.batch_size` inputs at most, None: no count), the scores returned in input order.

    Encoding stays off the forward passes' path: a worker thread encodes the inputs, shortest (in characters) first,
    in chunks of ENCODED_CHUNK while the batches of the chunks before run (tokenizers and torch release the GIL);
    a batch is cut from what is encoded so far, so only the first chunk is waited for."""

    spec = tokenizer = None
    batch_size: int | None = None
    max_batch_tokens: int | None = None

    def forward(self, batch_ids: list[list[int]]) -> list[float]:
        raise NotImplementedError

    def launch(self, batch_ids: list[list[int]]):
        """One batch's scores, or what they will be (a tensor on a GPU, read once every batch is launched)."""
        return self.forward(batch_ids)

    def score(self, questions: Sequence[str], plans: Sequence[str]) -> list[float]:
        return self.score_with_lengths(questions, plans)[0]

    def score_with_lengths(self, questions: Sequence[str], plans: Sequence[str]) -> tuple[list[float], list[int]]:
        """Scores, and the number of tokens the model read for each input (its verification cost)."""
        if len(questions) != len(plans):
            raise ValueError(f"{len(questions)} questions but {len(plans)} plans")
        lengths = [0] * len(plans)
        launched = []
        with ThreadPoolExecutor(1, thread_name_prefix="rm-encode") as encoder:
            for batch in self._batches(self._encoded(encoder, questions, plans)):
                for index, ids in batch:
                    lengths[index] = len(ids)
                launched.append(([index for index, _ in batch], self.launch([ids for _, ids in batch])))
        scores = [0.0] * len(plans)
        for indices, values in launched:
            for index, value in zip(indices, values.tolist() if hasattr(values, "tolist") else values):
                scores[index] = value
        return scores, lengths

    def batches(self, lengths: Sequence[int]) -> list[list[int]]:
        return length_sorted_batches(lengths, self.batch_size, self.max_batch_tokens)

    def _encoded(self, encoder: ThreadPoolExecutor, questions: Sequence[str],
                 plans: Sequence[str]) -> Iterator[list[tuple[int, list[int]]]]:
        """(index, token ids) of every input, chunk by chunk as the worker encodes them, shortest text first."""
        order = sorted(range(len(plans)), key=lambda i: len(questions[i]) + len(plans[i]))
        chunks = [order[start:start + ENCODED_CHUNK] for start in range(0, len(order), ENCODED_CHUNK)]
        futures = [encoder.submit(encode, self.tokenizer, [questions[i] for i in chunk], [plans[i] for i in chunk],
                                  self.spec) for chunk in chunks]
        for chunk, future in zip(chunks, futures):
            yield list(zip(chunk, future.result()))

    def _batches(self, chunks: Iterable[list[tuple[int, list[int]]]]) -> Iterator[list[tuple[int, list[int]]]]:
        """Length-sorted batches of the inputs encoded so far; the last, still open batch waits for the next chunk."""
        pending: list[tuple[int, list[int]]] = []
        for chunk in chunks:
            pending = sorted(pending + chunk, key=lambda row: len(row[1]))
            cut = self.batches([len(ids) for _, ids in pending])
            yield from ([pending[i] for i in batch] for batch in cut[:-1])
            pending = [pending[i] for i in cut[-1]] if cut else []
        if pending:
            yield pending


class RewardScorer(LengthBatchedScorer):
    """r(x, z) from a sequence-classification model folder (one written by `train_reward_model`, or any encoder or
    decoder classifier with a scalar head).

    Inputs are sorted by token length and batched so a batch pads little; results come back in input order. A batch
    holds at most max_batch_tokens padded tokens (None: 2048 on CPU, where larger batches run slower per token, as
    they spill out of cache; 65,536 on a GPU) and batch_size inputs (None: no count). On a GPU every batch is
    launched before any score is read back, so the next batch is padded while the GPU runs the last.
    Weights load in `dtype` (`resolve_dtype`: auto is fp32 on the CPU, bf16 or fp16 on a GPU); the scalar head runs
    in fp32 whatever the dtype, so that scores do not tie on bf16's 8-bit mantissa. The default is fp32, which the
    validation that crowns champions (training, challengers) keeps; `ScoringSettings.dtype` (auto) sets it for
    rm_scores, Best-of-N, GRPO and `orchrm serve`.
    Batches are padded on the right; a decoder classifier (Llama, Qwen, Mistral) is read at each input's last real
    token, found from the attention mask rather than the pad id, so a batch scores as its inputs one by one even when
    the pad token is the EOS (a tokenizer without a pad token pads with its EOS).
    Loaded models are cached per (model_dir, device, dtype) in this process, so constructing a scorer twice is cheap.
    Plans are read in the input format the model was trained with, at its trained length unless max_length is given.
    """

    def __init__(self, model_dir: str, device: str = "auto", max_length: int | None = None,
                 batch_size: int | None = None, max_batch_tokens: int | None = None, dtype: str = "fp32"):
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        trained = read_input_spec(model_dir)
        self.spec = dataclasses.replace(trained, max_length=max_length) if max_length else trained
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens or (CPU_BATCH_TOKENS if self.device == "cpu" else GPU_BATCH_TOKENS)
        self.model, self.tokenizer = _load(os.path.realpath(model_dir), self.device, self.dtype,
                                           _weights_stamp(model_dir))


    def forward(self, batch_ids: list[list[int]]) -> list[float]:
        """Scores of one batch of token ids (right-padded here)."""
        return self.launch(batch_ids).tolist()

    def launch(self, batch_ids: list[list[int]]) -> torch.Tensor:
        """The batch's forward pass, its scores left on the device (a GPU runs it while the caller goes on)."""
        input_ids, attention_mask = pad_right(batch_ids, self.tokenizer.pad_token_id)
        if self.device == "cuda":  # copied while the GPU runs the batch before
            input_ids, attention_mask = input_ids.pin_memory(), attention_mask.pin_memory()
        input_ids = input_ids.to(self.device, non_blocking=True)
        attention_mask = attention_mask.to(self.device, non_blocking=True)
        with torch.inference_mode():
            if isinstance(self.model, GenericForSequenceClassification):
                logits = _last_token_logits(self.model, input_ids, attention_mask)
            else:
                logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits.squeeze(-1).float().cpu() if self.device == "cpu" else logits.squeeze(-1).float()

    def count_plan_tokens(self, plans: Sequence[str]) -> list[int]:
        """Untruncated plan lengths in tokens (no special tokens), e.g. for `length_spearman`."""
        if not plans:
            return []
        return [len(row) for row in self.tokenizer(list(plans), add_special_tokens=False, verbose=False)["input_ids"]]


def scorer_for(model_dir: str, settings) -> RewardScorer:
    """The in-process scorer `settings` (a ScoringSettings) describe, of the model in `model_dir`: what rm_scores,
    Best-of-N, GRPO's rewards and `orchrm serve` score with."""
    return RewardScorer(model_dir, settings.device, settings.max_length, settings.batch_size, settings.batch_tokens,
                        dtype=settings.dtype)


def evaluate_pairs(scorer: RewardScorer, pairs: PairTexts) -> dict:
    """`pairwise_metrics` of the scorer on pairs; lengths are untruncated plan tokens."""
    n = len(pairs)
    scores = scorer.score(pairs.question * 2, pairs.chosen_plan + pairs.rejected_plan)
    lengths = scorer.count_plan_tokens(pairs.chosen_plan + pairs.rejected_plan)
    return pairwise_metrics(scores[:n], scores[n:], pairs.source, lengths[:n], lengths[n:])


def length_sorted_batches(lengths: Sequence[int], batch_size: int | None,
                          max_batch_tokens: int | None) -> list[list[int]]:
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
    input_ids = torch.tensor([row + [pad_token_id] * (width - len(row)) for row in batch_ids], dtype=torch.long)
    attention_mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in batch_ids], dtype=torch.long)
    return input_ids, attention_mask


def _last_token_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """A decoder classifier's logits at each row's last attended token (rows padded on the right). The model's own
    forward reads the last token that is not the pad id, which is the token before the EOS when the pad is the EOS."""
    body = getattr(model, model.base_model_prefix)
    hidden = body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    last = attention_mask.sum(-1) - 1
    return model.score(hidden[torch.arange(hidden.shape[0], device=hidden.device), last])


def _head(model) -> torch.nn.Module | None:
    for name in ("score", "classifier"):
        if isinstance(module := getattr(model, name, None), torch.nn.Module):
            return module
    return None


def _to_float32(module, args):
    return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


@functools.lru_cache(maxsize=4)
def _load(model_dir: str, device: str, dtype: str, weights_stamp: tuple):
    # weights_stamp is part of the cache key so that a model retrained into the same folder is reloaded.
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token_id is None:  # a decoder checkpoint without a pad token: pad with the EOS
        tokenizer.pad_token = tokenizer.eos_token
    # a plain folder, or LoRA adapters beside their backbone's path (rm `save: adapter`)
    model = load_reward_model(model_dir, tokenizer, torch_dtype(dtype))
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    if dtype != "fp32" and (head := _head(model)) is not None:
        head.float()  # the head's inputs are cast up: a score in fp32 rather than rounded to bf16/fp16
        head.register_forward_pre_hook(_to_float32)
    return model.to(device).eval(), tokenizer


def _weights_stamp(model_dir: str) -> tuple:
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    return tuple((f, os.stat(os.path.join(model_dir, f)).st_mtime_ns) for f in files)
