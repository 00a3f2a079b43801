"""The decoding loop's KV caches: one that grows in place (the default, on every device), and a static one (an option
for a GPU).

transformers' DynamicCache appends each new token's keys and values with `torch.cat`, which copies the whole cache of
every layer at every step: with a 1,400-token few-shot prompt that copy was 46% of a decoding step on the CPU (the
model's matrix products 23%). The growing cache keeps each layer in a buffer with room to grow (doubling when full),
writes a step's keys in place and hands the attention a view of the filled part. Same values, same results.

On a GPU a decode step of a small model is mostly kernel launches: the static cache (transformers' StaticCache, one
buffer of batch x (prompt + new tokens) a layer) gives every step the same shapes, so the step can be compiled and
replayed as CUDA graphs (`transformers_decoding`), the way transformers' own `generate` runs with
`cache_implementation="static"`. It has not run on a GPU here: `auto` is the growing cache on every device, and
`bench/gpu_check.sh` is the check that would show whether the static one works and is faster there."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, StaticCache



INITIAL_ROOM = 256  # tokens of room a layer gets beyond what it holds when it (re)allocates


class GrowingLayer(DynamicLayer):
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._key_buffer = self._value_buffer = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        needed = length + key_states.shape[-2]
        if not self._views_of_buffers() or needed > self._key_buffer.shape[-2]:
            room = needed + max(INITIAL_ROOM, needed)
            self._key_buffer = _grown(self.keys if length else None, key_states, room)
            self._value_buffer = _grown(self.values if length else None, value_states, room)
        self._key_buffer[..., length:needed, :].copy_(key_states)
        self._value_buffer[..., length:needed, :].copy_(value_states)
        self.keys, self.values = self._key_buffer[..., :needed, :], self._value_buffer[..., :needed, :]
        return self.keys, self.values

    def _views_of_buffers(self) -> bool:
        """False before the first write and once something replaced the views (a batch reordering or repetition)."""
        return self._key_buffer is not None and self.keys.data_ptr() == self._key_buffer.data_ptr()


def _grown(held: torch.Tensor | None, new: torch.Tensor, room: int) -> torch.Tensor:
    """A buffer of `room` tokens holding `held` (None: nothing yet) at its start, shaped as `new` elsewhere."""
    batch, heads, _, dim = new.shape
    buffer = new.new_empty((batch, heads, room, dim))
    if held is not None:
        buffer[..., :held.shape[-2], :].copy_(held)
    return buffer


class GrowingCache(DynamicCache):
    """A DynamicCache of GrowingLayers (for models whose layers all attend over the whole sequence)."""

    def __init__(self):
        Cache.__init__(self, layer_class_to_replicate=GrowingLayer)


def decoding_cache(model) -> Cache | None:
    """A GrowingCache for a model whose layers all attend over the whole sequence; None (the model's own cache) for
    one with sliding-window, linear or otherwise special layers."""
    return GrowingCache() if full_attention_only(model) else None


def full_attention_only(model) -> bool:
    """Every layer of the model attends over the whole sequence (no sliding-window, linear or special layers)."""
    config = model.config.get_text_config(decoder=True)
    layer_types = getattr(config, "layer_types", None) or ()
    return not getattr(config, "sliding_window", None) and all(kind == "full_attention" for kind in layer_types)


STATIC_ROOM = 256  # a static cache's length is rounded up to a multiple of it: prompts of other lengths reuse it
STATIC_CACHES_KEPT = 4  # static caches kept per model (its most recently used shapes)
# model -> {shape: StaticCache}, the most recently used last
_STATIC_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_STATIC_CACHES_LOCK = threading.Lock()


def static_batch(rows: int, max_batch_size: int) -> int:
    """The rows a static cache holds for a batch of `rows`: the next power of two, at most `max_batch_size` (the
    decoding fills the rest with ghost rows), so that a round's batch sizes share a few shapes."""
    return min(1 << (rows - 1).bit_length(), max(rows, max_batch_size))


def filled_static_cache(model, prefilled: Cache, length: int) -> StaticCache:
    """A StaticCache with room for `length` tokens a row (rounded up to STATIC_ROOM) holding what `prefilled` (a
    GrowingCache of the prompts) holds: the model's cache of that shape, reset, when it holds one. A compiled decode
    step keeps its CUDA graphs on a reused cache (a new cache is new static addresses, and the graphs are recorded
    again); a model keeps its STATIC_CACHES_KEPT most recently used shapes."""
    first = prefilled.layers[0].keys
    shape = (first.shape[0], -(-length // STATIC_ROOM) * STATIC_ROOM, first.dtype, first.device)
    cache = _held_static_cache(model, shape)
    for index, layer in enumerate(prefilled.layers):
        cache.update(layer.keys, layer.values, index)
    return cache


def _held_static_cache(model, shape: tuple) -> StaticCache:
    with _STATIC_CACHES_LOCK:
        held = _STATIC_CACHES.setdefault(model, OrderedDict())
        cache = held.pop(shape, None)
        if cache is None:
            cache = StaticCache(config=model.config, max_cache_len=shape[1])
        else:
            cache.reset()
        held[shape] = cache
        while len(held) > STATIC_CACHES_KEPT:
            held.popitem(last=False)
    return cache


def held_static_caches(model) -> dict[tuple, StaticCache]:
    """The static caches held for `model`, by (batch, length, dtype, device), the most recently used last."""
    with _STATIC_CACHES_LOCK:
        return dict(_STATIC_CACHES.get(model, {}))


def release_static_caches(model=None) -> None:
    """Drops the static caches held for `model` (None: for every model) and, where CUDA is in use, returns the memory
    they held to the device: a held cache stays on it otherwise, through a training that needs the room. Only the
    caches: the CUDA graphs' own memory pool stays with torch's compiled call."""
    with _STATIC_CACHES_LOCK:
        if model is None:
            _STATIC_CACHES.clear()
        else:
            _STATIC_CACHES.pop(model, None)
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def static_cache_length(cache: StaticCache) -> int:
    """The tokens a row of `cache` has room for (its attention mask's width)."""
    return cache.layers[0].max_cache_len


def left_padded(sequences: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences as one left-padded batch: (ids, attention mask), each (sequences, longest)."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, sequence in enumerate(sequences):
        if sequence:
            ids[i, -len(sequence):] = torch.tensor(sequence)
            attention[i, -len(sequence):] = 1
    return ids.to(device), attention.to(device)
