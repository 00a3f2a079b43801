"""A retraining that reads what is new: it continues the champion on the pairs it never saw plus a replay of old ones,
reads fewer pairs than a full retraining, and ranks the same validation pairs about as well (real runs, labels,
pairs and a tiny real backbone)."""

import json
from pathlib import Path

import polars as pl
import pytest

from orchrm_dagster.pairs import TRAIN, current_pair_ids
from orchrm_dagster.rm import RMTrainConfig, retrain_version, train_on_current_pairs
from orchrm_dagster.rm.challenger import replay_selection
from orchrm_dagster.ingest import ingest_batch
from orchrm_dagster.labels import label_batch
from orchrm_dagster.problems import load_problems, problem_sources, reference_answers
from orchrm_dagster.storage import land
from orchrm_dagster.synthetic import generate_runs, write_jsonl
from orchrm_dagster.pairs import PairRules, build_pairs_table
from orchrm_dagster.storage import Warehouse

pytestmark = pytest.mark.filterwarnings("ignore")
TOLERANCE = 0.15  # of validation accuracy on this tiny set; bench/rm_incremental.py measures it on real pairs


def rollout(root, tmp_path, seed: int, runs: int, first_problem: int) -> None:
    """Lands, ingests and labels `runs` runs, 8 per problem from `first_problem` on (plans decide correctness)."""
    path = tmp_path / f"rollout-{seed}.jsonl"
    write_jsonl(generate_runs(runs, seed=seed, plans_decide=True, samples_per_problem=8, first_problem=first_problem),
                path)
    landed = land(root, path)
    ingest_batch(root, landed.batch_id, landed.path)
    label_batch(root, landed.batch_id, reference_answers(load_problems(problem_sources([])).table))


def build_pairs(root) -> None:
    build_pairs_table(root, Warehouse(root), PairRules(validation_fraction=0.3))  # validation pairs on a small set


def config(backbone: str, **changes) -> RMTrainConfig:
    return RMTrainConfig(backbone=backbone, max_length=64, epochs=2, batch_size=4, learning_rate=1e-3,
                         min_validation_pairs=1,
                         champion_level=1.0, **changes)  # a tiny model is crowned whatever its floor


def manifest(outcome) -> dict:
    return json.loads(Path(outcome.path, "manifest.json").read_text())


def test_a_retraining_continues_the_champion_on_new_pairs_and_a_replay(storage_root, tiny_backbone, tmp_path):
    rollout(storage_root, tmp_path, seed=1, runs=240, first_problem=0)
    build_pairs(storage_root)
    [first] = train_on_current_pairs(storage_root, config(tiny_backbone))
    assert first.is_champion and "started_from" not in manifest(first)  # no champion before it: a full training
    seen = current_pair_ids(storage_root)

    rollout(storage_root, tmp_path, seed=2, runs=96, first_problem=30)  # new problems' pairs beside the old
    build_pairs(storage_root)
    pairs = pl.read_parquet(storage_root.table_file("pairs"))
    train = pairs.filter(pl.col("split") == TRAIN)
    new = train.join(seen, on="pair_id", how="anti").height
    [incremental] = train_on_current_pairs(storage_root, config(tiny_backbone, replay_ratio=0.5))
    recorded = manifest(incremental)
    assert recorded["started_from"] == first.version and recorded["new_pairs"] == new > 0
    assert recorded["replayed_pairs"] == min(train.height - new, round(0.5 * new))
    assert incremental.train_pairs == new + recorded["replayed_pairs"] < train.height
    assert recorded["backbone"] == tiny_backbone  # the config's, not the champion's folder it started from

    [full] = train_on_current_pairs(storage_root, config(tiny_backbone, start_from="scratch"))
    assert "started_from" not in manifest(full) and full.train_pairs == train.height
    assert incremental.validation_pairs == full.validation_pairs  # judged on the same pairs
    assert manifest(incremental)["training_tokens"] < manifest(full)["training_tokens"]
    assert abs(incremental.metrics["val_accuracy"] - full.metrics["val_accuracy"]) <= TOLERANCE

    again = retrain_version(storage_root, incremental.version)  # reproduced from the same start and pairs
    assert manifest(again)["started_from"] == first.version
    assert again.pair_set_fingerprint == incremental.pair_set_fingerprint


def test_a_champion_of_another_backbone_or_with_nothing_new_is_not_continued(storage_root, tiny_backbone, tmp_path):
    rollout(storage_root, tmp_path, seed=1, runs=240, first_problem=0)
    build_pairs(storage_root)
    train_on_current_pairs(storage_root, config(tiny_backbone))
    [again] = train_on_current_pairs(storage_root, config(tiny_backbone))  # no pair is new
    assert "started_from" not in manifest(again)
    rollout(storage_root, tmp_path, seed=2, runs=96, first_problem=30)
    build_pairs(storage_root)
    [other] = train_on_current_pairs(storage_root, config(tiny_backbone, input_format="plan_text"))
    assert "started_from" not in manifest(other)


def test_replay_draws_old_pairs_per_new_one_and_never_more_than_there_are():
    train = pl.DataFrame({"pair_id": [f"p{i}" for i in range(10)]})
    seen = pl.DataFrame({"pair_id": [f"p{i}" for i in range(7)]})
    new, replayed = replay_selection(train, seen, 2.0, seed=0)
    assert new["pair_id"].to_list() == ["p7", "p8", "p9"] and replayed.height == 6
    assert set(replayed["pair_id"]) <= set(seen["pair_id"])
    assert replay_selection(train, seen, 10.0, seed=0)[1].height == 7
    assert replay_selection(train, seen, 0.0, seed=0)[1].height == 0
    assert replay_selection(train, seen, 2.0, seed=0)[1].equals(replayed)  # the seed decides
