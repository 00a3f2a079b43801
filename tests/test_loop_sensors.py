"""The loop's sensors and `orchrm loop` ask the same function and request the same runs; the retrain rule reads real
pair tables."""

from __future__ import annotations

import dataclasses

import dagster as dg
import pyarrow as pa
import pytest

from assets import loop as dagster_loop
from assets import loop_state as loop_state_module
from assets.resources import LoopResource, StorageResource
from assets.sensors import grpo_loop_sensor, loop_sensor
from orchrm_dagster.app import loop as app_loop
from orchrm_dagster.contract import GRPO_ROUNDS
from orchrm_dagster.loop import Batch, LoopState, Round
from tests.conftest import orchrm_instance_for_test
from tests.loop_roots import write_rounds

ROLLING_OUT = LoopState(ingested_batches=1, inputs="i", pairs_inputs="i", pairs=100, new_pairs=0, champion=1,
                        rounds=(Round(1, "grpo-r0001", True, 10, "gsm8k", "smollm2-base", ("gsm8k-test-0000",)),))
INGESTING = LoopState(batches=(Batch("a.jsonl", "a.jsonl", "1:2", False), Batch("b.jsonl", "b.jsonl", "3:4", False)))
TRAINING = dataclasses.replace(ROLLING_OUT, new_pairs=80)
STARTING = dataclasses.replace(ROLLING_OUT, rounds=())


def storage(tmp_path) -> StorageResource:
    return StorageResource(root=str(tmp_path / "storage"))


def sensor_requests(sensor, resources) -> list[tuple]:
    with orchrm_instance_for_test() as instance:
        result = sensor(dg.build_sensor_context(instance=instance, resources=resources))
    return [_request(r) for r in result.run_requests]


def _request(request: dg.RunRequest) -> tuple:
    return request.job_name, request.partition_key, request.run_key, request.run_config, request.tags["orchrm/step"]


class _FirstDecisionDone(Exception):
    pass


def command_requests(defs, settings, monkeypatch) -> list[tuple]:
    """The run requests `orchrm loop` makes for its first decision (recorded instead of run)."""
    asked = []

    def record(defs_, instance, step, on_log=None):
        asked.append(_request(dagster_loop.step_run(step).run_request(step.run_key)))
        return dataclasses.make_dataclass("Result", [("success", bool)])(True)

    def stop_after_the_first_steps(decision):
        if asked:
            raise _FirstDecisionDone

    monkeypatch.setattr(app_loop, "execute_step", record)
    with pytest.raises(_FirstDecisionDone):
        app_loop.drive(defs, settings, on_decision=stop_after_the_first_steps)
    return asked


@pytest.mark.parametrize("state", [INGESTING, TRAINING, STARTING, ROLLING_OUT], ids=["ingest", "retrain", "round",
                                                                                     "rollout"])
def test_the_sensors_and_the_loop_command_make_the_same_requests_from_the_same_state(tmp_path, monkeypatch, state):
    from orchrm_dagster.definitions import build_definitions

    monkeypatch.setattr(loop_state_module, "read_state", lambda root, runs, rounds_on=True: dataclasses.replace(
        state, runs=runs))
    resources = {"storage": storage(tmp_path), "loop": LoopResource(rounds=3)}
    by_sensors = sensor_requests(grpo_loop_sensor, resources) + sensor_requests(loop_sensor, resources)
    defs = build_definitions(storage=resources["storage"], loop=resources["loop"])
    by_command = command_requests(defs, resources["loop"].to_engine(), monkeypatch)
    assert by_sensors and by_sensors == by_command
    if state is ROLLING_OUT:  # the rollout's settings are the loop resource's, as run config of the generated classes
        ops = by_sensors[0][3]["ops"]
        assert ops["orchestration_samples"]["config"]["problem_ids"] == ["gsm8k-test-0000"]
        assert ops["execution_artifacts"]["config"]["subagent_max_new_tokens"] == 96


def test_the_grpo_sensor_says_why_the_loop_stopped(tmp_path):
    resource = storage(tmp_path)
    root = resource.storage_root()
    rows = [{"round": r, "policy_checkpoint": f"grpo-r{r:04d}", "reward_mode": "orchrm", "rm_version": 1, "steps": 2,
             "mean_reward": 0.1, "kl": 0.0, "generation_tokens": 1000, "reward_tokens": 500, "rollout_tokens": 0,
             "heldout_reward_before": 0.0, "heldout_reward_after": 0.1, "heldout_accuracy": None, "seconds": 1.0,
             "promoted": False, "reason": "test"} for r in (1, 2)]
    write_rounds(root, rows)  # and their checkpoints registered, as a round commits them
    with orchrm_instance_for_test() as instance:
        import json
        from pathlib import Path

        folder = Path(root.path("checkpoints", "rm", "v0001"))
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(json.dumps({"version": 1}))
        (folder.parent / "champion.json").write_text(json.dumps({"version": 1}))
        result = grpo_loop_sensor(dg.build_sensor_context(instance=instance, resources={
            "storage": resource, "loop": LoopResource(rounds=2)}))
    assert result.skip_reason.skip_message == "stopped: the loop has run its 2 rounds"


def test_the_loop_command_prints_every_round(tmp_path, monkeypatch, capsys):
    from orchrm_dagster.app.cli.common import print_grpo_rounds

    resource = storage(tmp_path)
    monkeypatch.setenv("ORCHRM_STORAGE", resource.root)
    root = resource.storage_root()
    rows = [{"round": r, "policy_checkpoint": f"grpo-r{r:04d}", "reward_mode": "orchrm", "rm_version": 1, "steps": 2,
             "mean_reward": 0.1, "kl": 0.0, "generation_tokens": 1000, "reward_tokens": 500, "rollout_tokens": 0,
             "heldout_reward_before": 0.0, "heldout_reward_after": 0.1, "heldout_accuracy": None, "seconds": 1.0,
             "promoted": r == 1, "reason": "gate"} for r in (1, 2)]
    root.write_table(pa.Table.from_pylist(rows, schema=GRPO_ROUNDS), root.table_file("grpo_rounds"))
    resource.warehouse().refresh_views()
    print_grpo_rounds()
    printed = capsys.readouterr().out
    assert "verdict" in printed and "held-out reward after" in printed and printed.count("orchrm") >= 2
    assert "promoted" in printed and "rejected" in printed  # rows from before the verdict column: read from promoted


def test_a_rollout_of_two_policies_asks_for_each_new_partition_once(tmp_path, monkeypatch):
    monkeypatch.setattr(loop_state_module, "read_state", lambda root, runs, rounds_on=True: dataclasses.replace(ROLLING_OUT, runs=runs))
    with orchrm_instance_for_test() as instance:
        result = grpo_loop_sensor(dg.build_sensor_context(instance=instance, resources={
            "storage": storage(tmp_path), "loop": LoopResource(rounds=3)}))
    requested = {r.partitions_def_name: list(r.partition_keys) for r in result.dynamic_partitions_requests}
    assert requested == {"benchmarks": ["gsm8k"], "policies": ["grpo-r0001", "smollm2-base"]}


BLOCKED = dataclasses.replace(ROLLING_OUT, champion=None, rounds=(), no_champion={
    "math": "no champion reward model for the math domain: v1 had 18 validation pairs there (accuracy 1.000, "
            "p = 3.8e-06 against chance), fewer than min_validation_pairs (20): land more runs or lower "
            "min_validation_pairs"})


@pytest.mark.parametrize("sensor", [loop_sensor, grpo_loop_sensor], ids=["learning", "rounds"])
def test_a_tick_that_asks_for_nothing_gives_the_loop_s_decision_as_its_reason(tmp_path, monkeypatch, sensor):
    monkeypatch.setattr(loop_state_module, "read_state", lambda root, runs, rounds_on=True: dataclasses.replace(BLOCKED, runs=runs))
    with orchrm_instance_for_test() as instance:
        result = sensor(dg.build_sensor_context(instance=instance, resources={
            "storage": storage(tmp_path), "loop": LoopResource()}))
    assert not result.run_requests
    assert result.skip_reason.skip_message == f"blocked: {BLOCKED.no_champion['math']}"
