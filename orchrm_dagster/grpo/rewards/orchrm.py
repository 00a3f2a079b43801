"""`orchrm`: the champion reward model's score of each plan. It tokenizes for the reward model itself: no sub-agent
runs, so a round spends only the reward model's input tokens on rewards."""

from __future__ import annotations

from orchrm_dagster.engine_config import engine_config
from orchrm_dagster.grpo.rewards import register_reward
from orchrm_dagster.grpo.rewards.base import PlanReward, RewardContext, RewardKind


@engine_config
class OrchRMRewardSettings:
    """No settings of its own: the champion scores as `GRPOSettings.scoring` says."""


class OrchRMReward(PlanReward):
    def __init__(self, scorer, margin: float):
        super().__init__(REWARD.name, margin)
        self.scorer = scorer

    def raw_rewards(self, plans, question, **_) -> list[float]:
        scores, lengths = self.scorer.score_with_lengths(question, plans)
        self.spent(reward=sum(lengths))
        return scores


def build(config: OrchRMRewardSettings, context: RewardContext) -> OrchRMReward:
    return OrchRMReward(context.scorer, context.margin)


REWARD = register_reward(RewardKind(
    name="orchrm", description="the champion reward model's score of each plan (no rollout)",
    config=OrchRMRewardSettings, build=build))
