"""`trajectory`: execute each plan in the round's environment and reward a correct final answer (1, else 0): the
expensive baseline the reward model is measured against."""

from __future__ import annotations

from orchrm_dagster.engine_config import engine_config
from orchrm_dagster.grpo.rewards import register_reward
from orchrm_dagster.grpo.rewards.base import PlanReward, RewardContext, RewardKind, Rollouts


@engine_config
class TrajectoryRewardSettings:
    """No settings of its own: plans execute as `GRPOSettings.execution` says."""


class TrajectoryReward(PlanReward):
    def __init__(self, rollouts: Rollouts, margin: float):
        super().__init__(REWARD.name, margin)
        self.rollouts = rollouts

    def raw_rewards(self, plans, question, answer, answer_type, choices=None, **_) -> list[float]:
        return [float(item.correct) for item in self.rollouts.run_counted(self, question, plans, answer_type, answer,
                                                                          choices)]


def build(config: TrajectoryRewardSettings, context: RewardContext) -> TrajectoryReward:
    return TrajectoryReward(context.rollouts, context.margin)


REWARD = register_reward(RewardKind(
    name="trajectory", description="execute each plan and reward a correct answer (1, else 0)",
    config=TrajectoryRewardSettings, build=build))
