"""Versioned reward-model checkpoints under the storage root, champion/challenger, and scoring of runs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract import RM_CHECKPOINTS, RM_SCORES
from orchrm_dagster.pairs import TRAIN, VALIDATION, current_pair_ids, training_pair_texts
from orchrm_dagster.rm.checkpoints import (MANIFEST, MODEL_SUBDIR, build_manifest, is_new_champion, list_versions,
                                           next_version, version_dir, write_manifest)
from orchrm_dagster.rm.config import RMTrainConfig, ScoringSettings
from orchrm_dagster.rm.data import PairTexts
from orchrm_dagster.storage import ParquetSink, StorageRoot, local_work_dir, root_lock

CHAMPION_FILE = "champion.json"
PAIR_PROBLEMS_FILE = "pair_problems.json"  # the problems of every pair a version saw, for held-out evaluation
PAIR_IDS_FILE = "pair_ids.parquet"  # every pair in the tables when a version trained: new pairs are counted from it


@dataclass(frozen=True)
class TrainingOutcome:
    train_pairs: int
    validation_pairs: int
    version: int
    path: str
    metrics: dict
    champion_accuracy: float | None  # the previous champion on the same validation pairs
    is_champion: bool
    previous_champion: int | None
    pairs_per_second: float
    seconds: float


def checkpoints_dir(root: StorageRoot) -> Path:
    """Local folder of the checkpoints: under a local root; for an object store a local mirror that is uploaded."""
    base = Path(root.path("checkpoints", "rm")) if root.is_local else local_work_dir(root) / "checkpoints" / "rm"
    base.mkdir(parents=True, exist_ok=True)
    return base


def pair_set_fingerprint(train: PairTexts, validation: PairTexts) -> str:
    digest = hashlib.sha256()
    for split, pairs in (("train", train), ("validation", validation)):
        for pid in sorted(pairs.pair_id):
            digest.update(f"{split}:{pid}\n".encode())
    return digest.hexdigest()[:16]


def read_champion(base: Path) -> dict | None:
    """{"version", "path"} of the champion in a checkpoints folder (the path is derived here, not stored, so the
    folder can move between machines)."""
    path = base / CHAMPION_FILE
    if not path.exists():
        return None
    version = json.loads(path.read_text())["version"]
    return {"version": version, "path": version_dir(str(base), version)}


def synced_checkpoints_dir(root: StorageRoot, champion_model: bool = False) -> Path:
    """The checkpoints folder, up to date with the storage root: on an object store, a fresh machine (an empty
    local mirror) first fetches the champion pointer and every version's manifest, so versions continue from the
    last one and nothing is overwritten; with `champion_model`, the champion's weights too."""
    base = checkpoints_dir(root)
    if root.is_local:
        return base
    remote = root.path("checkpoints", "rm")
    if not root.fs.exists(remote):
        return base
    root.fs.invalidate_cache(remote)
    for entry in root.fs.ls(remote, detail=True):
        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        if entry["type"] == "file" and name == CHAMPION_FILE:
            root.fs.get_file(entry["name"], str(base / CHAMPION_FILE))
        elif entry["type"] == "directory" and name.startswith("v") and name[1:].isdigit():
            for small in (MANIFEST, PAIR_PROBLEMS_FILE, PAIR_IDS_FILE):
                local = base / name / small
                if not local.exists() and root.fs.exists(f"{entry['name']}/{small}"):
                    local.parent.mkdir(parents=True, exist_ok=True)
                    root.fs.get_file(f"{entry['name']}/{small}", str(local))
    champion = read_champion(base)
    if champion_model and champion is not None:
        model = Path(champion["path"]) / MODEL_SUBDIR
        if not model.exists():
            staging = model.with_name(MODEL_SUBDIR + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            root.fs.get(f"{remote}/{Path(champion['path']).name}/{MODEL_SUBDIR}", str(staging), recursive=True)
            staging.rename(model)
    return base


def current_champion(root: StorageRoot) -> dict | None:
    return read_champion(synced_checkpoints_dir(root))


def champion_scorer(root: StorageRoot, settings: ScoringSettings = ScoringSettings()):
    """(version, RewardScorer) of the current champion; FileNotFoundError when no reward model is trained yet."""
    from orchrm_dagster.rm.score import RewardScorer

    base = synced_checkpoints_dir(root, champion_model=True)
    champion = read_champion(base)
    if champion is None:
        raise FileNotFoundError(f"no champion reward model in {root.uri('checkpoints', 'rm')}: materialize "
                                f"`reward_model` first")
    scorer = RewardScorer(os.path.join(champion["path"], MODEL_SUBDIR), settings.device, settings.max_length,
                          settings.batch_size)
    return champion["version"], scorer


def latest_version(root: StorageRoot) -> int | None:
    """The latest finished reward-model version, champion or not (None: none trained yet)."""
    versions = list_versions(str(synced_checkpoints_dir(root)))
    return versions[-1]["version"] if versions else None


def new_pairs_since_training(root: StorageRoot, current: pl.DataFrame | None = None) -> int | None:
    """Pairs in the tables now that were not there when the latest reward-model version trained (None: none has
    trained yet). Counted by pair_id, so a rollout on problems whose pairs are at their caps, which replaces pairs
    rather than adding to their number, counts too. The latest version, champion or not: a challenger the gate
    turned down has seen the same pairs, and retraining on them again would learn nothing new."""
    versions = list_versions(str(synced_checkpoints_dir(root)))
    if not versions:
        return None
    latest = versions[-1]
    current = current_pair_ids(root) if current is None else current  # the tables' pair_id column, if read already
    seen_file = Path(latest["path"], PAIR_IDS_FILE)
    if not seen_file.exists():  # a version trained before pair ids were recorded: compare counts
        return current.height - (latest.get("pairs_available") or 0)
    seen = pl.read_parquet(seen_file)
    return current.join(seen, on="pair_id", how="anti").height


def pair_problems(root: StorageRoot, version: int) -> frozenset[str] | None:
    """The problems of every pair (train and validation) reward-model `version` saw; None for a version trained
    before this was recorded."""
    path = Path(version_dir(str(synced_checkpoints_dir(root)), version), PAIR_PROBLEMS_FILE)
    return frozenset(json.loads(path.read_text())) if path.exists() else None


def _unfinished_version(base: Path) -> int | None:
    """A version folder without a manifest is a training that was interrupted: it is resumed, not skipped."""
    finished = {v["version"] for v in list_versions(str(base))}
    started = [int(p.name[1:]) for p in base.glob("v[0-9]*") if p.is_dir() and p.name[1:].isdigit()]
    unfinished = [v for v in started if v not in finished]
    return max(unfinished) if unfinished else None


def train_on_current_pairs(root: StorageRoot, config: RMTrainConfig) -> TrainingOutcome:
    """A new version trained on the pairs table (and imported pairs); the `rm_checkpoints` table is rewritten."""
    texts = training_pair_texts(root)
    available = texts.height
    # the ids as `new_pairs_since_training` counts them later (the tables', including pairs whose runs are gone)
    texts_pair_ids = current_pair_ids(root)
    if config.pair_sources:
        texts = texts.filter(pl.col("source").is_in(config.pair_sources))
    train, validation = _split(texts, TRAIN), _split(texts, VALIDATION)
    if config.max_train_pairs is not None and len(train) > config.max_train_pairs:
        train = train.select(sorted(range(len(train)), key=lambda i: train.pair_id[i])[: config.max_train_pairs])
    kept = set(train.pair_id) | set(validation.pair_id)
    problems = texts.filter(pl.col("pair_id").is_in(kept)).get_column("problem_id").unique().sort().to_list()
    outcome = train_new_version(root, train, validation, config, problems, pairs_available=available,
                                available_pair_ids=texts_pair_ids)
    root.write_table(checkpoint_table(root), root.table_file("rm_checkpoints"))
    return outcome


def _split(texts: pl.DataFrame, split: str) -> PairTexts:
    return PairTexts.from_arrow(texts.filter(pl.col("split") == split).to_arrow())


def train_new_version(root: StorageRoot, train: PairTexts, validation: PairTexts, config: RMTrainConfig,
                      pair_problems: list[str] | None = None, pairs_available: int | None = None,
                      available_pair_ids: pl.DataFrame | None = None) -> TrainingOutcome:
    # one training at a time per storage root, on any machine: versions are numbered, and the champion replaced,
    # in order
    with root_lock(root, "reward-model", timeout_s=6 * 3600, lease_s=6 * 3600):
        return _train_new_version(root, train, validation, config, pair_problems, pairs_available, available_pair_ids)


def _train_new_version(root, train, validation, config, pair_problems, pairs_available,
                       available_pair_ids) -> TrainingOutcome:
    from orchrm_dagster.rm.score import RewardScorer, evaluate_pairs
    from orchrm_dagster.rm.train import train_reward_model

    base = synced_checkpoints_dir(root, champion_model=True)
    version = _unfinished_version(base) or next_version(str(base))
    folder = version_dir(str(base), version)
    result = train_reward_model(train, validation, config, folder, resume=True)
    champion = read_champion(base)
    champion_accuracy = None
    if champion is not None and len(validation):
        champion_scorer = RewardScorer(os.path.join(champion["path"], MODEL_SUBDIR), config.device, config.max_length)
        champion_accuracy = evaluate_pairs(champion_scorer, validation)["val_accuracy"]
    accuracy = result.validation_metrics.get("val_accuracy", 0.0)
    becomes_champion = is_new_champion(accuracy, champion_accuracy, config.champion_margin)
    metrics = {**result.validation_metrics, "champion_val_accuracy": champion_accuracy,
               "is_champion": becomes_champion}
    manifest = build_manifest(version, config, pair_set_fingerprint(train, validation), len(train),
                              len(validation), metrics, result.seconds, result.pairs_per_second)
    manifest["pairs_available"] = pairs_available  # pairs in the tables when it trained: new ones are counted from it
    _drop_trainer_checkpoints(folder)  # they only serve to resume; the manifest marks the version finished
    Path(folder, PAIR_PROBLEMS_FILE).write_text(json.dumps(sorted(pair_problems or [])))
    if available_pair_ids is not None:
        available_pair_ids.write_parquet(Path(folder, PAIR_IDS_FILE))
    write_manifest(folder, manifest)
    if becomes_champion:
        (base / CHAMPION_FILE).write_text(json.dumps({"version": version}))
    _upload(root, base, folder)
    return TrainingOutcome(len(train), len(validation), version, folder, metrics, champion_accuracy, becomes_champion,
                           champion["version"] if champion else None, result.pairs_per_second, result.seconds)


def _drop_trainer_checkpoints(folder: str) -> None:
    for checkpoint in Path(folder).glob("checkpoint-*"):
        shutil.rmtree(checkpoint, ignore_errors=True)


def _upload(root: StorageRoot, base: Path, folder: str) -> None:
    if root.is_local:
        return
    remote = root.path("checkpoints", "rm", Path(folder).name)
    root.fs.put(folder, remote, recursive=True)
    root.fs.put_file(str(base / CHAMPION_FILE), root.path("checkpoints", "rm", CHAMPION_FILE))


def checkpoint_table(root: StorageRoot) -> pa.Table:
    """The `rm_checkpoints` table: one row per finished version."""
    base = synced_checkpoints_dir(root)
    champion = read_champion(base)
    rows = []
    for v in list_versions(str(base)):
        metrics = v.get("metrics", {})
        rows.append({
            "version": v["version"], "path": root.uri("checkpoints", "rm", Path(v["path"]).name) if not root.is_local
            else v["path"], "backbone": v["backbone"], "n_train_pairs": v["n_train_pairs"],
            "n_validation_pairs": v["n_validation_pairs"], "val_accuracy": metrics.get("val_accuracy"),
            "champion_val_accuracy": metrics.get("champion_val_accuracy"), "ece": metrics.get("ece"),
            "length_spearman": metrics.get("length_spearman"), "pairs_per_second": v["pairs_per_second"],
            "pair_set_fingerprint": v["pair_set_fingerprint"],
            "is_champion": champion is not None and champion["version"] == v["version"],
            "created_at": v["created_at"],
        })
    return pa.Table.from_pylist(rows, schema=RM_CHECKPOINTS)


@dataclass
class ScoringReport:
    version: int
    batches_scored: int = 0
    batches_current: int = 0
    runs_scored: int = 0
    seconds: float = 0.0


def score_runs(root: StorageRoot, settings: ScoringSettings = ScoringSettings(),
               rows_per_chunk: int = 4096) -> ScoringReport:
    """Scores every run batch with the champion; batches already scored by it are left as they are."""
    import time

    started = time.perf_counter()
    version, scorer = champion_scorer(root, settings)
    report = ScoringReport(version)
    stale = set(batches_to_score(root, version))
    for batch_id in root.batch_ids("runs"):
        if batch_id not in stale:
            report.batches_current += 1
            continue
        report.runs_scored += _score_batch(root, scorer, batch_id, version, rows_per_chunk)
        report.batches_scored += 1
    report.seconds = time.perf_counter() - started
    return report


def batches_to_score(root: StorageRoot, version: int) -> list[str]:
    """Run batches whose scores are not the champion `version`'s of their current runs: never scored, scored by
    another version, or re-ingested since they were scored."""
    def stale(batch_id: str) -> bool:
        if root.batch_generation("rm_scores", batch_id) < root.batch_generation("runs", batch_id):
            return True
        scored_by = _scored_by(root, batch_id)
        return scored_by is not _NO_RUNS and scored_by != version  # a batch without runs has nothing to score

    return [b for b in root.batch_ids("runs") if stale(b)]


_NO_RUNS = object()


def _scored_by(root: StorageRoot, batch_id: str):
    """The version whose scores the batch holds (None: none, or several), `_NO_RUNS` for scores of no run."""
    parts = root.batch_files("rm_scores", batch_id)
    if not parts:
        return None
    with root.fs.open(parts[0], "rb") as src:
        versions = pq.read_table(src, columns=["rm_version"]).column("rm_version").unique().to_pylist()
    if not versions:
        return _NO_RUNS
    return versions[0] if len(versions) == 1 else None


def _score_batch(root: StorageRoot, scorer, batch_id: str, version: int, rows_per_chunk: int) -> int:
    scored = 0
    with tempfile.TemporaryDirectory(prefix="orchrm-scores-") as staging:
        out = str(Path(staging, "scores.parquet"))
        sink = ParquetSink(out, RM_SCORES, rows_per_chunk)
        for part in root.batch_files("runs", batch_id):
            with root.fs.open(part, "rb") as src:
                for chunk in pq.ParquetFile(src).iter_batches(rows_per_chunk, columns=["run_id", "question", "plan"]):
                    columns = chunk.to_pydict()
                    scores, tokens = scorer.score_with_lengths(columns["question"], columns["plan"])
                    for run_id, score, n_tokens in zip(columns["run_id"], scores, tokens):
                        sink.append((batch_id, run_id, version, score, n_tokens))
                    scored += len(scores)
        sink.close()
        root.replace_batch("rm_scores", batch_id, [out])
    return scored
