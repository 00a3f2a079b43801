"""GRPO rewards, a registry: each module of this package registers one reward (a `RewardKind`) when imported;
another distribution adds one through the `orchrm.rewards` entry-point group, and `GRPOSettings.rewards` may name
one by dotted path (`my_pkg.my_module:my_reward`), as TRL takes a reward function's.

Adding a reward is one new module (its name, its `@engine_config` settings class, how to build the TRL callable from
its settings and the round's `RewardContext`) plus its test; `GRPOSettings.rewards`, its per-reward settings
section, the CLI's `--rewards` and the round read the registry. Every reward ends with the same rule (`rule.py`):
unparseable plans rank below every parseable plan of their group, and each group is normalized.
"""

from __future__ import annotations

from orchrm_dagster.grpo.rewards.base import (PlanReward, RewardContext, RewardKind, Rollouts, completion_text,
                                              plan_parses, raw_metric)
from orchrm_dagster.grpo.rewards.rule import group_rewards, held_out_rewards
from orchrm_dagster.registry import Registry

__all__ = ["REWARDS", "PlanReward", "RewardContext", "RewardKind", "Rollouts", "build_rewards", "completion_text",
           "group_rewards", "held_out_rewards", "plan_parses", "raw_metric", "register_reward", "reward_kinds",
           "reward_named"]

REWARDS: Registry[RewardKind] = Registry("GRPO reward", __name__, group="orchrm.rewards", skip=("base", "rule"),
                                         entry_type=RewardKind)
register_reward = REWARDS.register
reward_kinds = REWARDS.all
reward_named = REWARDS.named


def build_rewards(settings, context: RewardContext) -> list[PlanReward]:
    """The TRL reward callables of `settings.rewards` (a `GRPOSettings`), each built from its own settings section:
    the round's reward step."""
    kinds = [reward_named(name) for name in settings.rewards]
    return [kind.build(REWARDS.settings_of(settings.reward_settings, kind), context) for kind in kinds]
