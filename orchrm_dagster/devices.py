"""Which torch device a model runs on: the one rule the reward model, the LLM backends and GRPO share."""

from __future__ import annotations

from typing import Literal

Device = Literal["auto", "cpu", "cuda"]


def resolve_device(device: str) -> str:
    """"auto" is CUDA when a GPU is visible, else the CPU; asking for CUDA without one is an error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' but no CUDA device is available")
    return device
