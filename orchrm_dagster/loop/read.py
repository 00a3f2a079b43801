"""The loop's state as the storage root holds it: what landed and what of it is ingested, what the pairs and the
scores were built from, the reward model, the rounds. The orchestrator's runs (in flight, failed) come from the
caller, who knows the orchestrator."""

from __future__ import annotations

from orchrm_dagster.grpo import policy_manifest, read_table
from orchrm_dagster.loop.state import Batch, LoopState, Round, StepRuns
from orchrm_dagster.pairs import current_pair_ids, pairs_inputs
from orchrm_dagster.rm import (batches_to_score, current_champions, latest_version, new_pairs_since_training,
                               newest_champion, trained_on)
from orchrm_dagster.storage import LandedFile, StorageRoot


def read_state(root: StorageRoot, runs: StepRuns = StepRuns()) -> LoopState:
    built_from = pairs_inputs(root)
    latest = latest_version(root)
    pairs, new_pairs = _pair_counts(root, built_from, latest) if built_from is not None else (0, None)
    champions = current_champions(root)
    version = newest_champion(champions)  # changes whenever any domain's champion does
    return LoopState(
        batches=tuple(Batch(f.batch_id, f.name, f.fingerprint, is_ingested(root, f)) for f in root.landed_files()),
        ingested_batches=len(root.batch_ids("runs")),
        inputs=root.ingested_inputs(),
        pairs_inputs=built_from,
        pairs=pairs,
        new_pairs=new_pairs if pairs else None,
        trained_on=trained_on(root, latest) if latest is not None else None,
        champion=version,
        batches_to_score=tuple(batches_to_score(root, champions)) if champions else (),
        rounds=rounds(root),
        runs=runs,
    )


_PAIR_COUNTS: dict[tuple[str, str, int | None], tuple[int, int | None]] = {}


def _pair_counts(root: StorageRoot, built_from: str, version: int | None) -> tuple[int, int | None]:
    """(pairs, pairs the latest reward model has not seen), reading every pair id only when the pairs or the latest
    reward model changed: a sensor asks every few seconds."""
    key = (root.url, built_from, version)
    if key not in _PAIR_COUNTS:
        if len(_PAIR_COUNTS) > 64:
            _PAIR_COUNTS.clear()
        current = current_pair_ids(root)
        _PAIR_COUNTS[key] = (current.height, new_pairs_since_training(root, current))
    return _PAIR_COUNTS[key]


def is_ingested(root: StorageRoot, landed: LandedFile) -> bool:
    return root.is_ingested(landed)


def rounds(root: StorageRoot) -> tuple[Round, ...]:
    rows = read_table(root, "grpo_rounds")
    found = []
    for row in rows:
        rolls_out = row is rows[-1] and row["promoted"]  # only the last round may still roll out, if promoted
        manifest = policy_manifest(root, row["round"]) if rolls_out else {}
        found.append(Round(row["round"], row["policy_checkpoint"], bool(row["promoted"]),
                           row["generation_tokens"] + row["reward_tokens"] + row["rollout_tokens"],
                           manifest.get("benchmark", ""), manifest.get("scratch_policy", ""),
                           tuple(manifest.get("train_problems", ()))))
    return tuple(found)
