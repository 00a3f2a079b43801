"""A round's verdict is its commit: recorded in grpo_rounds before its checkpoint is registered in policy_checkpoints,
so a checkpoint is in use only by a verdict that is on record; a round killed between the two is asked again, and
that attempt registers the checkpoint without training anything."""

from __future__ import annotations

import json

import pyarrow as pa

from orchrm_dagster.contract import GRPO_ROUNDS
from orchrm_dagster.grpo import read_table, run_round
from orchrm_dagster.grpo.checkpoints import checkpoint_row, policy_store
from orchrm_dagster.grpo.round import CHECKPOINT_ROW, commit_round
from orchrm_dagster.grpo.settings import GRPOSettings
from orchrm_dagster.loop import LoopSettings, decide, read_state
from orchrm_dagster.orchestration import PolicySpec
from orchrm_dagster.storage import MANIFEST
from tests.loop_roots import round_row, write_reward_model, write_scores


def published(root, number: int, promoted: bool) -> dict:
    """Round `number`'s checkpoint folder as the round publishes it: a manifest holding its policy_checkpoints row."""
    folder = policy_store(root).folder(number)
    folder.mkdir(parents=True)
    policy = PolicySpec(name=f"grpo-r{number:04d}", kind="checkpoint", prompt="orchestrator_fewshot")
    row = checkpoint_row(number, str(folder), "base-model", "orchrm", 1, policy, promoted)
    (folder / MANIFEST).write_text(json.dumps({"round": number, "benchmark": "gsm8k", "scratch_policy": "base",
                                               "train_problems": ["gsm8k-test-0001"], CHECKPOINT_ROW: row}))
    return row


def killed_after_the_verdict(root, number: int, promoted: bool = True) -> dict:
    """What a round killed between its verdict and its checkpoint's registration leaves."""
    published(root, number, promoted)
    row = round_row(number, promoted=promoted, verdict="promoted" if promoted else "rejected")
    root.write_table(pa.Table.from_pylist([*read_table(root, "grpo_rounds"), row], schema=GRPO_ROUNDS),
                     root.table_file("grpo_rounds"))
    return row


def test_the_verdict_is_recorded_before_the_checkpoint_is_in_use(storage_root):
    published(storage_root, 1, promoted=True)
    commit_round(storage_root, round_row(1))
    [checkpoint] = read_table(storage_root, "policy_checkpoints")
    assert checkpoint["name"] == "grpo-r0001" and checkpoint["promoted"] and checkpoint["in_use"]
    assert [r["round"] for r in read_table(storage_root, "grpo_rounds")] == [1]


def test_a_round_killed_after_its_verdict_is_asked_again_and_only_registers_its_checkpoint(storage_root):
    write_reward_model(storage_root, 1, right=40, validation_pairs={"math": 40})
    write_scores(storage_root, 1)
    row = killed_after_the_verdict(storage_root, 1)
    assert read_table(storage_root, "policy_checkpoints") == []
    decision = decide(read_state(storage_root), LoopSettings(rounds=3))
    assert [(s.kind, s.key) for s in decision.steps] == [("round", "round:1")]  # not its rollout, not round 2

    # the attempt: no model, no registry, no sub-agents are needed; nothing is trained or measured again
    outcome = run_round(storage_root, 1, GRPOSettings(), {}, None)
    assert outcome.row == read_table(storage_root, "grpo_rounds")[0] and outcome.policy == "grpo-r0001"
    [checkpoint] = read_table(storage_root, "policy_checkpoints")
    assert checkpoint["promoted"] and checkpoint["in_use"] and checkpoint["path"] == outcome.path
    assert read_table(storage_root, "grpo_rounds") == [outcome.row] and outcome.row["reason"] == row["reason"]
    decision = decide(read_state(storage_root), LoopSettings(rounds=3))
    assert [s.key for s in decision.steps] == ["rollout:1:grpo-r0001", "rollout:1:base"]  # the loop goes on


def test_a_rejected_round_killed_after_its_verdict_registers_its_checkpoint_unpromoted(storage_root):
    killed_after_the_verdict(storage_root, 1, promoted=True)
    commit_round(storage_root, read_table(storage_root, "grpo_rounds")[0])
    killed_after_the_verdict(storage_root, 2, promoted=False)
    run_round(storage_root, 2, GRPOSettings(), {}, None)
    rows = {r["round"]: r for r in read_table(storage_root, "policy_checkpoints")}
    assert not rows[2]["promoted"] and rows[1]["in_use"] and not rows[2]["in_use"]


def test_the_next_attempt_takes_up_a_killed_attempts_start_measure_under_the_same_key_only(tmp_path):
    from orchrm_dagster.grpo.gate import Accuracy, Measured, Reward
    from orchrm_dagster.grpo.heldout import HeldOut, attempted_start_measure, keep_start_measure

    plans = [{"problem_id": "p1", "sample_index": 0, "plan": "{}", "parses": True, "score": 0.5, "correct": True,
              "failure": None}]
    held = HeldOut(Measured(Reward(0.5, 0.0, 1), Accuracy(1, 1), 0, None, 0.7), "key1", plans, None, 123)
    path = tmp_path / "r0001-start_measure.json"
    keep_start_measure(path, held)
    assert attempted_start_measure(path, "key1") == held
    assert attempted_start_measure(path, "key2") is None  # another policy, champion or setting: measured afresh
    failed = HeldOut(Measured(Reward(0.5, 0.0, 1), None, 1, "execution failed"), "key1", plans)
    keep_start_measure(path, failed)
    assert attempted_start_measure(path, "key1") is None  # a side with a failed plan is never taken up
    assert attempted_start_measure(tmp_path / "none.json", "key1") is None
