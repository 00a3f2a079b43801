"""Run config of the assets, with defaults that run on the embedded setup."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from orchrm_dagster.ingest.validate import Limits
from orchrm_dagster.labels.batch import LabelSettings


class IngestConfig(dg.Config):
    max_record_bytes: int = Field(default=Limits.max_record_bytes, description="Longer lines are quarantined")
    max_field_chars: int = Field(default=Limits.max_field_chars, description="Longer text fields are quarantined")
    max_raw_chars: int = Field(default=Limits.max_raw_chars, description="How much of a bad line quarantine keeps")
    rows_per_group: int = Field(default=20_000, description="Parquet row-group size while streaming")

    def limits(self) -> Limits:
        return Limits(self.max_record_bytes, self.max_field_chars, self.max_raw_chars)


class LabelConfig(dg.Config):
    qa_f1_threshold: float | None = Field(
        default=None, description="Short-answer QA counts as correct at this token F1; unset = exact match only"
    )
    answer_types: dict[str, str] = Field(
        default_factory=dict, description="benchmark -> math | qa | choice, overriding the built-in mapping"
    )

    def settings(self) -> LabelSettings:
        return LabelSettings(self.qa_f1_threshold, dict(self.answer_types))


class ProblemsConfig(dg.Config):
    extra_files: list[str] = Field(
        default_factory=list, description="More problem files (JSONL, the shipped benchmarks' schema)"
    )


class QuarantineCheckConfig(dg.Config):
    warn_rate: float = Field(default=0.05, description="Warn when a batch quarantines more than this share of lines")


class SamplingConfig(dg.Config):
    n_samples: int = Field(default=2, description="Plans sampled per problem (the paper: 8)")
    problem_limit: int = Field(default=4, description="The first N problems of the benchmark")
    problem_ids: list[str] = Field(default_factory=list, description="Exactly these problems instead")
    seed: int = 0


class ExecutionConfig(dg.Config):
    subagent_temperature: float = 0.0
    subagent_max_new_tokens: int = Field(default=192, description="Per sub-agent call")
    plan_timeout_s: float = Field(default=300.0, description="Wall-clock budget per plan; over it the run fails")
    sc_samples: int = Field(default=5, description="SCAgent: samples per vote")
    debate_rounds: int = 2
    reflexion_rounds: int = 1
    concurrent_plans: int = Field(default=8, description="Plans executed at once; with an in-process backend "
                                  "(transformers, vllm) their sub-agent calls share batches")


class PairsConfig(dg.Config):
    specialized_per_problem: int = Field(default=12, description="Cap of specialized-over-base pairs per problem")
    correct_per_problem: int = Field(default=4, description="Cap of correct-over-incorrect pairs per problem")
    mix_specialized: int = 3
    mix_correct: int = 1
    validation_fraction: float = 0.10
    seed: int = 0
    import_files: list[str] = Field(default_factory=list, description="Pairs in the published OrchRM format "
                                    "(JSONL: input, chosen, rejected, source) to train on as well")

    def rules(self):
        from orchrm_dagster.pairs import PairRules

        return PairRules(self.specialized_per_problem, self.correct_per_problem, self.mix_specialized,
                         self.mix_correct, self.validation_fraction, self.seed)


class RewardModelConfig(dg.Config):
    backbone: str | None = Field(default=None, description="Sequence-classification model path; unset = MiniLM")
    max_length: int = 256
    learning_rate: float = 5e-5
    epochs: float = 1.0
    batch_size: int = 16
    precision: str = Field(default="auto", description="auto | fp32 | bf16 (training; scoring is always fp32)")
    center_rewards_coefficient: float | None = None
    seed: int = 0
    save_steps: int = 50
    device: str = "auto"
    max_train_pairs: int | None = Field(default=None, description="Train on a deterministic subset of this size")
    champion_margin: float = Field(default=0.0, description="A challenger may trail the champion by this much")

    def train_config(self):
        from orchrm_dagster.rm.config import RMTrainConfig

        return RMTrainConfig(backbone=self.backbone, max_length=self.max_length, learning_rate=self.learning_rate,
                             epochs=self.epochs, batch_size=self.batch_size, precision=self.precision,
                             center_rewards_coefficient=self.center_rewards_coefficient, seed=self.seed,
                             save_steps=self.save_steps, device=self.device)


class ScoringConfig(dg.Config):
    device: str = "auto"
    batch_size: int = 32
    max_length: int = 256


class PairChecksConfig(dg.Config):
    mix_tolerance: float = Field(default=0.10, description="Allowed gap between the pair mix and the configured one")
