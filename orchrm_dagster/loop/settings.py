"""The config of the loop that keeps learning: when it stops, when the reward model retrains, and the work it
asks for (rollouts, rounds, reward-model training), the same whether the daemon's sensors or `orchrm loop` drive it."""

from __future__ import annotations

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.grpo import GRPOSettings, reward_model_sources, small_execution
from orchrm_dagster.orchestration import ExecutionSettings
from orchrm_dagster.rm import RMTrainConfig


@engine_config
class LoopSettings:
    rounds: int = Field(default=2, description="The loop stops after this many GRPO rounds in all (promoted or not)")
    token_budget: int | None = Field(
        default=None, description="The loop stops once its rounds' generation, reward and rollout tokens reach this")
    retrain_min_new_pairs: int = Field(
        default=50, description="The reward model retrains once this many pairs arrived since it last trained")
    rollout_samples: int = Field(default=2, description="Plans a promoted checkpoint samples and executes per "
                                                         "training problem of its round")
    rollout_seed: int = Field(default=0, description="Seeds the rollouts' samples")
    rollout_base: bool = Field(default=True, description="The base policy executes the same problems, so the "
                                                         "checkpoint's plans are preferred over its "
                                                         "(specialized-over-base pairs)")
    rollout_execution: ExecutionSettings = Field(
        default_factory=small_execution, description="Sub-agents of the rollouts: short answers, so a CPU loop "
                                                     "ends in minutes (raise them on a GPU)")
    round: GRPOSettings = Field(default_factory=GRPOSettings, description="Each GRPO round")
    reward_model: RMTrainConfig = Field(default_factory=RMTrainConfig,
                                        description="Each retraining of the reward model")
    max_attempts: int = Field(default=2, description="Runs of one step before the loop gives up on it and shows "
                                                     "its cause (a batch then stays failed until it lands again)")

    def reward_model_config(self) -> RMTrainConfig:
        """Each retraining's config, with the pair sources of the rounds' recipe (a from-scratch loop trains on
        correct-over-incorrect pairs only)."""
        import dataclasses

        sources = reward_model_sources(self.round.start)
        return dataclasses.replace(self.reward_model, pair_sources=sources) if sources else self.reward_model

    def __post_init__(self) -> None:
        if self.rounds < 0 or self.rollout_samples < 1 or self.max_attempts < 1:
            raise ValueError("rounds must be >= 0, rollout_samples and max_attempts >= 1")
