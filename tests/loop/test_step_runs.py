"""The loop's runs, looked up by each step's own key on a real SQLite instance: past 5,000 runs (the window the loop
once read) a rollout that succeeded long ago is not asked again, and a step's failures still count."""

from __future__ import annotations

import os
import tempfile

import dagster as dg
import pytest
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus
from dagster._core.utils import make_new_run_id

from assets.loop import LOOP_TAG, STEP_TAG, step_runs
from orchrm_dagster.loop import LoopSettings, LoopState, Round, decide

LATER_RUNS = 5_100  # more than the 5,000 newest runs the loop read before


@pytest.fixture
def instance():
    # on tmpfs where there is one: each run written is a SQLite commit, 2.4 ms there against 5.5 ms on disk
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as home:
        with dg.DagsterInstance.from_config(home) as instance:
            yield instance


def add_run(instance, key: str, status: DagsterRunStatus) -> None:
    instance.add_run(DagsterRun(job_name="step", run_id=make_new_run_id(), status=status,
                                tags={LOOP_TAG: "1", STEP_TAG: key}))


def test_past_5000_runs_a_rollout_that_succeeded_long_ago_is_not_asked_again_and_failures_still_count(instance):
    add_run(instance, "rollout:1:grpo-r0001", DagsterRunStatus.SUCCESS)
    add_run(instance, "rollout:1:smollm2-base", DagsterRunStatus.SUCCESS)
    add_run(instance, "ingest:old.jsonl:1:1", DagsterRunStatus.FAILURE)
    for number in range(LATER_RUNS):  # a long stream since: every batch ingested, paired, scored
        add_run(instance, f"ingest:b{number}.jsonl:1:1", DagsterRunStatus.SUCCESS)
    add_run(instance, "pairs:now", DagsterRunStatus.STARTED)

    runs = step_runs(instance)
    assert "rollout:1:grpo-r0001" in runs.succeeded and "rollout:1:smollm2-base" in runs.succeeded
    assert runs.failures.get("ingest:old.jsonl:1:1", (0, ""))[0] == 1
    assert "rollout:2:grpo-r0002" not in runs.succeeded and runs.failures.get("ingest:b7.jsonl:1:1") is None
    assert set(runs.in_flight) == {"pairs:now"}

    rolled_out = LoopState(ingested_batches=1, inputs="i", pairs_inputs="i", pairs=100, new_pairs=0, champion=1,
                           rounds=(Round(1, "grpo-r0001", True, 10, "gsm8k", "smollm2-base", ("p1",)),), runs=runs)
    asked = decide(rolled_out, LoopSettings(rounds=3)).steps
    assert [s.key for s in asked] == ["round:2"]  # not the rollouts again
