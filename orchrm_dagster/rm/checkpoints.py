"""Versioned reward-model checkpoints under a local root, and the champion/challenger rule.

Layout: root/v0001/{manifest.json, training_pairs.parquet, model/...}, root/v0002/..., one folder per trained
version.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from orchrm_dagster.contract import RM_TRAINING_PAIRS, RM_TRAINING_PAIRS_FILE
from orchrm_dagster.pairs import TRAIN, VALIDATION
from orchrm_dagster.rm.config import RMTrainConfig, backbone_label
from orchrm_dagster.rm.data import PAIR_COLUMNS, PairTexts

MANIFEST = "manifest.json"
MODEL_SUBDIR = "model"  # the trained model (safetensors + tokenizer) inside a version folder
MANIFEST_FIELDS = ("version", "backbone", "pair_set_fingerprint", "n_train_pairs", "n_validation_pairs", "config",
                   "metrics", "created_at", "train_seconds", "pairs_per_second")
_VERSION_DIR = re.compile(r"^v(\d+)$")
# Accuracies are ratios of counts; without a tolerance 0.9 - 0.01 > 0.89 in floating point.
_TOLERANCE = 1e-9


def version_dir(root: str, version: int) -> str:
    return os.path.join(root, f"v{version:04d}")


def next_version(root: str) -> int:
    return max(_existing_versions(root), default=0) + 1


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
    """Write manifest.json atomically (a reader never sees half a file); returns its path."""
    missing = [name for name in MANIFEST_FIELDS if name not in manifest]
    if missing:
        raise ValueError(f"manifest lacks {missing}")
    os.makedirs(version_dir, exist_ok=True)
    path = os.path.join(version_dir, MANIFEST)
    partial = path + ".partial"
    with open(partial, "w") as out:
        json.dump(manifest, out, indent=2, sort_keys=True)
    os.replace(partial, path)
    return path


def read_manifest(version_dir: str) -> dict:
    with open(os.path.join(version_dir, MANIFEST)) as source:
        return json.load(source)


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
    versions = []
    for version in sorted(_existing_versions(root)):
        path = version_dir(root, version)
        if os.path.exists(os.path.join(path, MANIFEST)):
            versions.append({**read_manifest(path), "version": version, "path": path})
    return versions


def is_new_champion(challenger_accuracy: float, champion_accuracy: float | None, margin: float) -> bool:
    """A challenger replaces the champion unless it is worse by more than `margin` (or there is no champion)."""
    if champion_accuracy is None:
        return True
    return challenger_accuracy >= champion_accuracy - margin - _TOLERANCE


def _existing_versions(root: str) -> list[int]:
    if not os.path.isdir(root):
        return []
    matches = (_VERSION_DIR.match(entry.name) for entry in Path(root).iterdir() if entry.is_dir())
    return [int(m.group(1)) for m in matches if m]
