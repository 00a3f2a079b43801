"""`rft`: rejection-sampling fine-tuning. The starting policy samples plans for each training problem (the runner's
path: grammar on, the round's temperature), they are executed, and the policy is fine-tuned (TRL's SFTTrainer,
loss on the plan only) on the plans whose answer labels correct. Every execution is paid for in rollout tokens."""

from __future__ import annotations

import dataclasses
import time

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.grpo.methods import register_method
from orchrm_dagster.grpo.methods.base import (MethodContext, TrainingMethod, fine_tune, fresh_output_dir,
                                              method_prompts, supervised_args)
from orchrm_dagster.grpo.rewards import Rollouts
from orchrm_dagster.grpo.train import TrainOutcome, lora_config
from orchrm_dagster.trainer_args import logged_tokens


@engine_config
class RFTMethodSettings:
    samples_per_problem: int = Field(default=4, description="Plans sampled and executed per training problem")
    epochs: int = Field(default=1, description="Passes over the correct plans")
    batch_size: int = Field(default=2, description="Plans per optimizer step")
    max_length: int | None = Field(default=None, description="Truncate prompt + plan to this many tokens "
                                                             "(unset: never; plans are short)")

    def __post_init__(self) -> None:
        if min(self.samples_per_problem, self.epochs, self.batch_size) < 1:
            raise ValueError("rft: samples_per_problem, epochs and batch_size must be >= 1")


@dataclasses.dataclass(frozen=True)
class Sampled:
    samples: list  # PlanSample
    correct: list[bool]
    generation_tokens: int
    generation_seconds: float
    rollout_tokens: int


def sample_and_execute(context: MethodContext, config: RFTMethodSettings) -> Sampled:
    """The starting policy's plans for the round's problems, executed and labelled."""
    from orchrm_dagster.llm import build_backend
    from orchrm_dagster.orchestration import sample_plans

    settings = context.settings
    policy = dataclasses.replace(context.policy, temperature=settings.temperature)
    backend = build_backend(dataclasses.replace(policy, checkpoint_path=context.model_dir)
                            .backend_spec(context.subagents))
    started = time.perf_counter()
    samples = sample_plans(policy, backend, context.problems, config.samples_per_problem, seed=settings.seed)
    seconds = time.perf_counter() - started
    rollouts = Rollouts(context.executor)
    labeled = rollouts.run_samples(samples)
    correct = [s.plan_parses and item.correct for s, item in zip(samples, labeled)]
    return Sampled(samples, correct, sum(s.orchestrator_completion_tokens for s in samples), seconds, rollouts.tokens)


def train(config: RFTMethodSettings, context: MethodContext):
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    context.on_step(f"round {context.round_number}: RFT, {config.samples_per_problem} plans x "
                    f"{len(context.problems)} problems sampled and executed")
    sampled = sample_and_execute(context, config)
    kept = [s for s, ok in zip(sampled.samples, sampled.correct) if ok]
    spent = {"generation_tokens": sampled.generation_tokens, "generation_seconds": sampled.generation_seconds,
             "rollout_tokens": sampled.rollout_tokens}
    accuracy = sum(sampled.correct) / len(sampled.correct) if sampled.correct else None
    if not kept:
        return TrainOutcome(steps=0, mean_reward=accuracy, kl=None, log_history=[], **spent,
                            untrained=f"rft: none of the {len(sampled.samples)} plans sampled for "
                                      f"{len(context.problems)} training problems answered correctly; nothing to "
                                      f"fine-tune on, the policy is unchanged")
    context.on_step(f"round {context.round_number}: RFT, fine-tuning on {len(kept)} correct plans")
    fresh_output_dir(context)
    prompts = method_prompts(context, context.problems)
    from datasets import Dataset

    dataset = Dataset.from_list([{"prompt": prompts[s.problem_id],
                                  "completion": [{"role": "assistant", "content": s.plan}]} for s in kept])
    args = SFTConfig(**supervised_args(context, config.batch_size, config.epochs), max_length=config.max_length,
                     completion_only_loss=True)
    trainer = SFTTrainer(model=context.model_dir, args=args, train_dataset=dataset,
                         processing_class=AutoTokenizer.from_pretrained(context.model_dir),
                         peft_config=lora_config(context.settings))
    steps, history = fine_tune(trainer, context)
    return TrainOutcome(steps=steps, mean_reward=accuracy, kl=None, log_history=history, **spent,
                        training_tokens=logged_tokens(history))


METHOD = register_method(TrainingMethod(
    name="rft", description="rejection-sampling fine-tuning (TRL SFT) on the policy's own plans that executed "
                            "to a correct answer",
    config=RFTMethodSettings, train=train, reward_mode=lambda settings: "trajectory"))
