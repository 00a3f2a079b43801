"""The loop's state as the instance and the storage root hold it: the loop's runs by step key (in flight, succeeded,
failed and why) and whether the rounds' sensor is on. Apart from `assets.loop` (the run requests: jobs, run configs,
partitions), so that `orchrm status` reads the state without importing every asset's config."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import dagster as dg

from assets.runs import failure_cause
from orchrm_dagster.loop import LoopState, StepRuns, read_state
from orchrm_dagster.storage import StorageRoot

STEP_TAG, LOOP_TAG, SOURCE_FILE_TAG, FILES_TAG = "orchrm/step", "orchrm/loop", "orchrm/source_file", "orchrm/files"

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
