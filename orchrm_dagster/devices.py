"""Which torch device a model runs on: the one rule the reward model, the LLM backends and GRPO share."""

from __future__ import annotations

from typing import Literal

Device = Literal["auto", "cpu", "cuda"]
WeightDtype = Literal["fp32", "bf16", "fp16", "auto"]  # the dtype weights load in ("auto": the user of it decides)
DTYPE_NAMES = ("fp32", "bf16", "fp16")


def torch_dtype(name: str):
    """The torch dtype named fp32 | bf16 | fp16 ("auto" stays "auto": from_pretrained loads the checkpoint's own)."""
    import torch

    if name == "auto":
        return "auto"
    if name not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {name!r}; known: auto, {', '.join(DTYPE_NAMES)}")
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def resolve_device(device: str) -> str:
    """"auto" is CUDA when a GPU is visible, else the CPU; asking for CUDA without one is an error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' but no CUDA device is available")
    return device


def cpu_flags() -> str:
    """The CPU's matrix units that decide bf16 speed (AMX, AVX-512 BF16), printed beside every CPU timing."""
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "CPU flags unknown"
    wanted = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f")
    return "CPU " + ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in wanted)
