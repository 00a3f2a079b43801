"""The loop's state as the storage root holds it: what landed and what of it is ingested, what the pairs and the
scores were built from, the reward model, the rounds. The orchestrator's runs (in flight, failed) come from the
caller, who knows the orchestrator."""

from __future__ import annotations

import time

from orchrm_dagster.grpo import policy_manifest, read_table, round_tokens
from orchrm_dagster.loop.state import Batch, LoopState, Round, StepRuns
from orchrm_dagster.pairs import current_pair_ids, pairs_inputs
from orchrm_dagster.rm import (batches_to_score, champion_refusals, current_champions, latest_version,
                               new_pairs_since_training, newest_champion, trained_on)
from orchrm_dagster.storage import BatchView, StorageRoot, landing_view, no_cycle_collection


def read_state(root: StorageRoot, runs: StepRuns = StepRuns()) -> LoopState:
    built_from = pairs_inputs(root)
    latest = latest_version(root)
    pairs, new_pairs = _pair_counts(root, built_from, latest) if built_from is not None else (0, None)
    champions = current_champions(root)
    version = newest_champion(champions)  # changes whenever any domain's champion does
    landing = landing_view(root)  # the batch index and the landing zone: no read per batch or per file
    return LoopState(
        batches=_batches(landing),
        pending=landing.pending,
        paced_cuts=landing.index.paced_cuts,
        now=time.time(),
        ingested_batches=landing.index.with_runs,
        inputs=landing.index.inputs,
        pairs_inputs=built_from,
        pairs=pairs,
        new_pairs=new_pairs if pairs else None,
        trained_on=trained_on(root, latest) if latest is not None else None,
        champion=version,
        no_champion=champion_refusals(root, champions=champions, latest=latest),
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


_BATCHES: dict[str, tuple[BatchView, Batch]] = {}  # batch id -> (its view, its Batch) as made last


def _batches(landing) -> tuple[Batch, ...]:
    """A Batch a batch, made again only for a batch whose view changed (storage keeps the views that did not, and a
    view equal to the one a Batch was made from makes the same Batch)."""
    with no_cycle_collection():
        batches = tuple(_batch_of(view) for view in landing.batches)
        if len(_BATCHES) > len(landing.batches) + 1024:  # batches gone since (a root of other batches, say)
            live = {view.batch_id for view in landing.batches}
            for key in [key for key in _BATCHES if key not in live]:
                del _BATCHES[key]
    return batches


def _batch_of(view: BatchView) -> Batch:
    cached = _BATCHES.get(view.batch_id)
    if cached is None or (cached[0] is not view and cached[0] != view):
        cached = _BATCHES[view.batch_id] = (view, batch_from_view(view))
    return cached[1]


def batch_from_view(view: BatchView) -> Batch:
    """A batch as the loop sees it, from the batch index and the landing zone (storage.landing_view)."""
    return Batch(view.batch_id, view.name, view.fingerprint, view.ingested, view.names, view.failed_files)


def rounds(root: StorageRoot) -> tuple[Round, ...]:
    rows = read_table(root, "grpo_rounds")
    found = []
    for row in rows:
        rolls_out = row is rows[-1] and row["promoted"]  # only the last round may still roll out, if promoted
        manifest = policy_manifest(root, row["round"]) if rolls_out else {}
        found.append(Round(row["round"], row["policy_checkpoint"], bool(row["promoted"]),
                           round_tokens(row),
                           manifest.get("benchmark", ""), manifest.get("scratch_policy", ""),
                           tuple(manifest.get("train_problems", ()))))
    return tuple(found)
