"""`grpo`: TRL's GRPOTrainer on plans sampled from the policy, rewarded by `GRPOSettings.rewards` (by default the
champion reward model's score: no rollouts)."""

from __future__ import annotations

import dataclasses

from orchrm_dagster.engine_config import engine_config
from orchrm_dagster.grpo.methods import register_method
from orchrm_dagster.grpo.methods.base import MethodContext, TrainingMethod
from orchrm_dagster.grpo.problems import plan_dataset
from orchrm_dagster.grpo.rewards import RewardContext, Rollouts, build_rewards
from orchrm_dagster.grpo.train import train_round
from orchrm_dagster.trainer_args import logged_tokens


@engine_config
class GRPOMethodSettings:
    """No settings of its own: GRPO is configured by the round's fields (steps, group_size, rewards, kl_beta...)."""


def train(config: GRPOMethodSettings, context: MethodContext):
    settings = context.settings
    rollouts = Rollouts(context.executor)
    rewards = build_rewards(settings, RewardContext(context.scorer, rollouts, settings.device,
                                                    settings.unparseable_margin))
    context.on_step(f"round {context.round_number}: GRPO, {settings.steps} steps x {settings.group_size} plans "
                    f"({settings.reward_label} reward)")
    dataset = plan_dataset(context.policy, context.problems, settings)
    trained = train_round(context.model_dir, dataset, rewards, settings, context.output_dir)
    return dataclasses.replace(trained, reward_tokens=sum(r.reward_tokens for r in rewards),
                               rollout_tokens=rollouts.tokens, training_tokens=logged_tokens(trained.log_history))


METHOD = register_method(TrainingMethod(
    name="grpo", description="GRPO on sampled plans, rewarded by `rewards` (the reward model: no rollouts)",
    config=GRPOMethodSettings, train=train, reward_mode=lambda settings: settings.reward_label))
