"""Trainer arguments the reward model's and the round's trainers share, by the names the installed transformers gives
them (the GPU image runs transformers 5.17, this project 5.23)."""

from __future__ import annotations

import dataclasses
import functools


@functools.cache
def _training_argument_names() -> frozenset[str]:
    from transformers import TrainingArguments

    return frozenset(field.name for field in dataclasses.fields(TrainingArguments))


def activation_checkpointing_arg(enabled: bool) -> dict:
    """The argument that turns activation checkpointing on or off: `activation_checkpointing` where transformers has
    renamed it, `gradient_checkpointing` before (5.17). Always set: TRL 1.16's configs default the old name to True."""
    renamed = "activation_checkpointing" in _training_argument_names()
    return {"activation_checkpointing" if renamed else "gradient_checkpointing": enabled}


def logged_tokens(log_history: list[dict]) -> int:
    """The tokens TRL's trainers count as read in training forward passes (their cumulative `num_tokens`: every
    example's tokens, every epoch; with several processes, all of them)."""
    return int(max((entry["num_tokens"] for entry in log_history if "num_tokens" in entry), default=0))
