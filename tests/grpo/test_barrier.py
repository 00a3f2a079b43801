"""What a round's row records of its barrier (grpo.barrier): which batches the rollouts landed, as the batch index
holds them, and the first reward-model version whose pairs held them all, crowned or not."""

from __future__ import annotations

import json
from pathlib import Path

from orchrm_dagster.grpo.barrier import batch_list, first_trained_on, rollout_batches
from orchrm_dagster.orchestration import Cell, execution_batch_name
from orchrm_dagster.rm.checkpoints import PAIR_BATCHES_FILE, checkpoints_dir, version_dir
from orchrm_dagster.storage import land, read_index
from tests.loop_roots import write_reward_model


def trained_on(root, version: int, batches: dict[str, str] | None) -> None:
    write_reward_model(root, version, right=40, validation_pairs={"math": 50})
    if batches is not None:
        Path(version_dir(str(checkpoints_dir(root)), version), PAIR_BATCHES_FILE).write_text(json.dumps(batches))


def test_the_first_version_that_trained_on_every_rollout_batch_is_named_crowned_or_not(storage_root):
    rollouts = {"mas-a.jsonl": "g2", "mas-b.jsonl": "g3"}
    trained_on(storage_root, 1, {"old": "g1"})
    trained_on(storage_root, 2, {"old": "g1", "mas-a.jsonl": "g2"})  # one of them
    assert first_trained_on(storage_root, rollouts) is None
    trained_on(storage_root, 3, {"old": "g1", **rollouts})
    trained_on(storage_root, 4, {"old": "g1", "new": "g9", **rollouts})
    assert first_trained_on(storage_root, rollouts) == 3
    assert first_trained_on(storage_root, {"mas-a.jsonl": "g5"}) is None  # re-ingested since: another generation
    trained_on(storage_root, 5, None)  # a version from before this was recorded read nothing known
    assert first_trained_on(storage_root, rollouts) is None


def test_a_rollouts_batches_are_found_by_their_cells_file_in_the_batch_index(storage_root, tmp_path):
    name = execution_batch_name(Cell("gsm8k", "grpo-r0001"))
    (tmp_path / name).write_text("")
    land(storage_root, tmp_path / name)
    row, manifest = {"policy_checkpoint": "grpo-r0001"}, {"benchmark": "gsm8k", "scratch_policy": "never-rolled-out"}
    found = rollout_batches(read_index(storage_root), row, manifest)
    assert list(found) == ["grpo-r0001"] and found["grpo-r0001"][1] == ""  # landed, not ingested yet
    assert batch_list({"b": "g2", "a": "g1"}) == ["a@g1", "b@g2"] and batch_list(None) is None
