"""The loop in Dagster's terms: its state read from the storage root and the instance's runs, and each step the
engine decides (`orchrm_dagster.loop.decide`) as a run request of a job with run config built from the generated config
classes. The sensors request these runs; `orchrm loop` (orchrm_dagster.app.loop) runs the same ones in-process."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import dagster as dg

from assets.config_bridge import from_engine
from assets.jobs import INGEST_JOB, ORCHESTRATE_JOB, PAIRS_JOB, RETRAIN_JOB, ROUND_JOB, SCORES_JOB
from assets.partitions import benchmarks, grpo_rounds, policies, run_batches
from assets.run_configs import ExecutionConfig, GRPORoundConfig, RewardModelConfig, SamplingConfig
from assets.loop_state import (FILES_TAG, LOOP_TAG, SOURCE_FILE_TAG, STEP_TAG, loop_state,  # noqa: F401 (callers')
                               rounds_sensor_on, run_failure_cause, step_runs)
from assets.runs import HOST_TAG
from orchrm_dagster.loop import Step
from orchrm_dagster.storage import StorageRoot, register_batches


# The job each kind of step runs (assets/jobs.py).
STEP_JOBS = {"ingest": INGEST_JOB, "pairs": PAIRS_JOB, "reward_model": RETRAIN_JOB, "scores": SCORES_JOB,
             "rollout": ORCHESTRATE_JOB, "round": ROUND_JOB}

def prepare_steps(root: StorageRoot, steps) -> list[Step]:
    """The steps with the batches this decision cut recorded in the batch index first, so the next decision (and
    the ingest run) finds their files taken; a batch another process cut first (one of its files is in another
    batch now) is dropped, and its files are cut again at the next decision."""
    recorded = set(register_batches(root, [step.cut for step in steps if step.cut is not None]))
    return [step for step in steps if step.cut is None or step.cut.batch_id in recorded]


@dataclass(frozen=True)
class StepRun:
    """A step as Dagster runs it: the job, the partition, the run config, the tags, the partitions to add first."""

    job_name: str
    partition_key: str | dg.MultiPartitionKey | None
    run_config: dg.RunConfig
    tags: dict[str, str]
    partitions: tuple[tuple[str, tuple[str, ...]], ...]  # (dynamic partitions definition, keys) to register

    def run_request(self, run_key: str) -> dg.RunRequest:
        return dg.RunRequest(job_name=self.job_name, partition_key=self.partition_key, run_config=self.run_config,
                             tags=self.tags, run_key=run_key)



def step_run(step: Step) -> StepRun:
    # the host: the sensor runs where the run launcher starts the run (local profile), so a run whose worker died
    # can be told apart from one on another machine
    tags = {STEP_TAG: step.key, LOOP_TAG: "1", "orchrm/attempt": str(step.attempt), HOST_TAG: socket.gethostname()}
    if step.kind == "ingest":
        tags |= {SOURCE_FILE_TAG: step.batch.name, FILES_TAG: str(max(len(step.batch.files), 1))}
        return StepRun(INGEST_JOB, step.batch.batch_id, dg.RunConfig(), tags, ((run_batches.name, (step.batch.batch_id,)),))
    if step.kind == "reward_model":
        return StepRun(RETRAIN_JOB, None, dg.RunConfig(ops={"reward_model": from_engine(RewardModelConfig,
                                                                                       step.reward_model)}), tags, ())
    if step.kind == "rollout":
        key = dg.MultiPartitionKey({"benchmark": step.benchmark, "policy": step.policy})
        return StepRun(ORCHESTRATE_JOB, key, orchestrate_run_config(step.sampling, step.execution), tags,
                       ((benchmarks.name, (step.benchmark,)), (policies.name, (step.policy,))))
    if step.kind == "round":
        return StepRun(ROUND_JOB, str(step.round), dg.RunConfig(ops={"grpo_round": from_engine(GRPORoundConfig,
                                                                                               step.grpo)}),
                       tags, ((grpo_rounds.name, (str(step.round),)),))
    return StepRun(STEP_JOBS[step.kind], None, dg.RunConfig(), tags, ())


def orchestrate_run_config(sampling, execution) -> dg.RunConfig:
    """Run config of the orchestrate job from the engine's sampling and execution settings."""
    return dg.RunConfig(ops={"orchestration_samples": from_engine(SamplingConfig, sampling),
                             "execution_artifacts": from_engine(ExecutionConfig, execution)})


def partition_requests(runs: list[StepRun]) -> list[dg.AddDynamicPartitionsRequest]:
    """One request per dynamic partitions definition, each key once (Dagster refuses a key asked for twice)."""
    wanted: dict[str, list[str]] = {}
    for run in runs:
        for name, keys in run.partitions:
            wanted.setdefault(name, [])
            wanted[name] += [key for key in keys if key not in wanted[name]]
    return [dg.AddDynamicPartitionsRequest(name, keys) for name, keys in wanted.items()]
