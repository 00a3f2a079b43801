import json
import os

import pytest

from orchrm_dagster.rm.champions import is_new_champion
from orchrm_dagster.rm.checkpoints import (
    build_manifest,
    list_versions,
    next_version,
    read_manifest,
    version_dir,
    write_manifest,
)
from orchrm_dagster.rm.config import PACKAGED_BACKBONE, RMTrainConfig


def test_champion_rule():
    assert is_new_champion(0.5, None, margin=0.0)
    assert is_new_champion(0.91, 0.90, margin=0.0)
    assert is_new_champion(0.90, 0.90, margin=0.0)
    assert is_new_champion(0.89, 0.90, margin=0.01)  # exactly at the margin, despite 0.9 - 0.01 > 0.89 in floats
    assert not is_new_champion(0.88, 0.90, margin=0.01)
    assert not is_new_champion(0.899, 0.90, margin=0.0)


def _manifest(version: int, accuracy: float) -> dict:
    return build_manifest(version, RMTrainConfig(epochs=2.0), "fingerprint", 100, 20, {"val_accuracy": accuracy},
                          train_seconds=12.5, pairs_per_second=16.0)


def test_versions_count_up_from_one(tmp_path):
    root = str(tmp_path / "rm")
    assert next_version(root) == 1
    write_manifest(version_dir(root, 1), _manifest(1, 0.7))
    os.makedirs(version_dir(root, 2))  # a version being written, no manifest yet
    (tmp_path / "rm" / "notes").mkdir()
    assert next_version(root) == 3


def test_manifest_round_trip_and_listing(tmp_path):
    root = str(tmp_path)
    for version, accuracy in ((2, 0.8), (1, 0.7), (10, 0.9)):
        write_manifest(version_dir(root, version), _manifest(version, accuracy))
    manifest = read_manifest(version_dir(root, 1))
    assert manifest["backbone"] == PACKAGED_BACKBONE
    assert manifest["config"]["epochs"] == 2.0 and manifest["n_train_pairs"] == 100
    assert manifest["created_at"].endswith("+00:00")
    json.dumps(manifest)
    listed = list_versions(root)
    assert [v["version"] for v in listed] == [1, 2, 10]
    assert [v["metrics"]["val_accuracy"] for v in listed] == [0.7, 0.8, 0.9]
    assert listed[2]["path"] == version_dir(root, 10)


def test_incomplete_manifest_is_refused(tmp_path):
    with pytest.raises(ValueError, match="metrics"):
        write_manifest(str(tmp_path), {k: v for k, v in _manifest(1, 0.5).items() if k != "metrics"})
