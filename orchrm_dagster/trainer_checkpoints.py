"""Trainer checkpoints by the clock, one rule for every trainer (the reward model's, the policy round's): a checkpoint
to resume a killed training from is written once `checkpoint_minutes` have passed since the training started or since
the last one, never at a training's last step (the trained model is saved right after, and a checkpoint of a 1B model
in fp32 with its AdamW state is ~13 GB), and the seconds spent writing them are counted.

transformers' own schedule is off (save_strategy "no"); `TimedCheckpoints` sets `control.should_save` instead, which
the trainer honours whatever the strategy. A LoRA trainer's checkpoint holds the adapters (and the modules peft trains
whole, such as a score head) and their optimizer state alone (`adapter_checkpoints`): transformers saves a peft model
through its `save_pretrained`, which copies the whole embedding matrix too once it was resized (the reward model's
added pad token), though it is frozen; the optimizer already holds the trainable parameters' state only.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from orchrm_dagster.engine_config import Field
from orchrm_dagster.lora import is_adapted, save_trained

MODEL_SUBDIR = "model"  # the trained model (safetensors + tokenizer), under a training's output_dir beside its
# trainer checkpoints, and in the store's folder of the version or round it is published as

CHECKPOINTS_KEPT = 2  # the last, and the one before it should the last be cut short by a kill
TRAINER_STATE = "trainer_state.json"  # transformers writes it last into a checkpoint: its mark of a whole one


def checkpoint_minutes_field(default: float | None = 10.0):
    return Field(default=default, ge=0, description="Write a trainer checkpoint (an interrupted training resumes "
                                                    "from the last one) once this many minutes have passed since "
                                                    "the last; never at the last step, whose model is saved anyway. "
                                                    "0: after every step; unset: none")


def checkpoint_args() -> dict:
    """The trainer arguments `TimedCheckpoints` needs: no checkpoints on transformers' own schedule, two kept."""
    return {"save_strategy": "no", "save_total_limit": CHECKPOINTS_KEPT}


def timed_checkpoints(minutes: float | None, clock: Callable[[], float] = time.monotonic):
    """A transformers `TrainerCallback` that writes checkpoints by the clock (`CheckpointClock`)."""
    return _callback_class()(minutes, clock)


@functools.cache
def _callback_class() -> type:
    from transformers import TrainerCallback  # here: a config importing the field must not import transformers

    class TimedCheckpoints(CheckpointClock, TrainerCallback):
        pass

    return TimedCheckpoints


@functools.cache
def adapter_checkpoints(trainer_class: type) -> type:
    """`trainer_class` whose checkpoints of a peft model hold its trained weights alone (not its frozen embeddings)."""

    class AdapterCheckpoints(trainer_class):
        def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
            if not is_adapted(self.model):
                return super()._save(output_dir, state_dict)
            if self.args.should_save:  # the first process (a LoRA model is not sharded across processes)
                save_trained(self.model, self.processing_class, output_dir or self.args.output_dir, merge=False)

    AdapterCheckpoints.__name__ = AdapterCheckpoints.__qualname__ = trainer_class.__name__
    return AdapterCheckpoints


class CheckpointClock:
    """Asks the trainer for a checkpoint once `minutes` have passed since the training (or this call's part of it)
    began or the last checkpoint was written; counts the checkpoints written and the seconds they took.

    The seconds of a checkpoint run from the last event before it (the step's end, or its log or evaluation) to
    `on_save`: the trainer's `_save_checkpoint` and nothing else. Where several processes train, the first one's
    clock decides for all: each writes its own part of a checkpoint (its random state)."""

    def __init__(self, minutes: float | None, clock: Callable[[], float] = time.monotonic):
        self.minutes = minutes
        self.clock = clock
        self.checkpoints = 0
        self.seconds = 0.0
        self._last_checkpoint = self._last_event = clock()

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_checkpoint = self._last_event = self.clock()

    def on_step_end(self, args, state, control, **kwargs):
        self._last_event = self.clock()
        if self.due(state.global_step, state.max_steps):
            control.should_save = True
        return control

    def on_log(self, args, state, control, **kwargs):
        self._last_event = self.clock()

    def on_evaluate(self, args, state, control, **kwargs):
        self._last_event = self.clock()

    def on_save(self, args, state, control, **kwargs):
        now = self.clock()
        self.checkpoints += 1
        self.seconds += now - self._last_event
        self._last_checkpoint = self._last_event = now

    def due(self, step: int, last_step: int) -> bool:
        if self.minutes is None or step >= last_step:
            return False
        return first_process_says(self.clock() - self._last_checkpoint >= 60 * self.minutes)


def first_process_says(decision: bool) -> bool:
    """`decision` as the first process made it, in every process of a data-parallel training (as is, alone)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return decision
    said = [decision]
    dist.broadcast_object_list(said, src=0)
    return bool(said[0])


def checkpoint_step(checkpoint: str | Path | None) -> int:
    """The global step a `checkpoint-N` folder was written at (0 for None or another name)."""
    match = re.search(r"checkpoint-(\d+)$", str(checkpoint or ""))
    return int(match.group(1)) if match else 0


def last_whole_checkpoint(output_dir: str | Path) -> str | None:
    """The last trainer checkpoint in `output_dir` a training can resume from, after removing those a kill cut short.

    transformers writes a checkpoint's weights, optimizer, scheduler and random states first and its
    `trainer_state.json` last: a folder without it, or with one cut off mid-write, is not a checkpoint (resuming from
    it fails), and it is removed so that the trainer's rotation, which keeps the last `CHECKPOINTS_KEPT`, keeps whole
    ones."""
    checkpoints = sorted(Path(output_dir).glob("checkpoint-*"), key=checkpoint_step)
    while checkpoints and not is_whole(checkpoints[-1]):
        shutil.rmtree(checkpoints.pop(), ignore_errors=True)
    return str(checkpoints[-1]) if checkpoints else None


def is_whole(checkpoint: str | Path) -> bool:
    """Whether a trainer checkpoint was written to its end: its `trainer_state.json`, written last, parses."""
    try:
        return isinstance(json.loads(Path(checkpoint, TRAINER_STATE).read_text()), dict)
    except (OSError, ValueError):
        return False
