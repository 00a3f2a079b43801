"""The loop's sensors decide from data alone: when the reward model retrains, when the next GRPO round starts, and
when the loop stops."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pyarrow as pa

from assets.sensors import grpo_loop_sensor, reward_model_retrain_sensor
from orchrm_dagster.contract import GRPO_ROUNDS, PAIRS
from orchrm_dagster.glue.resources import LoopResource, StorageResource


def storage(tmp_path) -> StorageResource:
    return StorageResource(root=str(tmp_path / "storage"))


def with_pairs(resource: StorageResource, count: int) -> None:
    root = resource.storage_root()
    rows = [{"pair_id": f"p{i}", "problem_id": "x", "chosen_run_id": "a", "rejected_run_id": "b",
             "chosen_plan_hash": "h1", "rejected_plan_hash": "h2", "source": "correct_over_incorrect",
             "split": "train"} for i in range(count)]
    root.write_table(pa.Table.from_pylist(rows, schema=PAIRS), root.table_file("pairs"))
    resource.warehouse().refresh_views()


def with_champion(resource: StorageResource, version: int, pairs_available: int) -> None:
    folder = Path(resource.storage_root().path("checkpoints", "rm", f"v{version:04d}"))
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"version": version, "pairs_available": pairs_available}))
    (folder.parent / "champion.json").write_text(json.dumps({"version": version}))


def with_rounds(resource: StorageResource, rounds: int) -> None:
    root = resource.storage_root()
    rows = [{"round": r, "policy_checkpoint": f"grpo-r{r:04d}", "reward_mode": "orchrm", "rm_version": 1, "steps": 2,
             "mean_reward": 0.1, "kl": 0.0, "generation_tokens": 1000, "reward_tokens": 500, "rollout_tokens": 0,
             "heldout_reward_before": 0.0, "heldout_reward_after": 0.1, "heldout_accuracy": None, "seconds": 1.0}
            for r in range(1, rounds + 1)]
    root.write_table(pa.Table.from_pylist(rows, schema=GRPO_ROUNDS), root.table_file("grpo_rounds"))
    resource.warehouse().refresh_views()


def evaluate(sensor, **resources):
    with dg.instance_for_test() as instance:
        return sensor(dg.build_sensor_context(instance=instance, resources=resources))


def test_the_reward_model_retrains_once_enough_new_pairs_arrived(tmp_path):
    resource = storage(tmp_path)
    with_pairs(resource, 120)
    with_champion(resource, 1, pairs_available=100)
    loop = LoopResource(retrain_min_new_pairs=50)
    assert isinstance(evaluate(reward_model_retrain_sensor, storage=resource, loop=loop), dg.SkipReason)
    with_pairs(resource, 160)
    request = evaluate(reward_model_retrain_sensor, storage=resource, loop=loop)
    assert isinstance(request, dg.RunRequest) and request.run_key == "retrain-at-160-pairs"


def test_the_next_round_starts_when_its_time_and_the_loop_stops_at_its_rounds_and_budget(tmp_path):
    resource = storage(tmp_path)
    with_pairs(resource, 100)
    with_champion(resource, 1, pairs_available=100)
    first = evaluate(grpo_loop_sensor, storage=resource, loop=LoopResource(rounds=2))
    assert [r.partition_key for r in first.run_requests] == ["1"]
    with_rounds(resource, 1)  # round 1 done, but its checkpoint's runs are not ingested yet
    waiting = evaluate(grpo_loop_sensor, storage=resource, loop=LoopResource(rounds=2))
    assert isinstance(waiting, dg.SkipReason) and "ingested" in waiting.skip_message
    with_rounds(resource, 2)
    done = evaluate(grpo_loop_sensor, storage=resource, loop=LoopResource(rounds=2))
    assert isinstance(done, dg.SkipReason) and "2 rounds" in done.skip_message
    spent = evaluate(grpo_loop_sensor, storage=resource, loop=LoopResource(rounds=5, token_budget=3000))
    assert isinstance(spent, dg.SkipReason) and "budget" in spent.skip_message


def test_the_loop_command_prints_every_round(tmp_path, monkeypatch, capsys):
    from orchrm_dagster.glue import cli

    resource = storage(tmp_path)
    monkeypatch.setenv("ORCHRM_STORAGE", resource.root)
    with_rounds(resource, 2)
    cli._print_grpo_rounds()
    printed = capsys.readouterr().out
    assert "wall_seconds" in printed and "heldout_after" in printed and printed.count("orchrm") == 2 and "heldout_acc" in printed
