"""Every reward-model version keeps the pairs it trained and validated on (beside its checkpoint, queryable as
`rm_training_pairs`), and can be trained again from them exactly."""

import json
from pathlib import Path

import polars as pl
import pytest

from orchrm_dagster.contract import RM_TRAINING_PAIRS, RM_TRAINING_PAIRS_FILE
from orchrm_dagster.pairs import PairRules, training_pair_texts
from orchrm_dagster.rm import (RMTrainConfig, read_training_pairs, retrain_version, train_new_version,
                               train_on_current_pairs)
from orchrm_dagster.storage import Warehouse

from ..pairs.test_export import pairs_from_runs
from .toy import toy_pairs

pytestmark = pytest.mark.filterwarnings("ignore")


def config(backbone: str, **changes) -> RMTrainConfig:
    settings = dict(backbone=backbone, max_length=64, epochs=1, batch_size=4, learning_rate=1e-3,
                    device="cpu", seed=3)
    return RMTrainConfig(**(settings | changes))


def test_a_version_keeps_its_pairs_and_trains_again_from_them_exactly(storage_root, tiny_backbone, tmp_path):
    pairs_from_runs(storage_root, tmp_path, PairRules(validation_fraction=0.4))
    [first] = train_on_current_pairs(storage_root, config(tiny_backbone))
    assert first.validation_pairs > 0 and first.train_pairs > 0
    saved = read_training_pairs(first.path)
    assert first.training_pairs == str(Path(first.path, RM_TRAINING_PAIRS_FILE))
    assert saved.columns == RM_TRAINING_PAIRS.names
    assert saved["version"].unique().to_list() == [first.version]
    assert dict(saved.group_by("split").len().iter_rows()) == {"train": first.train_pairs,
                                                               "validation": first.validation_pairs}
    assert saved.filter(pl.col("split") == "train")["position"].to_list() == list(range(first.train_pairs))
    # the texts are the ones training read: the pairs table's, with each pair's problem and domain
    texts = training_pair_texts(storage_root).select("pair_id", "problem_id", "split", "source", "question",
                                                     "chosen_plan", "rejected_plan")
    assert saved.drop("version", "position", "domain").sort("pair_id").equals(texts.select(
        saved.drop("version", "position", "domain").columns).sort("pair_id"))
    assert saved["domain"].null_count() == 0

    again = retrain_version(storage_root, first.version)
    assert again.version == first.version + 1
    assert again.pair_set_fingerprint == first.pair_set_fingerprint
    assert again.metrics["val_accuracy"] == first.metrics["val_accuracy"]
    assert again.metrics["ece"] == first.metrics["ece"]
    assert read_training_pairs(again.path).drop("version").equals(saved.drop("version"))
    manifest = json.loads(Path(again.path, "manifest.json").read_text())
    assert manifest["retrained_from"] == first.version
    assert manifest["config"] == json.loads(Path(first.path, "manifest.json").read_text())["config"]

    warehouse = Warehouse(storage_root)
    warehouse.refresh_views()
    counts = warehouse.query("select version, split, count(*) n from rm_training_pairs group by all "
                             "order by all").to_pylist()
    assert counts == [{"version": v, "split": split, "n": n} for v in (first.version, again.version)
                      for split, n in (("train", first.train_pairs), ("validation", first.validation_pairs))]


def test_the_run_config_retrains_a_version_whatever_its_other_fields_say(storage_root, tiny_backbone):
    first = train_new_version(storage_root, toy_pairs(8, 0), toy_pairs(4, 1), config(tiny_backbone))
    saved = read_training_pairs(first.path)
    assert saved["problem_id"].null_count() == saved.height  # texts alone: no problem known
    assert saved.filter(pl.col("split") == "train")["domain"].null_count() == 8
    [again] = train_on_current_pairs(storage_root, config(tiny_backbone, retrain_from_version=first.version,
                                                          seed=99, batch_size=2, max_train_pairs=1))
    assert again.pair_set_fingerprint == first.pair_set_fingerprint and again.train_pairs == 8
    assert again.metrics["val_accuracy"] == first.metrics["val_accuracy"]
    assert json.loads(Path(again.path, "manifest.json").read_text())["config"]["seed"] == 3


def test_retraining_what_was_never_saved_says_why(storage_root, tiny_backbone):
    with pytest.raises(FileNotFoundError, match="no reward-model version 7"):
        retrain_version(storage_root, 7)
    first = train_new_version(storage_root, toy_pairs(8, 0), toy_pairs(0, 0), config(tiny_backbone))
    Path(first.path, RM_TRAINING_PAIRS_FILE).unlink()  # as a version trained before the pairs were saved left it
    with pytest.raises(FileNotFoundError, match="trained before its pairs were saved"):
        retrain_version(storage_root, first.version)


def test_the_view_is_empty_and_typed_before_any_training(storage_root):
    warehouse = Warehouse(storage_root)
    warehouse.refresh_views()
    assert warehouse.query("select count(*) n, count(version) v from rm_training_pairs").to_pylist() == [
        {"n": 0, "v": 0}]


def test_on_s3_a_fresh_machine_queries_and_retrains_a_version_s_pairs(tmp_path, monkeypatch, s3_endpoint,
                                                                       tiny_backbone):
    from orchrm_dagster.storage import StorageRoot

    def machine(name: str) -> StorageRoot:
        monkeypatch.setenv("ORCHRM_CACHE", str(tmp_path / f"cache-{name}"))
        return StorageRoot("s3://orchrm-rm/team-a", s3_endpoint)

    first = machine("a")
    first.fs.mkdir("orchrm-rm")
    v1 = train_new_version(first, toy_pairs(8, 0), toy_pairs(4, 1), config(tiny_backbone))
    assert v1.training_pairs == f"s3://orchrm-rm/team-a/checkpoints/rm/v0001/{RM_TRAINING_PAIRS_FILE}"
    assert first.fs.exists(v1.training_pairs)

    second = machine("b")  # an empty local mirror
    warehouse = Warehouse(second, str(tmp_path / "wh.duckdb"))
    warehouse.refresh_views()
    assert warehouse.query("select split, count(*) n from rm_training_pairs group by 1 order by 1").to_pylist() == [
        {"split": "train", "n": 8}, {"split": "validation", "n": 4}]
    again = retrain_version(second, 1)
    assert again.version == 2 and again.pair_set_fingerprint == v1.pair_set_fingerprint
    assert again.metrics["val_accuracy"] == v1.metrics["val_accuracy"]
