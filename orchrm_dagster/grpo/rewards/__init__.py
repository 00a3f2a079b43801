"""GRPO rewards, a registry: every module of this package that defines `REWARD` (a `RewardKind`) is one reward.

Adding a reward is one new module (its name, its `@engine_config` settings class, how to build the TRL callable from
its settings and the round's `RewardContext`) plus its test; `GRPOSettings.rewards`, its per-reward settings
section, the CLI's `--rewards` and the round read the registry. Every reward ends with the same rule (`rule.py`):
unparseable plans rank below every parseable plan of their group, and each group is normalized.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from orchrm_dagster.grpo.rewards.base import (PlanReward, RewardContext, RewardKind, Rollouts, completion_text,
                                              plan_parses, raw_metric)
from orchrm_dagster.grpo.rewards.rule import group_rewards, held_out_rewards

__all__ = ["PlanReward", "RewardContext", "RewardKind", "Rollouts", "completion_text", "group_rewards",
           "held_out_rewards", "plan_parses", "raw_metric", "reward_kinds"]


@functools.cache
def reward_kinds() -> dict[str, RewardKind]:
    """Every registered reward by name, in module order."""
    kinds: dict[str, RewardKind] = {}
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        kind = getattr(importlib.import_module(f"{__name__}.{module.name}"), "REWARD", None)
        if kind is None:
            continue
        if kind.name in kinds or not kind.name.isidentifier():  # the name is a settings field too
            raise ValueError(f"GRPO reward name {kind.name!r} is taken or not an identifier")
        kinds[kind.name] = kind
    return kinds
