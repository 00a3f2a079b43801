"""What every policy training method shares: its registry entry, what a round hands it, and the TRL plumbing the
supervised methods (DPO, RFT) have in common. Heavy modules (the round, the trainers) are imported inside functions:
`GRPOSettings` reads this registry while it is being defined."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchrm_dagster.grpo.settings import GRPOSettings
    from orchrm_dagster.grpo.train import TrainOutcome
    from orchrm_dagster.environments import Executor
    from orchrm_dagster.llm import BackendSpec
    from orchrm_dagster.orchestration import PolicySpec, Problem
    from orchrm_dagster.storage import StorageRoot

MODEL_SUBDIR = "model"  # the new policy, under the round's output_dir: the checkpoint the round publishes


@dataclass(frozen=True)
class MethodContext:
    """What a round hands the method it trains with."""

    root: StorageRoot
    round_number: int
    model_dir: str  # the starting policy's model folder
    policy: PolicySpec  # the starting policy, shaped as the round samples it
    problems: list[Problem]  # the round's training problems
    held_out: list[Problem]  # never trained on
    settings: GRPOSettings
    scorer: object  # the champion reward model's scorer
    rm_version: int  # the champion's version
    subagents: BackendSpec
    executor: Executor  # executes plans in the round's environment (built once per round)
    output_dir: str  # the method saves the new policy under output_dir/model
    on_step: Callable[[str], None] = field(default=lambda text: None)

    @property
    def model_out(self) -> str:
        return os.path.join(self.output_dir, MODEL_SUBDIR)

    @property
    def training_logs(self):
        """Where the method's trainer reports to (by default logs/ in the new policy's folder, published with it)."""
        return self.settings.training_logs(self.output_dir, MODEL_SUBDIR)


@dataclass(frozen=True)
class TrainingMethod:
    name: str  # what `GRPOSettings.method` and `--method` call it; also its settings section's name
    description: str  # one line: the CLI's help and the settings section's description
    config: type  # an @engine_config class (possibly without fields): the method's own settings section
    train: Callable[[object, MethodContext], TrainOutcome]  # (its config, the round's context) -> the outcome
    reward_mode: Callable[[GRPOSettings], str]  # what the `reward_mode` columns record for a round of it


def method_prompts(context: MethodContext, problems: list[Problem]) -> dict[str, list[dict]]:
    """Each problem's prompt messages, rendered exactly as GRPO's dataset renders them, by problem_id."""
    from orchrm_dagster.grpo.round import plan_prompts

    return plan_prompts(context.policy, problems, context.settings)


def supervised_args(context: MethodContext, batch_size: int, epochs: int) -> dict:
    """The TrainingArguments a supervised method's TRL config shares: device and precision as GRPO decides them,
    no intermediate checkpoints (a round of either is short), a log entry per step."""
    from orchrm_dagster.devices import resolve_device
    from orchrm_dagster.grpo.train import memory_and_precision

    device = resolve_device(context.settings.device)
    return {"output_dir": context.output_dir, "per_device_train_batch_size": batch_size, "num_train_epochs": epochs,
            "learning_rate": context.settings.learning_rate, "seed": context.settings.seed,
            "use_cpu": device == "cpu", **memory_and_precision(context.settings, device), "logging_steps": 1,
            **context.training_logs.trainer_args(), "save_strategy": "no", "disable_tqdm": True}


def lora_config(settings: GRPOSettings):
    if not settings.lora:
        return None
    from peft import LoraConfig

    return LoraConfig(r=settings.lora_rank, lora_alpha=2 * settings.lora_rank, task_type="CAUSAL_LM")


def fresh_output_dir(context: MethodContext) -> None:
    """A supervised method starts over: nothing of an interrupted attempt is reused."""
    shutil.rmtree(context.output_dir, ignore_errors=True)
    os.makedirs(context.output_dir, exist_ok=True)


def fine_tune(trainer, context: MethodContext) -> tuple[int, list[dict]]:
    """Runs a TRL trainer and saves the (merged) policy with its tokenizer: (optimizer steps, log history)."""
    context.training_logs.attach(trainer, resumed=False)
    trainer.train()
    model = trainer.model.merge_and_unload() if context.settings.lora else trainer.model
    model.save_pretrained(context.model_out)
    trainer.processing_class.save_pretrained(context.model_out)
    return trainer.state.global_step, list(trainer.state.log_history)


def logged_tokens(log_history: list[dict]) -> int:
    """The tokens TRL's trainers count as read in training forward passes (their cumulative `num_tokens`: prompt and
    completion of every example, every epoch)."""
    return int(max((entry["num_tokens"] for entry in log_history if "num_tokens" in entry), default=0))


def logged_mean(log_history: list[dict], key: str) -> float | None:
    values = [float(entry[key]) for entry in log_history if key in entry]
    return sum(values) / len(values) if values else None
