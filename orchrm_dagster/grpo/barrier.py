"""What a round starts on, as its `grpo_rounds` row records it: the batches whose pairs the champion that rewards it
trained on, and the batches the last promoted round's rollouts landed. The loop's barrier (`loop.decide`) starts a
round only once those rollout batches are ingested, scored, in the pairs and, where they made a retraining due,
trained on; with both lists in the row anyone can check that round N+1 saw round N's rollouts."""

from __future__ import annotations

from collections.abc import Mapping

from orchrm_dagster.grpo.checkpoints import policy_manifest, read_table
from orchrm_dagster.orchestration import Cell, execution_batch_name
from orchrm_dagster.rm import finished_versions, trained_batches
from orchrm_dagster.storage import BatchIndex, StorageRoot, read_index


def rollout_batches(index: BatchIndex, row: Mapping, manifest: Mapping) -> dict[str, tuple[str, str]]:
    """policy -> (batch id, its runs' generation; "" while none are ingested) of the batch each rollout of the
    promoted round `row` (its `grpo_rounds` row, and its checkpoint's manifest) landed: its checkpoint's and its base
    policy's, each on the round's benchmark as that (benchmark, policy) cell's file, for each file the batch index
    holds."""
    found = {}
    for policy in (row["policy_checkpoint"], manifest.get("scratch_policy", "")):
        batch_id = index.batch_of(execution_batch_name(Cell(manifest.get("benchmark", ""), policy)))
        if batch_id is not None:
            found[policy] = (batch_id, index.generations.get(batch_id) or "")
    return found


def batch_list(batches: Mapping[str, str] | None) -> list[str] | None:
    """`batch_id@generation` of each batch, sorted (None stays None): how a round's row names them."""
    if batches is None:
        return None
    return sorted(f"{batch_id}@{generation}" for batch_id, generation in batches.items())


def barrier_columns(root: StorageRoot, round_number: int, rm_version: int | None) -> dict:
    """The row's `rm_batches` (what the champion's pairs were built from; null: not recorded for that version),
    `rollout_batches` (what the last promoted round before this one landed in its rollouts; null: no such round) and
    `rollouts_trained_by` (the first reward-model version whose pairs held every one of them, crowned or not: the
    retraining the barrier waited for; null: none, the rollouts made no retraining due)."""
    previous = [row for row in read_table(root, "grpo_rounds") if row["round"] < round_number and row["promoted"]
                and row["policy_checkpoint"]]
    rollouts = None
    if previous:
        landed = rollout_batches(read_index(root), previous[-1], policy_manifest(root, previous[-1]["round"]))
        rollouts = dict(landed.values())
    return {"rm_batches": batch_list(trained_batches(root, rm_version) if rm_version is not None else None),
            "rollout_batches": batch_list(rollouts),
            "rollouts_trained_by": first_trained_on(root, rollouts) if rollouts else None}


def first_trained_on(root: StorageRoot, batches: Mapping[str, str]) -> int | None:
    """The first of the latest reward-model versions whose pairs held every one of `batches` as they are now (from
    the newest back to the first that did not hold them), or None."""
    found = None
    for version in reversed(finished_versions(root)):
        seen = trained_batches(root, version) or {}
        if any(seen.get(batch_id) != generation for batch_id, generation in batches.items()):
            break
        found = version
    return found
