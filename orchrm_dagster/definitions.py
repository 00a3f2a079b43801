"""The code location: only assembles what assets/ and the glue define."""

import dagster as dg

from assets.checks import (
    champion_beats_chance,
    every_referenced_run_labeled,
    pairs_mix_ratio,
    pairs_split_by_problem,
    pairs_unique,
    quarantine_rate,
    run_ids_unique,
)
from assets.ingestion import run_batch_ingestion
from assets.jobs import ingest_run_batch_job, orchestrate_job
from assets.labels import labels
from assets.orchestration import execution_artifacts, orchestration_samples
from assets.problems import problems
from assets.reward_model import pairs, reward_model, rm_scores
from assets.sensors import landing_zone_sensor, orchestration_partitions_sensor
from orchrm_dagster.glue.resources import (
    LLMBackendResource,
    PolicyRegistry,
    StorageResource,
    default_storage_resource,
    embedded_policies,
)


def build_definitions(storage: StorageResource | None = None, llm: LLMBackendResource | None = None,
                      policy_registry: PolicyRegistry | None = None) -> dg.Definitions:
    return dg.Definitions(
        assets=[problems, run_batch_ingestion, labels, orchestration_samples, execution_artifacts, pairs,
                reward_model, rm_scores],
        asset_checks=[run_ids_unique, every_referenced_run_labeled, quarantine_rate, pairs_unique,
                      pairs_split_by_problem, pairs_mix_ratio, champion_beats_chance],
        jobs=[ingest_run_batch_job, orchestrate_job],
        sensors=[landing_zone_sensor, orchestration_partitions_sensor],
        resources={
            "storage": storage or default_storage_resource(),
            "llm": llm or LLMBackendResource(),
            "policy_registry": policy_registry or embedded_policies(),
        },
    )


defs = build_definitions()
