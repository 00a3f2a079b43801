"""A reward-model checkpoint loaded for scoring, whichever way it was saved: merged (a plain transformers folder, as
every full fine-tuning and a LoRA training with save="merged" writes it) or as LoRA adapters (save="adapter": peft's
adapter files and the score head, loaded on the backbone they name and merged there). Scoring is in fp32."""

from __future__ import annotations

import torch
from transformers import AutoModelForSequenceClassification

from orchrm_dagster.lora import load_trained


def load_reward_model(model_dir: str, tokenizer, dtype=torch.float32, merge: bool = True):
    """The sequence classifier saved in model_dir (merged or adapter checkpoint; an adapter checkpoint's adapters
    merged into the weights unless merge=False), its pad token the tokenizer's."""
    model = load_trained(model_dir, AutoModelForSequenceClassification, tokenizer, dtype=dtype, merge=merge,
                         num_labels=1)
    if model.config.pad_token_id is None and tokenizer.pad_token_id is not None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model
