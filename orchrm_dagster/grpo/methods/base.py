"""What every policy training method shares: its registry entry, what a round hands it, and the TRL plumbing the
supervised methods (DPO, RFT) have in common, built on what lies below the methods (`grpo.problems`, `grpo.train`).

The round's settings reach a method as the `GRPOSettings` the round holds, read by their fields: neither this package
nor anything it imports names the class, since `grpo.settings` reads this registry (and so imports every method)
while the class is being defined. The settings stand above the methods, as the round does."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchrm_dagster.devices import resolve_device
from orchrm_dagster.grpo.problems import plan_prompts
from orchrm_dagster.grpo.progress import step_callback
from orchrm_dagster.grpo.train import MODEL_SUBDIR, TrainOutcome, memory_and_precision, save_policy
from orchrm_dagster.processes import by_first_process

if TYPE_CHECKING:
    from orchrm_dagster.environments import Executor
    from orchrm_dagster.llm import BackendSpec
    from orchrm_dagster.orchestration import PolicySpec, Problem
    from orchrm_dagster.storage import StorageRoot


@dataclass(frozen=True)
class MethodContext:
    """What a round hands the method it trains with."""

    root: StorageRoot
    round_number: int
    model_dir: str  # the starting policy's model folder
    policy: PolicySpec  # the starting policy, shaped as the round samples it
    problems: list[Problem]  # the round's training problems
    held_out: list[Problem]  # never trained on
    settings: Any  # the round's GRPOSettings
    scorer: object  # the champion reward model's scorer
    rm_version: int  # the champion's version
    subagents: BackendSpec
    executor: Executor  # executes plans in the round's environment (built once per round)
    output_dir: str  # the method saves the new policy under output_dir/MODEL_SUBDIR (`train.save_policy`)
    on_step: Callable[[str], None] = field(default=lambda text: None)

    @property
    def training_logs(self):
        """Where the method's trainer reports to (by default logs/ in the new policy's folder, published with it)."""
        return self.settings.training_logs(self.output_dir, MODEL_SUBDIR)


@dataclass(frozen=True)
class TrainingMethod:
    name: str  # what `GRPOSettings.method` and `--method` call it; also its settings section's name
    description: str  # one line: the CLI's help and the settings section's description
    config: type  # an @engine_config class (possibly without fields): the method's own settings section
    train: Callable[[Any, MethodContext], TrainOutcome]  # (its config, the round's context) -> the outcome
    reward_mode: Callable[[Any], str]  # (the round's GRPOSettings) -> what its `reward_mode` columns record


def method_prompts(context: MethodContext, problems: list[Problem]) -> dict[str, list[dict]]:
    """Each problem's prompt messages, rendered exactly as GRPO's dataset renders them, by problem_id."""
    return plan_prompts(context.policy, problems, context.settings)


def supervised_args(context: MethodContext, batch_size: int, epochs: int) -> dict:
    """The TrainingArguments a supervised method's TRL config shares: device and precision as GRPO decides them,
    no intermediate checkpoints (a round of either is short), a log entry per step."""
    device = resolve_device(context.settings.device)
    processes = context.settings.processes
    if batch_size % processes:
        raise ValueError(f"{context.settings.method}: batch_size {batch_size} must be a multiple of processes "
                         f"{processes}: each process takes an equal share of a step")
    per_process = batch_size // processes  # the global batch, whatever the processes
    return {"output_dir": context.output_dir, "per_device_train_batch_size": per_process, "num_train_epochs": epochs,
            "learning_rate": context.settings.learning_rate_on(device), "seed": context.settings.seed,
            "use_cpu": device == "cpu", **memory_and_precision(context.settings, device), "logging_steps": 1,
            **context.training_logs.trainer_args(), "save_strategy": "no", "disable_tqdm": True}


def fresh_output_dir(context: MethodContext) -> None:
    """A supervised method starts over: nothing of an interrupted attempt is reused."""
    def start_over():
        shutil.rmtree(context.output_dir, ignore_errors=True)
        os.makedirs(context.output_dir, exist_ok=True)

    by_first_process(start_over)  # once: another process must not remove what the first has begun to write


def shared_dataset(dataset, context: MethodContext):
    """The dataset as every data-parallel process reads it: from one folder on disk (under the method's folder),
    since TRL's trainers cache what they compute from a dataset beside its files, the first process writing and the
    others reading (DPO's reference log-probabilities); an in-memory dataset's cache is in each process's own
    temporary folder, out of the others' sight. One process uses the dataset as it is."""
    if context.settings.processes == 1:
        return dataset
    from datasets import load_from_disk

    folder = os.path.join(context.output_dir, "dataset")
    by_first_process(lambda: dataset.save_to_disk(folder))
    return load_from_disk(folder)


def fine_tune(trainer, context: MethodContext) -> tuple[int, list[dict]]:
    """Runs a TRL trainer and saves the (merged) policy with its tokenizer: (optimizer steps, log history)."""
    context.training_logs.attach(trainer, resumed=not trainer.is_world_process_zero())  # the first starts them over
    trainer.add_callback(step_callback())
    trainer.train()
    save_policy(trainer, context.settings, context.output_dir)
    return trainer.state.global_step, list(trainer.state.log_history)
