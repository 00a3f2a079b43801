"""Which KV cache the transformers backend decodes with: the setting (light: no torch), read by the spec and by
`kv_cache`, which makes the caches."""

from __future__ import annotations

from typing import Literal

from orchrm_dagster.engine_config import Field

DecodingCache = Literal["auto", "growing", "static"]


def decoding_cache_field():
    return Field(default="auto", description="The KV cache of the decoding loop: growing (buffers that grow in "
                                             "place; rows that finished leave the batch), or static (buffers of a "
                                             "few bucketed shapes, the decode step compiled and replayed as CUDA "
                                             "graphs on a GPU). auto: growing on every device, the cache that has "
                                             "run. static has not run on a GPU here; bench/gpu_check.sh is the check "
                                             "that would show whether it works and is faster")


def resolved_cache_kind(setting: DecodingCache, device: str) -> Literal["growing", "static"]:
    """The cache `setting` names on `device` (auto: growing on every device; static has not run on a GPU here)."""
    return "growing" if setting == "auto" else setting
