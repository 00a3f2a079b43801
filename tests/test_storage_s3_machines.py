"""An S3 storage root used from two machines (two separate local caches, one moto server over HTTP): what one
trained the other finds, continues and never overwrites."""

from __future__ import annotations

import hashlib

import pytest

from orchrm_dagster.rm import RMTrainConfig, ScoringSettings, champion_scorer, checkpoint_table, train_new_version
from orchrm_dagster.storage import StorageRoot

from .rm.toy import NO_FLOOR, toy_pairs


@pytest.fixture
def bucket_root(s3_endpoint):
    root = StorageRoot("s3://orchrm-machines/team-a", s3_endpoint)
    root.fs.mkdir("orchrm-machines")
    return s3_endpoint


def on_machine(monkeypatch, tmp_path, name: str, endpoint: str) -> StorageRoot:
    monkeypatch.setenv("ORCHRM_CACHE", str(tmp_path / f"cache-{name}"))
    return StorageRoot("s3://orchrm-machines/team-a", endpoint)


def remote_digest(root: StorageRoot, version: int) -> str:
    folder = root.path("checkpoints", "rm", f"v{version:04d}")
    return hashlib.sha256(b"".join(root.fs.cat_file(p) for p in sorted(root.fs.find(folder)))).hexdigest()


def test_a_fresh_machine_continues_the_versions_finds_the_champion_and_overwrites_nothing(
        bucket_root, tmp_path, monkeypatch, tiny_backbone):
    config = RMTrainConfig(backbone=tiny_backbone, max_length=64, epochs=1, batch_size=4, **NO_FLOOR)
    first = on_machine(monkeypatch, tmp_path, "a", bucket_root)
    v1 = train_new_version(first, toy_pairs(8, 0), toy_pairs(4, 1), config, ["p1"])
    assert v1.version == 1 and v1.is_champion
    published = remote_digest(first, 1)

    second = on_machine(monkeypatch, tmp_path, "b", bucket_root)  # an empty cache: a new machine
    version, scorer = champion_scorer(second, ScoringSettings(device="cpu", max_length=64), "math")
    assert version == 1 and len(scorer.score(["q"], ["<agent_name>DebateAgent</agent_name>"])) == 1
    v2 = train_new_version(second, toy_pairs(8, 2), toy_pairs(4, 1), config, ["p2"])
    assert v2.version == 2 and v2.champion_accuracy is not None  # compared against v1, read from S3
    assert remote_digest(second, 1) == published  # v1 untouched
    assert [r["version"] for r in checkpoint_table(second).to_pylist()] == [1, 2]

    back = on_machine(monkeypatch, tmp_path, "a", bucket_root)  # the first machine sees what the second did
    assert [r["version"] for r in checkpoint_table(back).to_pylist()] == [1, 2]
    assert sum(r["is_champion"] for r in checkpoint_table(back).to_pylist()) == 1
