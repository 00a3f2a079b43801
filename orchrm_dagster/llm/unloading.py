"""Forgetting loaded models without importing the engine: a process that never decoded with transformers has loaded
no model, so there is nothing to unload and no reason to import torch to say so."""

from __future__ import annotations

import sys

_DECODING = "orchrm_dagster.llm.transformers_decoding"


def unload_model(model_path: str) -> None:
    """`transformers_decoding.unload_model` where that engine is loaded: forgets the models loaded from
    `model_path` and drops their static caches; nothing where it is not."""
    decoding = sys.modules.get(_DECODING)
    if decoding is not None:
        decoding.unload_model(model_path)
