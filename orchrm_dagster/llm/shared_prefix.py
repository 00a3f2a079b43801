"""Decoding rows that share their prompts' text without a copy of it each (cascade attention): the tokens every
prompt of the batch starts with (the common prefix: a few-shot orchestrator prompt before its question) are
prefilled and held once, each distinct prompt's own tokens after it (its tail: the question) once, and each row's
cache holds only what the row generated.

A round decodes many plans of few prompts that differ only in their last tokens: a GRPO group is 8 plans of one
prompt, a held-out batch 32 plans of 8 problems whose 1,400-token prompts share all but their questions. With a copy
per row, the prefill forwarded every distinct prompt whole, and every decode step read every row's copy; here the
prefill forwards the common prefix once and each question once, and a step reads the common prefix once for the
whole batch and each question once for its rows.

The attention is exact: each row's query is scored against the common prefix, its prompt's tail (the tail's left
padding masked) and its own generated keys, and the three parts are merged as one softmax (each part's maximum,
sum and weighted values, rescaled to the largest maximum): the same arithmetic as attention over the row's whole
cache, in another order. It runs as a transformers attention function (`AttentionInterface`), switched on only
while a decode loop runs (`attending`); the prefill, and every other forward pass, run the model's own. Models whose
attention is plain scaled dot-product over the whole sequence only (`SHARED_MODEL_TYPES`); others decode with
per-row copies."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from orchrm_dagster.llm.kv_cache import left_padded

ATTENTION = "orchrm_shared_prefix"
# model types whose attention is `attention_interface(module, query, key, value, mask, scaling=...)` over every
# position, with nothing added to the scores (no softcapping, sinks, sliding windows or alibi)
SHARED_MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3"})
MIN_COMMON_TOKENS = 16  # a shorter common prefix is left in the prompts' tails


@dataclass
class SharedPrefix:
    """The prompts' keys and values: their common prefix once, each distinct prompt's tail once, and which prompt
    each row of the batch samples from."""

    common_keys: list[torch.Tensor]  # per layer: (1, kv heads, common tokens, head dim); empty without one
    common_values: list[torch.Tensor]
    keys: list[torch.Tensor]  # per layer: (prompts, kv heads, tail width, head dim), the tails left-padded
    values: list[torch.Tensor]
    mask: torch.Tensor  # (prompts, tail width) bool: a tail's own tokens (False: its left padding)
    prompt_of_row: list[int]  # for each row now in the batch, its prompt

    @property
    def runs(self) -> Iterator[tuple[int, int, int]]:
        """(prompt, first row, row after the last) of each run of consecutive rows sampling from one prompt."""
        start = 0
        for row in range(1, len(self.prompt_of_row) + 1):
            if row == len(self.prompt_of_row) or self.prompt_of_row[row] != self.prompt_of_row[start]:
                yield self.prompt_of_row[start], start, row
                start = row

    def keep_rows(self, keep: list[int]) -> None:
        """Only the rows at `keep` (indices of the rows now in the batch) stay, in that order."""
        self.prompt_of_row = [self.prompt_of_row[k] for k in keep]


def shares_prefixes(model) -> bool:
    """Whether decoding `model` reads each prompt once: its attention is one `SHARED_MODEL_TYPES` knows, and it runs
    on the CPU (on a GPU the path has not run here: `bench/gpu_check.sh` does not measure it yet)."""
    config = model.config.get_text_config(decoder=True)
    return (config.model_type in SHARED_MODEL_TYPES and not getattr(config, "sliding_window", None)
            and torch.device(getattr(model, "device", "cpu")).type == "cpu")


def common_length(prompts: Sequence[Sequence[int]]) -> int:
    """The tokens every prompt starts with, leaving each at least its last token (whose logits start decoding); 0
    when they share fewer than MIN_COMMON_TOKENS."""
    limit = min(len(p) for p in prompts) - 1
    length = 0
    while length < limit and all(p[length] == prompts[0][length] for p in prompts):
        length += 1
    return length if length >= MIN_COMMON_TOKENS else 0


def prefill(model, prompts: Sequence[Sequence[int]], pad_token_id: int, new_cache) -> tuple[torch.Tensor,
                                                                                            SharedPrefix]:
    """Each row's last logits (rows, vocabulary) and the prefix its decoding reads: the common prefix forwarded once,
    then each distinct prompt's tail once after it. `new_cache()` makes an empty growing cache."""
    device = model.device
    first = {tuple(p): row for row, p in reversed(list(enumerate(prompts)))}
    distinct = [list(prompts[row]) for row in sorted(first.values())]
    number = {tuple(p): i for i, p in enumerate(distinct)}
    prompt_of_row = [number[tuple(p)] for p in prompts]
    common = common_length(distinct)
    cache = new_cache()
    if common:
        model(input_ids=torch.tensor([distinct[0][:common]], device=device),
              position_ids=torch.arange(common, device=device)[None], past_key_values=cache, use_cache=True,
              logits_to_keep=1)
    common_keys = [layer.keys for layer in cache.layers]
    common_values = [layer.values for layer in cache.layers]
    tails = new_cache()
    for index, (keys, values) in enumerate(zip(common_keys, common_values)):  # each tail reads the common prefix
        tails.update(keys.expand(len(distinct), -1, -1, -1).contiguous(),
                     values.expand(len(distinct), -1, -1, -1).contiguous(), index)
    input_ids, tail_mask = left_padded([p[common:] for p in distinct], pad_token_id, device)
    positions = common + (tail_mask.cumsum(-1) - 1).clamp(min=0)
    attention = torch.cat([tail_mask.new_ones((len(distinct), common)), tail_mask], dim=1)
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, past_key_values=tails,
                use_cache=True, logits_to_keep=1)
    logits = out.logits[:, -1, :][torch.tensor(prompt_of_row, device=device)]  # a copy per row: the grammar masks it
    # the tails alone, copied out of the buffers that also hold each tail's copy of the common prefix (freed here)
    keys = [layer.keys[..., common:, :].clone() for layer in tails.layers]
    values = [layer.values[..., common:, :].clone() for layer in tails.layers]
    return logits, SharedPrefix(common_keys, common_values, keys, values, tail_mask.bool(), prompt_of_row)


@contextmanager
def attending(model) -> Iterator[None]:
    """The model's attention is the shared-prefix one while the block runs (the caller holds the model: a forward
    pass without a `shared_prefix` argument is refused meanwhile); its own again after."""
    _register()
    config = model.config
    held = config._attn_implementation
    config._attn_implementation = ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = held


_REGISTERED = False


def _register() -> None:
    global _REGISTERED
    if not _REGISTERED:
        from transformers import AttentionInterface

        AttentionInterface.register(ATTENTION, shared_prefix_attention)
        _REGISTERED = True


def shared_prefix_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask,
                            dropout: float = 0.0, scaling: float | None = None,
                            shared_prefix: SharedPrefix | None = None, **kwargs):
    """Attention of each row's query over the common prefix (read once for every row), its prompt's tail (once for
    the rows of a run) and its own generated tokens (`key`, `value`: the rows' caches, this step's included). Returns
    (rows, 1, heads, head dim), as transformers' attention functions do. A forward pass without `shared_prefix` while
    it is switched on is refused: transformers builds no attention mask for it, so padding would go unmasked."""
    if shared_prefix is None:
        raise RuntimeError("the shared-prefix attention is switched on (`attending`) for a forward pass without its "
                           "prefix: only the decoding loop it was switched on for may run")
    rows, heads, queries, dim = query.shape
    if queries != 1:
        raise ValueError("shared-prefix attention decodes one token a step")
    kv_heads = key.shape[1]
    per_kv = heads // kv_heads
    scale = scaling if scaling is not None else dim ** -0.5
    layer = module.layer_idx
    grouped = query.reshape(rows, kv_heads, per_kv, dim)  # head h reads kv head h // per_kv
    stacked = grouped.transpose(0, 1).reshape(kv_heads, rows * per_kv, dim)  # each kv head's queries, row by row
    common = None
    if shared_prefix.common_keys:
        common = _part(torch.matmul(stacked, shared_prefix.common_keys[layer][0].transpose(-1, -2)) * scale,
                       shared_prefix.common_values[layer][0])
    out = query.new_empty(rows, 1, heads, dim)
    for prompt, start, end in shared_prefix.runs:
        columns = slice(start * per_kv, end * per_kv)
        tail_scores = torch.matmul(stacked[:, columns], shared_prefix.keys[layer][prompt].transpose(-1, -2)) * scale
        parts = [_part(tail_scores.masked_fill(~shared_prefix.mask[prompt], float("-inf")),
                       shared_prefix.values[layer][prompt]),
                 _own_part(grouped[start:end], key[start:end], value[start:end], scale)]
        if common is not None:
            parts.append(tuple(t[:, columns] for t in common))
        merged = _merged(parts)  # (kv heads, rows of the run x per_kv, head dim)
        out[start:end] = merged.reshape(kv_heads, end - start, per_kv, dim).permute(1, 0, 2, 3).reshape(
            end - start, 1, heads, dim).to(out.dtype)
    return out, None


def _part(scores: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One part of a softmax: (each query's largest score, the sum of exp(score - it), the values so weighted)."""
    scores = scores.float()
    top = scores.amax(dim=-1, keepdim=True)
    weights = torch.exp(scores - top)
    return top, weights.sum(dim=-1, keepdim=True), torch.matmul(weights.to(values.dtype), values).float()


def _own_part(grouped, keys, values, scale: float):
    """The part of a run's rows over their own generated tokens, laid out as the prefix parts are."""
    rows, kv_heads, per_kv, _ = grouped.shape
    scores = torch.matmul(grouped, keys.transpose(-1, -2)) * scale  # (rows, kv heads, per_kv, generated)
    top, total, weighted = _part(scores, values)
    return tuple(t.transpose(0, 1).reshape(kv_heads, rows * per_kv, t.shape[-1]) for t in (top, total, weighted))


def _merged(parts) -> torch.Tensor:
    """The softmax-weighted values over every part's keys together."""
    top = torch.stack([p[0] for p in parts]).amax(dim=0)
    total = sum(p[1] * torch.exp(p[0] - top) for p in parts)
    return sum(p[2] * torch.exp(p[0] - top) for p in parts) / total
