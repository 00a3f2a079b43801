"""The loop's state as the storage root holds it: what landed and what of it is ingested, what the pairs and the
scores were built from, the reward model, the rounds. The orchestrator's runs (in flight, failed) come from the
caller, who knows the orchestrator."""

from __future__ import annotations

import time

import polars as pl

from orchrm_dagster.grpo import policy_manifest, read_table, rollout_batches, round_name, round_tokens
from orchrm_dagster.loop.state import Batch, LoopState, Round, StepRuns
from orchrm_dagster.pairs import current_pair_ids, pairs_batches, pairs_inputs
from orchrm_dagster.rm import (batches_to_score, champion_refusals, current_champions, latest_version,
                               new_pairs_since_training, newest_champion, trained_at, trained_batches, trained_on)
from orchrm_dagster.storage import (BatchIndex, BatchView, StorageRoot, landing_view, no_cycle_collection,
                                    scan_table)


def read_state(root: StorageRoot, runs: StepRuns = StepRuns(), rounds_on: bool = True) -> LoopState:
    """`rounds_on`: whether the rounds' part of the loop runs (the GRPO sensor is on; `orchrm loop`)."""
    built_from = pairs_inputs(root)
    latest = latest_version(root)
    pairs, new_pairs = _pair_counts(root, built_from, latest) if built_from is not None else (0, None)
    champions = current_champions(root)
    version = newest_champion(champions)  # changes whenever any domain's champion does
    landing = landing_view(root)  # the batch index and the landing zone: no read per batch or per file
    found_rounds = rounds(root, landing.index)
    to_score = tuple(batches_to_score(root, champions)) if champions else ()
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
        batches_to_score=to_score,
        pairs_batches=_pairs_batches(root, built_from, landing.index),
        trained_batches=trained_batches(root, latest) if latest is not None else None,
        trained_at=trained_at(root, latest) if latest is not None else None,
        champion_at=trained_at(root, version) if version is not None else None,
        live=live_measures(root, champions, (landing.index.inputs, built_from, to_score, len(found_rounds))),
        rounds_on=rounds_on,
        rounds=found_rounds,
        runs=runs,
        rollout_tokens=rollout_tokens(root, found_rounds, landing.index.inputs),
        **round_attempts(root, found_rounds),
        # the scores' step writes rm_scores without changing the ingested batches: what it left to score is in the key
        retraining_tokens=retraining_tokens(root, found_rounds[0].rm_version if found_rounds else None, latest,
                                            (landing.index.inputs, version, to_score)),
    )


def _pairs_batches(root: StorageRoot, built_from: str | None, index) -> dict[str, str] | None:
    """The batches the pairs were built from; for pairs built before they were recorded, the batches as they are now
    when the pairs were built from exactly these (the same `inputs`), else None."""
    recorded = pairs_batches(root, built_from)
    if recorded is None and built_from is not None and built_from == index.inputs:
        return index.generations
    return recorded


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


def rounds(root: StorageRoot, index: BatchIndex | None = None) -> tuple[Round, ...]:
    """The finished rounds; the last promoted one with the batches its rollouts landed (from `index`, the batch
    index as read now)."""
    rows = read_table(root, "grpo_rounds")
    registered = {row["name"] for row in read_table(root, "policy_checkpoints")} if rows else set()
    last_promoted = max((row["round"] for row in rows if row["promoted"]), default=None)
    found = []
    for row in rows:
        manifest = _manifest(root, row["round"]) if row["promoted"] else {}  # a promoted round rolls out
        landed = (rollout_batches(index, row, manifest)
                  if index is not None and row["round"] == last_promoted and row["policy_checkpoint"] else {})
        found.append(Round(row["round"], row["policy_checkpoint"], bool(row["promoted"]),
                           round_tokens(row), manifest.get("benchmark", ""), manifest.get("scratch_policy", ""),
                           tuple(manifest.get("train_problems", ())), row["rm_version"],
                           row["policy_checkpoint"] is None or row["policy_checkpoint"] in registered, landed,
                           row.get("attempt")))
    return tuple(found)


_MANIFESTS: dict[tuple[str, int], dict] = {}  # a published checkpoint's manifest never changes


def _manifest(root: StorageRoot, round_number: int) -> dict:
    key = (root.url, round_number)
    if key not in _MANIFESTS:
        if len(_MANIFESTS) > 4096:
            _MANIFESTS.clear()
        _MANIFESTS[key] = policy_manifest(root, round_number)
    return _MANIFESTS[key]


_SPENT: dict[tuple, object] = {}  # what was read last, by what it was read from: a sensor asks every few seconds


def _cached(key: tuple, read):
    if key not in _SPENT:
        if len(_SPENT) > 64:
            _SPENT.clear()
        _SPENT[key] = read()
    return _SPENT[key]


def live_measures(root: StorageRoot, champions: dict[str, int], inputs: tuple) -> tuple:
    """The champions' live accuracy (rm.live): on the new pairs, and on the latest round's held-out plans; read again
    only when the batches, the pairs, the scores, the rounds or the champions changed."""
    from orchrm_dagster.rm import latest_held_out, pairs_live_accuracy

    if not champions:
        return ()
    return _cached(("live", root.url, inputs, tuple(sorted(champions.items()))),
                   lambda: tuple(pairs_live_accuracy(root, champions) + latest_held_out(root, champions)))


def round_attempts(root: StorageRoot, found: tuple[Round, ...]) -> dict[str, int]:
    """Tokens of the rounds' attempts that committed no row (their journals), and the most one attempt spent."""
    from orchrm_dagster.spending import journals

    committed = {round_name(r.round): r.attempt for r in found}
    spent = [(j["step"], j["attempt"], sum(j["tokens"].values())) for j in journals(root)]
    unfinished = sum(tokens for step, attempt, tokens in spent if committed.get(step) != attempt)
    return {"unfinished_round_tokens": unfinished, "largest_round_tokens": max((t for _, _, t in spent), default=0)}


def rollout_tokens(root: StorageRoot, found: tuple[Round, ...], inputs: str) -> dict[tuple[int, bool], int]:
    """Tokens of the runs the loop's rollouts make (`loop.decide`: each promoted checkpoint and, with rollout_base,
    its base policy sample plans on the round's training problems, run ids `policy/problem/seed<S>-x<tag>/<i>`), each
    run once, by (seed, whether the base policy made them). Only tagged runs are the loop's: the main job's runs of
    the base policy, under the same seed, are not."""
    cells = {(policy, problem, policy == r.base_policy) for r in found if r.promoted
             for policy in (r.policy, r.base_policy) for problem in r.train_problems}
    if not cells:
        return {}

    def read() -> dict[tuple[int, bool], int]:
        wanted = pl.DataFrame(sorted(cells), orient="row",
                              schema={"policy_name": pl.String, "problem_id": pl.String, "base": pl.Boolean})
        spent = (scan_table(root, "runs").select("run_id", "policy_name", "problem_id", "orchestrator_tokens",
                                                 "subagent_tokens")
                 .join(wanted.lazy(), on=["policy_name", "problem_id"])
                 .unique(subset="run_id", keep="first")
                 .with_columns(seed=pl.col("run_id").str.extract(ROLLOUT_SEED).cast(pl.Int64))
                 # a checkpoint's runs untagged: its rollout before runs were tagged (the main job never samples it)
                 .with_columns(seed=pl.when(pl.col("seed").is_null() & ~pl.col("base"))
                               .then(pl.col("run_id").str.extract(r"/seed(\d+)/\d+$").cast(pl.Int64))
                               .otherwise(pl.col("seed")))
                 .filter(pl.col("seed").is_not_null())
                 .group_by("seed", "base").agg((pl.col("orchestrator_tokens").fill_null(0)
                                                + pl.col("subagent_tokens").fill_null(0)).sum().alias("tokens"))
                 .collect())
        return {(seed, base): tokens for seed, base, tokens in spent.iter_rows()}

    return _cached(("rollouts", root.url, inputs, tuple(sorted(cells))), read)


ROLLOUT_RUN = r"/seed\d+-x[0-9a-f]+/\d+$"  # a loop rollout's run id (`run_id_for` with the execution's tag)
ROLLOUT_SEED = r"/seed(\d+)-x[0-9a-f]+/\d+$"


def retraining_tokens(root: StorageRoot, first: int | None, latest: int | None, inputs: tuple) -> int:
    """Tokens of the reward-model versions trained after `first` (the one the first round was rewarded by): each
    one's training (its manifest's `training_tokens`) and its scoring of the runs (`rm_scores.tokens`); and the
    scoring of the loop's own rollouts by any version, `first` included (an unchanged champion scores them too)."""
    if first is None or latest is None:
        return 0

    def read() -> int:
        from orchrm_dagster.rm import list_versions, synced_checkpoints_dir

        newer = [v for v in list_versions(str(synced_checkpoints_dir(root))) if v["version"] > first]
        scored = (scan_table(root, "rm_scores")
                  .filter(pl.col("rm_version").is_in([v["version"] for v in newer])
                          | pl.col("run_id").str.contains(ROLLOUT_RUN))
                  .select(pl.col("tokens").fill_null(0).sum()).collect().item())
        return sum(int(v.get("training_tokens") or 0) for v in newer) + int(scored or 0)

    return _cached(("retraining", root.url, inputs, first, latest), read)
