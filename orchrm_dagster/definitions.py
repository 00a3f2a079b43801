"""The code location: only assembles what assets/ (the whole Dagster layer) defines."""

import multiprocessing
import sys

import dagster as dg

from assets.checks import (
    batch_ingested,
    champion_beats_chance,
    evaluation_held_out,
    every_referenced_run_labeled,
    pairs_mix_ratio,
    pairs_split_by_problem,
    pairs_unique,
    quarantine_rate,
    run_ids_unique,
)
from assets.deployment import executor
from assets.evaluation import evaluation, plan_scores
from assets.freshness import with_freshness
from assets.ingestion import run_batch_ingestion
from assets.grpo import grpo_round, no_reward_hacking
from assets.jobs import LOOP_JOBS, ROUND_JOBS, evaluation_job
from assets.labels import labels
from assets.orchestration import execution_artifacts, orchestration_samples
from assets.problems import problems
from assets.reward_model import pairs, reward_model, rm_scores
from assets.config_bridge import from_engine
from assets.resources import (
    LLMBackendResource,
    LoopResource,
    PolicyRegistry,
    RunDefaultsResource,
    StorageResource,
)
from assets.resources import policy_registry as policy_registry_of
from assets.sensors import LOOP_SENSOR_INTERVAL_S, loop_sensors, nightly_evaluation, orchestration_partitions_sensor
from assets.training_process import TrainingProcessResource
from orchrm_dagster.faults import fault_point
from orchrm_dagster.settings import OrchrmSettings, load_settings


def _in_a_run_worker() -> bool:
    """A process Dagster started to execute one run (the code server's subprocess, or `dagster api execute_run`):
    it loads the code location after its run was launched (STARTING) and before it starts (STARTED)."""
    return multiprocessing.parent_process() is not None or sys.argv[1:3] == ["api", "execute_run"]


def build_definitions(storage: StorageResource | None = None, llm: LLMBackendResource | None = None,
                      policy_registry: PolicyRegistry | None = None, loop: LoopResource | None = None,
                      sensor_interval_s: int = LOOP_SENSOR_INTERVAL_S,
                      training: TrainingProcessResource | None = None,
                      settings: OrchrmSettings | None = None) -> dg.Definitions:
    """The code location, its resources from `settings` (default: the settings file's, `load_settings`: a file that
    breaks its schema stops the location from loading, with the file, the line and the key); a resource given here
    replaces its section."""
    if _in_a_run_worker():
        fault_point("run.worker_starting")
    settings = settings or load_settings()
    loop = loop or from_engine(LoopResource, settings.loop)
    return dg.Definitions(
        assets=with_freshness([problems, run_batch_ingestion, labels, orchestration_samples, execution_artifacts,
                               pairs, reward_model, rm_scores, plan_scores, evaluation, grpo_round], loop.to_engine()),
        asset_checks=[run_ids_unique, batch_ingested, every_referenced_run_labeled, quarantine_rate, pairs_unique,
                      pairs_split_by_problem, pairs_mix_ratio, champion_beats_chance, evaluation_held_out,
                      no_reward_hacking],
        jobs=[*LOOP_JOBS, *ROUND_JOBS, evaluation_job],
        sensors=[*loop_sensors(sensor_interval_s), orchestration_partitions_sensor],
        schedules=[nightly_evaluation],
        executor=executor(),  # the deployment profile: local (default) or k8s
        resources={
            "storage": storage or from_engine(StorageResource, settings.storage),
            "llm": llm or from_engine(LLMBackendResource, settings.llm),
            "policy_registry": policy_registry or policy_registry_of(settings.policies),
            "loop": loop,
            "training": training or from_engine(TrainingProcessResource, settings.training),
            "run_defaults": from_engine(RunDefaultsResource, settings.run_defaults()),
        },
    )


defs = build_definitions()
