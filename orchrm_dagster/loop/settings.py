"""The config of the loop that keeps learning: when it stops, when the reward model retrains, and the work it
asks for (rollouts, rounds, reward-model training), the same whether the daemon's sensors or `orchrm loop` drive it."""

from __future__ import annotations

from typing import Literal

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.grpo import GRPOSettings, reward_model_sources, small_execution
from orchrm_dagster.loop.batching import BatchingSettings
from orchrm_dagster.orchestration import ExecutionSettings
from orchrm_dagster.rm import RMTrainConfig


@engine_config
class LoopSettings:
    rounds: int = Field(default=2, description="The loop stops after this many GRPO rounds in all (promoted or not)")
    token_budget: int | None = Field(
        default=None, ge=1, description="The loop starts no round once every token it spent reaches this: its "
                                        "rounds' (generation, reward, rollouts for rewards, training, held-out "
                                        "measures), its rollouts' "
                                        "(plans sampled and executed) and its reward-model retrainings' (training and "
                                        "rescoring) since the first round")
    retrain_on: Literal["stale", "new_pairs"] = Field(
        default="stale", description="stale: the reward model retrains when its champion is stale in a domain (its "
                                     "live accuracy on pairs it never trained on, the new batches' or a round's "
                                     "held-out plans', shown below its validation accuracy by staleness_margin) and "
                                     "new pairs arrived, or at the latest after champion_within_s; new_pairs: once "
                                     "retrain_min_new_pairs pairs arrived (also the rule while no domain has a "
                                     "champion)")
    retrain_min_new_pairs: int = Field(
        default=50, ge=0, description="retrain_on new_pairs (or no champion yet): the reward model retrains once "
                                      "this many pairs arrived since it last trained")
    staleness_margin: float = Field(
        default=0.02, ge=0, le=0.5, description="A champion is stale in a domain when the upper bound of its live "
                                                "accuracy lies below its validation accuracy minus this "
                                                "(bench/staleness.py, SIMULATED, accuracy 0.8 on 150 validation "
                                                "pairs: at 0.02 a champion as good as there is called stale in "
                                                "1.0% (a round's held-out plans) and 2.2% (a batch of 100 pairs) of "
                                                "checks, one that lost 0.2 in 47% and 93%)")
    staleness_level: float = Field(default=0.05, gt=0, lt=0.5,
                                   description="The live accuracy's one-sided upper bound's level")
    staleness_min_pairs: int = Field(default=20, ge=1, description="Fewer new pairs than this in a domain say "
                                                                   "nothing of its champion's staleness")
    rollouts: Literal["auto", "always"] = Field(
        default="auto", description="auto: a promoted checkpoint rolls out (executes plans only to make pairs) only "
                                    "when the champion of its domain is stale or has no live measure; always: "
                                    "after every promoted round")
    retrain_defer_s: float = Field(
        default=900.0, ge=0, description="While the next round waits for the last promoted round's rollouts to "
                                         "reach the pairs, a retraining that would not read them waits too, as long "
                                         "as the latest reward model is younger than this (0: never waits): the "
                                         "round's own retraining then reads them, and no other holds the reward "
                                         "model's slot meanwhile. With the soak's step times and a batch every "
                                         "2 min, 900 s (not 300) cut the wait from a round falling due to its start "
                                         "from 145 to 120 s (p50), the retrainings by a third, and ran 40 rounds in 4 "
                                         "h against 36; longer bounds changed nothing (bench/round_lanes.py, a "
                                         "SIMULATED model of the loop)")
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
    scores_within_s: float = Field(
        default=6 * 3600.0, ge=60, description="A batch waits at most this long for the champion's scores (from its "
                                              "runs' ingest, or a new champion): past it the UI marks rm_scores "
                                              "failing its freshness policy and `orchrm status` names the batch")
    champion_within_s: float = Field(
        default=7 * 86400.0, ge=60, description="A reward model trains at least this often while the loop runs: past "
                                                "it the UI marks reward_model failing its freshness policy and "
                                                "`orchrm status` says how old the champion is")
    batching: BatchingSettings = Field(default_factory=BatchingSettings,
                                       description="How landed files are cut into run batches (one ingest run and "
                                                   "one run_batches partition each)")

    def staleness_rule(self):
        from orchrm_dagster.rm import StalenessRule

        return StalenessRule(self.staleness_margin, self.staleness_level, self.staleness_min_pairs)

    def reward_model_config(self) -> RMTrainConfig:
        """Each retraining's config, with the pair sources of the rounds' recipe (a from-scratch loop trains on
        correct-over-incorrect pairs only)."""
        import dataclasses

        sources = reward_model_sources(self.round.start)
        return dataclasses.replace(self.reward_model, pair_sources=sources) if sources else self.reward_model

    def in_environment(self, environment: str | None, truth: str | None = None) -> "LoopSettings":
        """The loop with its rollouts and its rounds (trajectory rewards, held-out accuracy) executing plans in
        `environment` (and a simulated one's `truth`): both always in the same one."""
        import dataclasses

        round_ = dataclasses.replace(self.round, execution=self.round.execution.in_environment(environment, truth))
        return dataclasses.replace(self, round=round_,
                                   rollout_execution=self.rollout_execution.in_environment(environment, truth))

    def __post_init__(self) -> None:
        if self.rounds < 0 or self.rollout_samples < 1 or self.max_attempts < 1:
            raise ValueError("rounds must be >= 0, rollout_samples and max_attempts >= 1")
        rollouts, rounds = self.rollout_execution, self.round.execution
        if (rollouts.environment, rollouts.environment_settings) != (rounds.environment, rounds.environment_settings):
            raise ValueError(f"the loop's rollouts execute in {rollouts.environment!r} and its rounds in "
                             f"{rounds.environment!r} (or with other environment settings): set rollout_execution's "
                             f"and round.execution's environment alike, e.g. `orchrm loop --environment NAME`")
