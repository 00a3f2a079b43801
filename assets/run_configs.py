"""Run config of the assets: generated from the engine's configs (one definition per field, in the engine), plus
the thresholds of the asset checks."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from assets.config_bridge import dagster_config
from orchrm_dagster.evaluation import EvaluationSettings
from orchrm_dagster.grpo import GRPOSettings
from orchrm_dagster.ingest import IngestSettings
from orchrm_dagster.labels import LabelSettings
from orchrm_dagster.orchestration import ExecutionSettings, PlanSamplingSettings
from orchrm_dagster.pairs import PairRules
from orchrm_dagster.problems import ProblemsSettings
from orchrm_dagster.rm import RMTrainConfig, ScoringSettings

IngestConfig = dagster_config(IngestSettings, "IngestConfig")
LabelConfig = dagster_config(LabelSettings, "LabelConfig")
ProblemsConfig = dagster_config(ProblemsSettings, "ProblemsConfig")
SamplingConfig = dagster_config(PlanSamplingSettings, "SamplingConfig")
ExecutionConfig = dagster_config(ExecutionSettings, "ExecutionConfig")
PairsConfig = dagster_config(PairRules, "PairsConfig")
RewardModelConfig = dagster_config(RMTrainConfig, "RewardModelConfig")
ScoringConfig = dagster_config(ScoringSettings, "ScoringConfig")
EvaluationConfig = dagster_config(EvaluationSettings, "EvaluationConfig")
GRPORoundConfig = dagster_config(GRPOSettings, "GRPORoundConfig")


class QuarantineCheckConfig(dg.Config):
    warn_rate: float = Field(default=0.05, description="Warn when a batch quarantines more than this share of lines")


class PairChecksConfig(dg.Config):
    mix_tolerance: float = Field(default=0.10, description="Allowed gap between the pair mix and the configured one")


def run_settings(context, config, defaults):
    """What an asset runs with: `defaults` (the settings file's section, `RunDefaultsResource`) with each field this
    run's own config gives replacing the file's (a nested section given is taken whole). The run config as given is
    read, not the one Dagster completed with the class's defaults, so an asset's fields left out keep the file's."""
    import dataclasses

    given = context.run.run_config.get("ops", {}).get(context.op_def.name, {}).get("config") or {}
    engine = config.to_engine()
    return dataclasses.replace(defaults, **{name: getattr(engine, name) for name in given}) if given else defaults
