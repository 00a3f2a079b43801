"""The memory a reward-model training needs, estimated from its settings and the backbone's shape before anything is
loaded: the weights in their dtype, gradients and AdamW's two moments for the trainable parameters only (with LoRA:
the adapters and the score head), and the activations kept for the backward pass at batch x length.

A rough figure, meant to say early (and why) that a configuration cannot fit: an 8B model trained whole in fp32 needs
32 GB of weights + 32 GB of gradients + 64 GB of AdamW state before any activation, more than one 80 GB GPU; with LoRA
on bf16 weights it needs the 16 GB of weights and little else.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

from orchrm_dagster.rm.config import RMTrainConfig

GB = 1e9
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "auto": 2}  # auto: a large checkpoint's own dtype is 16-bit as a rule
ADAM_BYTES = 8  # two fp32 moments per trainable parameter
# Activations kept per token and layer for the backward pass, in multiples of hidden x bytes of the compute dtype
# (Korthikanti et al. 2022, without the attention scores that SDPA / flash attention do not keep): 34 for a
# transformer layer; with activation checkpointing only each layer's input (1), plus one layer's full set at a time.
ACTIVATIONS_PER_LAYER = 34
CHECKPOINTED_PER_LAYER = 1
ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "query", "key", "value", "dense", "qkv_proj", "c_attn")
MLP_WIDTH = 3.5  # an MLP projection's in + out is hidden + intermediate ~ hidden x (1 + 2.5..3.5)


@dataclass(frozen=True)
class ModelShape:
    params: float  # every parameter of the backbone
    hidden_size: int
    layers: int


@dataclass(frozen=True)
class MemoryEstimate:
    weights_gb: float
    gradients_gb: float
    optimizer_gb: float
    activations_gb: float
    trainable_params: float
    device_gb: float | None

    @property
    def total_gb(self) -> float:
        return self.weights_gb + self.gradients_gb + self.optimizer_gb + self.activations_gb

    @property
    def fits(self) -> bool | None:
        return None if self.device_gb is None else self.total_gb <= self.device_gb

    @property
    def message(self) -> str:
        parts = (f"weights {self.weights_gb:.1f} GB + gradients {self.gradients_gb:.1f} GB + AdamW "
                 f"{self.optimizer_gb:.1f} GB + activations {self.activations_gb:.1f} GB = {self.total_gb:.1f} GB "
                 f"({self.trainable_params:,.0f} trainable parameters)")
        if self.device_gb is None:
            return f"training needs about {parts}"
        verdict = "fits in" if self.fits else "does not fit in"
        return f"training needs about {parts}: {verdict} {self.device_gb:.0f} GB"

    def as_dict(self) -> dict:
        return {"weights_gb": round(self.weights_gb, 2), "gradients_gb": round(self.gradients_gb, 2),
                "optimizer_gb": round(self.optimizer_gb, 2), "activations_gb": round(self.activations_gb, 2),
                "total_gb": round(self.total_gb, 2), "trainable_params": int(self.trainable_params),
                "device_gb": self.device_gb, "fits": self.fits, "message": self.message}


def memory_estimate(params: float | ModelShape, config: RMTrainConfig, hidden_size: int | None = None,
                    layers: int | None = None, device_gb: float | None = None) -> MemoryEstimate:
    """What training `config` on a backbone of `params` parameters (a ModelShape, or the count with hidden_size and
    layers) needs, against `device_gb` of device memory (None: no verdict)."""
    shape = params if isinstance(params, ModelShape) else ModelShape(float(params), hidden_size or 0, layers or 0)
    weight_bytes = BYTES[config.dtype]
    trainable = lora_parameters(shape, config) if config.lora else shape.params
    # LoRA adapters are kept in fp32 (peft upcasts them); full training's gradients take the weights' dtype
    gradient_bytes = 4 if config.lora else weight_bytes
    compute_bytes = 2 if config.precision == "bf16" or config.dtype in ("bf16", "fp16") else weight_bytes
    # a pair is two sequences; each data-parallel process holds the activations of its share of a step
    tokens = 2 * (config.batch_size // config.processes) * config.max_length
    per_layer = CHECKPOINTED_PER_LAYER if config.gradient_checkpointing else ACTIVATIONS_PER_LAYER
    kept = tokens * shape.hidden_size * compute_bytes * per_layer * shape.layers
    if config.gradient_checkpointing:  # the layer being recomputed holds its full set
        kept += tokens * shape.hidden_size * compute_bytes * ACTIVATIONS_PER_LAYER
    extra_weights = (trainable * 4) if config.lora else 0.0  # the adapters themselves
    return MemoryEstimate(weights_gb=(shape.params * weight_bytes + extra_weights) / GB,
                          gradients_gb=trainable * gradient_bytes / GB, optimizer_gb=trainable * ADAM_BYTES / GB,
                          activations_gb=kept / GB, trainable_params=trainable, device_gb=device_gb)


def lora_parameters(shape: ModelShape, config: RMTrainConfig) -> float:
    """The adapters' parameters (rank r on each adapted module: r x (in + out)) plus the score head (hidden x 1)."""
    targets = config.lora_target_modules or ("q_proj", "v_proj")  # peft's default for decoders
    if tuple(targets) == ("all-linear",):
        targets = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    per_layer = sum(2.0 if any(name.endswith(a) for a in ATTENTION_MODULES) else 1.0 + MLP_WIDTH for name in targets)
    return shape.layers * per_layer * shape.hidden_size * config.lora_r + shape.hidden_size


def backbone_shape(path: str) -> ModelShape:
    """The backbone's parameter count, hidden size and layers, read from its folder without loading it: config.json
    and the safetensors headers (or, for a hub id, its config and a count from the shape)."""
    from transformers import AutoConfig

    model_config = AutoConfig.from_pretrained(path)
    text = model_config.get_text_config()
    hidden, layers = int(text.hidden_size), int(text.num_hidden_layers)
    counted = _safetensors_parameters(path) if os.path.isdir(path) else 0
    if not counted:
        intermediate = int(getattr(text, "intermediate_size", 4 * hidden) or 4 * hidden)
        counted = layers * (4 * hidden * hidden + 3 * hidden * intermediate) + text.vocab_size * hidden
    return ModelShape(float(counted), hidden, layers)


def _safetensors_parameters(folder: str) -> int:
    total = 0
    for name in os.listdir(folder):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, name), "rb") as source:
            (length,) = struct.unpack("<Q", source.read(8))
            header = json.loads(source.read(length))
        for key, tensor in header.items():
            if key != "__metadata__":
                count = 1
                for size in tensor["shape"]:
                    count *= size
                total += count
    return total


def device_memory_gb(device: str) -> float | None:
    """The memory of the device training runs on: the GPU's, or the machine's RAM on the CPU."""
    try:
        if device == "cuda":
            import torch

            return torch.cuda.get_device_properties(0).total_memory / GB
        import psutil

        return psutil.virtual_memory().total / GB
    except Exception:  # noqa: BLE001 - an estimate without a verdict is still worth logging
        return None
