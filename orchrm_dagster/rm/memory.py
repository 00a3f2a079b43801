"""The memory a reward-model training needs, estimated from its settings and the backbone's shape before anything is
loaded: the weights in their dtype, gradients and AdamW's two moments for the trainable parameters only (with LoRA:
the adapters and the score head), and the activations kept for the backward pass at batch x max_length tokens (the
longest batch sets the peak, and the length-grouped sampler puts the longest inputs together).

Held against peaks measured on an H200 (torch.cuda.max_memory_allocated, 2026-11-28, issue #39: Llama shapes of 135M
and 1B parameters, 16 and 64 pairs of 1,024 tokens a side) within 5%, and against CPU peaks of bench/rm_scale.py
within 15% (`tests/rm/test_memory.py`); the shares of `layer_bytes` kept (KEPT_SHARE) were fitted to those
figures, the widths it counts were not. An 8B model trained
whole in fp32 needs 32 GB of weights + 32 GB of gradients + 64 GB of AdamW state before any activation, more than
one 80 GB GPU; with LoRA on bf16 weights it needs the 16 GB of weights and the activations.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

from orchrm_dagster.rm.config import RMTrainConfig

GB = 1e9
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "auto": 2}  # auto: a large checkpoint's own dtype is 16-bit as a rule
ADAPTER_BYTES = 4  # peft keeps LoRA adapters in fp32
MOMENTS = 2  # AdamW's, each in its parameter's dtype
# Bytes a transformer layer keeps per token for the backward pass in 16-bit compute (SDPA / flash attention keep no
# attention scores): its two norms' inputs, fp32 copies and outputs, q, k, v and RoPE's copies, the grouped keys
# and values repeated to full width, attention's output and o_proj's input (~28 hidden + 6 kv widths of 2 bytes,
# `layer_bytes`), and the MLP's gate, up, activation and product (4 intermediate widths). As measured on an H200:
# bf16 autocast on fp32 weights keeps 0.98-1.04 of it; on 16-bit weights 0.84-0.86 (no fp32 residual stream); LoRA
# on 16-bit weights 0.71-0.75 (the frozen projections keep no inputs for their own weights' gradients). fp32
# compute keeps every tensor in 4 bytes. On the CPU (peak RSS less the libraries, bench/rm_scale.py) 16-bit weights
# keep 1.5 of it, fp32 2.3 (the allocator's cache included), and LoRA as much as the whole model.
KEPT_SHARE = {"cuda": {"autocast": 1.0, "16-bit": 0.85, "fp32": 2 * 0.85},
              "cpu": {"autocast": 1.0, "16-bit": 1.5, "fp32": 2.3}}
LORA_KEPT_SHARE = {"cuda": 0.86, "cpu": 1.0}  # of the same weights trained whole
CHECKPOINTED_WIDTHS = 1  # with activation checkpointing each layer keeps its input alone (the residual stream)
ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "query", "key", "value", "dense", "qkv_proj", "c_attn")
CLASSIFIER_DROPS = ("lm_head.",)  # a causal LM's output head, which its sequence classifier replaces
MLP_WIDTH = 3.5  # an MLP projection's in + out is hidden + intermediate ~ hidden x (1 + 2.5..3.5)


@dataclass(frozen=True)
class ModelShape:
    params: float  # every parameter of the backbone
    hidden_size: int
    layers: int
    intermediate_size: int | None = None  # the MLP's width; unset: 4 x hidden
    kv_size: int | None = None  # keys' (and values') width: kv heads x head size; unset: hidden (no grouped queries)

    def layer_bytes(self) -> float:
        """Bytes a layer keeps per token for the backward pass in 16-bit compute (see KEPT_SHARE)."""
        intermediate = self.intermediate_size or 4 * self.hidden_size
        return 2 * (14 * self.hidden_size + 3 * (self.kv_size or self.hidden_size) + 4 * intermediate)


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
                    layers: int | None = None, device_gb: float | None = None,
                    autocast_bf16: bool | None = None, device: str = "cuda") -> MemoryEstimate:
    """What training `config` on a backbone of `params` parameters (a ModelShape, or the count with hidden_size and
    layers) needs on `device` (cuda | cpu), against `device_gb` of its memory (None: no verdict). autocast_bf16:
    whether the training runs in bf16 autocast (`use_bf16` of its precision and device); None: when the precision
    says bf16."""
    shape = params if isinstance(params, ModelShape) else ModelShape(float(params), hidden_size or 0, layers or 0)
    weight_bytes = BYTES[config.dtype]
    trainable = lora_parameters(shape, config) if config.lora else shape.params
    state_bytes = ADAPTER_BYTES if config.lora else weight_bytes  # a gradient and a moment: the parameter's dtype
    autocast = config.precision == "bf16" if autocast_bf16 is None else autocast_bf16
    return MemoryEstimate(weights_gb=(shape.params * weight_bytes + (trainable * ADAPTER_BYTES if config.lora else 0))
                          / GB, gradients_gb=trainable * state_bytes / GB,
                          optimizer_gb=trainable * MOMENTS * state_bytes / GB,
                          activations_gb=activation_bytes(shape, config, autocast, device) / GB,
                          trainable_params=trainable,
                          device_gb=device_gb)


def activation_bytes(shape: ModelShape, config: RMTrainConfig, autocast_bf16: bool, device: str = "cuda") -> float:
    """What the forward pass of a step's longest batch keeps for the backward pass on `device` (`KEPT_SHARE`)."""
    if config.dtype != "fp32":
        kind = "16-bit"
    else:
        kind = "autocast" if autocast_bf16 else "fp32"
    measured_on = "cpu" if device == "cpu" else "cuda"
    per_layer = shape.layer_bytes() * KEPT_SHARE[measured_on][kind] * (LORA_KEPT_SHARE[measured_on] if config.lora
                                                                        else 1.0)
    # a pair is two sequences; each data-parallel process holds the activations of its share of a step
    tokens = 2 * (config.batch_size // config.processes) * config.max_length
    if not config.gradient_checkpointing:
        return tokens * per_layer * shape.layers
    residual_bytes = 4 if kind != "16-bit" else 2
    # each layer's input, and the full set of the layer being recomputed
    return tokens * (CHECKPOINTED_WIDTHS * shape.hidden_size * residual_bytes * shape.layers + per_layer)


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
    intermediate = int(getattr(text, "intermediate_size", None) or 4 * hidden)
    heads = int(getattr(text, "num_attention_heads", 0) or 0)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_size = int(getattr(text, "head_dim", None) or (hidden // heads if heads else 0))
    kv_size = kv_heads * head_size or hidden
    counted = _safetensors_parameters(path) if os.path.isdir(path) else 0
    if not counted:
        counted = layers * (2 * hidden * (hidden + kv_size) + 3 * hidden * intermediate) + text.vocab_size * hidden
    return ModelShape(float(counted), hidden, layers, intermediate, kv_size)


def _safetensors_parameters(folder: str) -> int:
    total = 0
    for name in os.listdir(folder):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, name), "rb") as source:
            (length,) = struct.unpack("<Q", source.read(8))
            header = json.loads(source.read(length))
        for key, tensor in header.items():
            if key != "__metadata__" and not key.startswith(CLASSIFIER_DROPS):
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
