"""Reward-model versions in the checkpoint store (`storage.CheckpointStore`): `checkpoints/rm/v0001/` holds
manifest.json, the model (`model/`), the pairs it trained and validated on (training_pairs.parquet), their problems
and the pair ids of the tables then; `champion.json` beside the versions names each domain's champion. What is
particular to reward models is here: the manifest's fields, the files beside a version, the settings it trained with.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from orchrm_dagster.contract import RM_TRAINING_PAIRS, RM_TRAINING_PAIRS_FILE
from orchrm_dagster.pairs import TRAIN, VALIDATION
from orchrm_dagster.rm.champions import CHAMPION_FILE
from orchrm_dagster.rm.config import RMTrainConfig, backbone_label
from orchrm_dagster.rm.data import PAIR_COLUMNS, PairTexts
# MODEL_SUBDIR and read_manifest are the store's, named here too (`rm.MODEL_SUBDIR`, `rm.read_manifest`)
from orchrm_dagster.storage import (MANIFEST, MODEL_SUBDIR, CheckpointStore, StorageRoot,  # noqa: F401
                                    finished_manifests, folder_name, folder_numbers, read_manifest)
from orchrm_dagster.storage import write_manifest as _write_manifest

PAIR_PROBLEMS_FILE = "pair_problems.json"  # the problems of every pair a version saw, for held-out evaluation
PAIR_IDS_FILE = "pair_ids.parquet"  # every pair in the tables when a version trained: new pairs are counted from it
# batch id -> runs generation of the batches its pairs were built from (the pairs' `pairs_batches`): the loop tells
# from it whether a version read a round's rollouts, and each round's row names them
PAIR_BATCHES_FILE = "pair_batches.json"
MANIFEST_FIELDS = ("version", "backbone", "pair_set_fingerprint", "n_train_pairs", "n_validation_pairs", "config",
                   "metrics", "created_at", "train_seconds", "pairs_per_second")
VERSION_PREFIX = "v"
TRAINING_LOCK = "reward-model"  # one training at a time per root, on any host: versions are numbered in order


def rm_store(root: StorageRoot) -> CheckpointStore:
    return CheckpointStore(root, "rm", VERSION_PREFIX, TRAINING_LOCK)


def checkpoints_dir(root: StorageRoot) -> Path:
    """Local folder of the checkpoints: under a local root; for an object store a local mirror that is uploaded."""
    return rm_store(root).local_dir()


def synced_checkpoints_dir(root: StorageRoot) -> Path:
    """The checkpoints folder, up to date with the storage root: on an object store, a fresh machine (an empty
    local mirror) first fetches the champion pointer and every version's manifest, so versions continue from the
    last one and nothing is overwritten. Weights come when used (`model_dir`)."""
    return rm_store(root).sync(pointers=(CHAMPION_FILE,),
                               small=(MANIFEST, PAIR_PROBLEMS_FILE, PAIR_IDS_FILE, PAIR_BATCHES_FILE))


def model_dir(root: StorageRoot, version: int) -> str:
    """The local folder of `version`'s weights, fetched from the object store the first time."""
    return str(rm_store(root).fetch(version, MODEL_SUBDIR))


def upload_version(root: StorageRoot, version: int) -> None:
    """A finished version and the champion pointer, put on the object store (nothing to do on a local root)."""
    rm_store(root).upload(version, pointers=(CHAMPION_FILE,))


def version_dir(root: str, version: int) -> str:
    """A version's folder in a local checkpoints folder `root`."""
    return os.path.join(root, folder_name(VERSION_PREFIX, version))


def next_version(root: str) -> int:
    return max(folder_numbers(root, VERSION_PREFIX), default=0) + 1


def build_manifest(version: int, config: RMTrainConfig, pair_set_fingerprint: str, n_train_pairs: int,
                   n_validation_pairs: int, metrics: dict, train_seconds: float, pairs_per_second: float) -> dict:
    return {
        "version": version,
        "backbone": backbone_label(config.backbone),
        "pair_set_fingerprint": pair_set_fingerprint,
        "n_train_pairs": n_train_pairs,
        "n_validation_pairs": n_validation_pairs,
        "config": asdict(config),
        "metrics": metrics,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "train_seconds": train_seconds,
        "pairs_per_second": pairs_per_second,
    }


def write_manifest(version_dir: str, manifest: dict) -> str:
    """Write manifest.json atomically (a reader never sees half a file), once it has every field; returns its
    path."""
    missing = [name for name in MANIFEST_FIELDS if name not in manifest]
    if missing:
        raise ValueError(f"manifest lacks {missing}")
    return _write_manifest(version_dir, manifest)


def saved_config(manifest: dict, run: RMTrainConfig | None = None) -> RMTrainConfig:
    """The settings a version trained with (a setting added since takes its default), where its training logs go
    taken from `run`."""
    fields = RMTrainConfig.__pydantic_fields__
    saved = {name: value for name, value in manifest["config"].items() if name in fields}
    logs = {name: getattr(run, name) for name in _LOG_SETTINGS if run is not None and name in fields}
    return RMTrainConfig(**{**saved, **logs, "retrain_from_version": None})


_LOG_SETTINGS = ("report_to", "logging_dir")  # where training is watched, not what it learns


def save_training_pairs(version_dir: str, version: int, train: PairTexts, validation: PairTexts,
                        described: pl.DataFrame) -> str:
    """Write the pairs a version trained and validated on, in the order training read them, beside its checkpoint;
    `described`: each pair's problem_id and domain (train rows, then validation rows). Returns the file's path."""
    rows = pl.concat([_split_rows(TRAIN, train), _split_rows(VALIDATION, validation)])
    rows = pl.concat([rows, described.select("problem_id", "domain")], how="horizontal")
    table = rows.with_columns(version=pl.lit(version, pl.Int64)).select(RM_TRAINING_PAIRS.names).to_arrow()
    path = os.path.join(version_dir, RM_TRAINING_PAIRS_FILE)
    pq.write_table(table.cast(RM_TRAINING_PAIRS), path + ".partial", compression="zstd")
    os.replace(path + ".partial", path)
    return path


def _split_rows(split: str, pairs: PairTexts) -> pl.DataFrame:
    texts = pl.DataFrame({name: getattr(pairs, name) for name in PAIR_COLUMNS},
                         schema=dict.fromkeys(PAIR_COLUMNS, pl.String))
    return texts.with_columns(split=pl.lit(split), position=pl.int_range(pl.len(), dtype=pl.Int64))


def read_training_pairs(version_dir: str) -> pl.DataFrame:
    """The pairs saved by `save_training_pairs`, train then validation, each in the order training read them."""
    path = os.path.join(version_dir, RM_TRAINING_PAIRS_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: this version was trained before its pairs were saved beside it")
    return pl.read_parquet(path).sort(pl.col("split") != TRAIN, "position")


def split_pairs(saved: pl.DataFrame, split: str) -> PairTexts:
    return PairTexts(**{name: saved.filter(pl.col("split") == split)[name].to_list() for name in PAIR_COLUMNS})


def list_versions(root: str) -> list[dict]:
    """Every version folder with a manifest, oldest first: the manifest's fields plus `version` and `path`."""
    return finished_manifests(root, VERSION_PREFIX, key="version")
