"""LoRA, one way for every trainer (the reward model, the policy's rounds): the adapters' config, how a trained model is
saved (adapters merged into a plain model, or the adapters alone) and how a saved model is loaded back.

A merged folder is an ordinary transformers model: loading it needs no peft. An adapter folder holds peft's
`adapter_config.json` and `adapter_model.safetensors` (the LoRA weights, plus the modules peft trains whole: a
sequence classifier's `score` / `classifier` head) and the tokenizer; it names its base model
(`base_model_name_or_path`), which `load_trained` loads first. peft is imported only when LoRA is used.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from orchrm_dagster.faults import fault_point

ADAPTER_CONFIG = "adapter_config.json"
ALL_LINEAR = "all-linear"


def lora_config(rank: int, alpha: int | None = None, target_modules: Sequence[str] = (), task_type: str = "CAUSAL_LM",
                model_type: str | None = None):
    """peft's `LoraConfig`: adapters of `rank` (alpha: 2 x rank unless given) on `target_modules`; empty: peft's
    default modules for `model_type` (Llama, Qwen, Gemma, Mistral: q_proj and v_proj; BERT: query and value), or every
    linear layer but the output head ("all-linear") for an architecture peft has no default for. task_type SEQ_CLS
    keeps a sequence classifier's head (`score` / `classifier`) trainable and saves it with the adapters."""
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else 2 * rank, task_type=task_type,
                      target_modules=resolve_target_modules(target_modules, model_type))


def resolve_target_modules(target_modules: Sequence[str], model_type: str | None = None) -> list[str] | str | None:
    """The modules LoRA adapts: the given names; none given: None (peft's default for the architecture) when peft
    knows `model_type` (or it is not given), else "all-linear"."""
    if target_modules:
        return ALL_LINEAR if tuple(target_modules) == (ALL_LINEAR,) else list(target_modules)
    if model_type is None:
        return None
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    return None if model_type in TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING else ALL_LINEAR


def is_adapted(model) -> bool:
    """Whether `model` is a peft model (trains adapters)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def save_trained(model, tokenizer, folder: str, merge: bool = True, fault: str | None = None):
    """Save a trained model and its tokenizer to `folder`: a peft model with its adapters merged into the weights
    (merge=True: a plain transformers folder) or as its adapters alone (merge=False); any other model as it is.
    Returns the model saved (merging unloads the adapters from `model`); `fault`: the fault point (`faults`) between
    the weights and the tokenizer."""
    os.makedirs(folder, exist_ok=True)
    if is_adapted(model) and merge:
        model = model.merge_and_unload()
    if is_adapted(model):
        # the embeddings are frozen; a row added for a pad token is never read (scores are read before padding)
        model.save_pretrained(folder, save_embedding_layers=False)
    else:
        model.save_pretrained(folder)
    if fault is not None:
        fault_point(fault)
    tokenizer.save_pretrained(folder)
    return model


def is_adapter_folder(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, ADAPTER_CONFIG))


def adapter_base(folder: str) -> str:
    """The base model an adapter folder was trained on."""
    import json

    with open(os.path.join(folder, ADAPTER_CONFIG)) as source:
        return json.load(source)["base_model_name_or_path"]


def load_trained(folder: str, auto_class, tokenizer, dtype=None, merge: bool = True, **kwargs):
    """The model saved by `save_trained` in `folder`, either kind: a merged (plain) folder loads with
    `auto_class.from_pretrained`; an adapter folder loads its base model, sized to `tokenizer` (a pad token added in
    training) with the tokenizer's pad token, then the adapters, merged into the weights unless merge=False.
    `kwargs` go to from_pretrained (num_labels=1 for a reward model's base)."""
    if not is_adapter_folder(folder):
        return auto_class.from_pretrained(folder, dtype=dtype)
    from peft import PeftModel

    base = auto_class.from_pretrained(adapter_base(folder), dtype=dtype, **kwargs)
    if base.get_input_embeddings().weight.shape[0] < len(tokenizer):
        base.resize_token_embeddings(len(tokenizer))
    if tokenizer.pad_token_id is not None:
        base.config.pad_token_id = tokenizer.pad_token_id
    model = PeftModel.from_pretrained(base, folder)
    return model.merge_and_unload() if merge else model
