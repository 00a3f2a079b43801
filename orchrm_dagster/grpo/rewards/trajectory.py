"""`trajectory`: execute each plan with the sub-agents and reward a correct final answer (1, else 0): the expensive
baseline the reward model is measured against."""

from __future__ import annotations

from orchrm_dagster.engine_config import engine_config
from orchrm_dagster.grpo.rewards.base import PlanReward, RewardContext, RewardKind, Rollouts, choices_of
from orchrm_dagster.labels import label_answer


@engine_config
class TrajectoryRewardSettings:
    """No settings of its own: plans execute as `GRPOSettings.execution` says."""


class TrajectoryReward(PlanReward):
    def __init__(self, rollouts: Rollouts, margin: float):
        super().__init__(REWARD.name, margin)
        self.rollouts = rollouts

    def raw_rewards(self, plans, question, answer, answer_type, choices=None, **_) -> list[float]:
        results = self.rollouts.run_counted(self, question, plans, answer_type, choices)
        return [float(result.error is None and label_answer(kind, reference, result.final_answer, options).is_correct)
                for result, reference, kind, options in zip(results, answer, answer_type,
                                                            choices_of(choices, len(plans)))]


def build(config: TrajectoryRewardSettings, context: RewardContext) -> TrajectoryReward:
    return TrajectoryReward(context.rollouts, context.margin)


REWARD = RewardKind(name="trajectory", description="execute each plan and reward a correct answer (1, else 0)",
                    config=TrajectoryRewardSettings, build=build)
