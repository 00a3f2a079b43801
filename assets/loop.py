"""The loop in Dagster's terms: its state read from the storage root and the instance's runs, and each step the
engine decides (`orchrm_dagster.loop.decide`) as a run request of a job with run config built from the generated config
classes. The sensors request these runs; `orchrm loop` (orchrm_dagster.app.loop) runs the same ones in-process."""

from __future__ import annotations

import socket
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import dagster as dg

from assets.config_bridge import from_engine
from assets.jobs import INGEST_JOB, ORCHESTRATE_JOB, PAIRS_JOB, RETRAIN_JOB, ROUND_JOB, SCORES_JOB
from assets.partitions import benchmarks, grpo_rounds, policies, run_batches
from assets.run_configs import ExecutionConfig, GRPORoundConfig, RewardModelConfig, SamplingConfig
from assets.runs import HOST_TAG, failure_cause
from orchrm_dagster.loop import LoopState, Step, StepRuns, read_state
from orchrm_dagster.storage import StorageRoot, register_batches

STEP_TAG, LOOP_TAG, SOURCE_FILE_TAG, FILES_TAG = "orchrm/step", "orchrm/loop", "orchrm/source_file", "orchrm/files"

# The job each kind of step runs (assets/jobs.py).
STEP_JOBS = {"ingest": INGEST_JOB, "pairs": PAIRS_JOB, "reward_model": RETRAIN_JOB, "scores": SCORES_JOB,
             "rollout": ORCHESTRATE_JOB, "round": ROUND_JOB}

_NOT_FINISHED = (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
                 dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING)
_KEY_HISTORY = 50  # a step's newest runs read: failures past its latest success are counted up to this


def step_runs(instance: dg.DagsterInstance) -> StepRuns:
    """The loop's runs by step key: every one in flight (read whole: they are few), and each key's successes and
    failures looked up by the key itself when the engine asks, so no run ages out of a window, however many runs
    the loop has made."""
    in_flight = frozenset(
        record.dagster_run.tags[STEP_TAG]
        for record in instance.get_run_records(filters=dg.RunsFilter(tags={LOOP_TAG: "1"},
                                                                     statuses=list(_NOT_FINISHED)))
        if STEP_TAG in record.dagster_run.tags)
    by_key = RunsByKey(instance)
    return StepRuns(in_flight, by_key.succeeded, by_key.failures)


class RunsByKey:
    """A step key's finished runs, read from the instance by the key's tag the first time the key is asked for (one
    query a key an evaluation): whether its latest finished run succeeded, and its failures since its latest
    success (how many, the latest one's cause)."""

    def __init__(self, instance: dg.DagsterInstance):
        self.instance = instance
        self._found: dict[str, tuple[bool, tuple[int, str] | None]] = {}
        self.succeeded = _Succeeded(self)
        self.failures = _Failures(self)

    def of(self, key: str) -> tuple[bool, tuple[int, str] | None]:
        if key not in self._found:
            records = self.instance.get_run_records(
                filters=dg.RunsFilter(tags={LOOP_TAG: "1", STEP_TAG: key}), limit=_KEY_HISTORY)  # newest first
            succeeded, failed = False, []
            for record in records:
                run = record.dagster_run
                if run.status == dg.DagsterRunStatus.SUCCESS:
                    succeeded = True
                    break  # failures before the latest success no longer count
                if run.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED):
                    failed.append(run.run_id)
            failures = (len(failed), run_failure_cause(self.instance, failed[0])) if failed else None
            self._found[key] = (succeeded, failures)
        return self._found[key]

    def asked(self) -> list[str]:
        return list(self._found)


class _Succeeded(Collection):
    """The keys whose latest finished run succeeded (iterating gives those among the keys asked for so far)."""

    def __init__(self, runs: RunsByKey):
        self.runs = runs

    def __contains__(self, key) -> bool:
        return isinstance(key, str) and self.runs.of(key)[0]

    def __iter__(self):
        return (key for key in self.runs.asked() if key in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Failures(Mapping):
    """key -> (failed runs since its latest success, the latest one's cause), for keys that failed."""

    def __init__(self, runs: RunsByKey):
        self.runs = runs

    def __getitem__(self, key: str) -> tuple[int, str]:
        failures = self.runs.of(key)[1] if isinstance(key, str) else None
        if failures is None:
            raise KeyError(key)
        return failures

    def __iter__(self):
        return (key for key in self.runs.asked() if self.runs.of(key)[1] is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


_CAUSES: dict[str, str] = {}  # run id -> cause: a failed run's cause never changes, and sensors ask every few seconds


def run_failure_cause(instance: dg.DagsterInstance, run_id: str) -> str:
    """Why a run failed: its failed steps' errors, or, for a run whose worker died (kill -9, the OOM killer), what
    the code server said when it found the process gone."""
    if run_id not in _CAUSES:
        if len(_CAUSES) > 10_000:
            _CAUSES.clear()
        _CAUSES[run_id] = _read_failure_cause(instance, run_id)
    return _CAUSES[run_id]


def _read_failure_cause(instance: dg.DagsterInstance, run_id: str) -> str:
    kinds = {dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE, dg.DagsterEventType.ENGINE_EVENT}
    return failure_cause(entry.dagster_event for entry in instance.all_logs(run_id, of_type=kinds))


def loop_state(instance: dg.DagsterInstance, root: StorageRoot, rounds_on: bool | None = None) -> LoopState:
    """The loop's state; `rounds_on` None: whether the rounds' sensor is switched on in this instance."""
    return read_state(root, step_runs(instance), rounds_sensor_on(instance) if rounds_on is None else rounds_on)


ROUNDS_SENSOR = "grpo_loop_sensor"


def rounds_sensor_on(instance: dg.DagsterInstance) -> bool:
    """Whether the rounds' sensor is switched on (it is off until a user starts it)."""
    from dagster._core.scheduler.instigation import InstigatorStatus, InstigatorType

    return any(state.instigator_name == ROUNDS_SENSOR and state.status == InstigatorStatus.RUNNING
               for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR))


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
