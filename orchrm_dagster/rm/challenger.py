"""A challenger: a new reward-model version trained on the current pairs (one shared model, or one per domain),
gated against each domain's champion on the same validation pairs, and crowned where it wins. One training at a time
per storage root, on any host (the store's lock). A version can be trained again on exactly its saved pairs
(`retrain_version`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from orchrm_dagster.contract import RM_TRAINING_PAIRS_FILE
from orchrm_dagster.pairs import TRAIN, VALIDATION, current_pair_ids, pairs_batches, training_pair_texts
from orchrm_dagster.rm.champions import (CHAMPION_FILE, DomainVerdict, Gate, crowned, gate, read_champions,
                                         write_champions)
from orchrm_dagster.rm.checkpoints import (PAIR_BATCHES_FILE, PAIR_IDS_FILE, PAIR_PROBLEMS_FILE, build_manifest, model_dir,
                                          read_manifest, read_training_pairs, rm_store, save_training_pairs,
                                          saved_config, split_pairs, synced_checkpoints_dir, upload_version,
                                          write_manifest)
from orchrm_dagster.rm.config import RMTrainConfig
from orchrm_dagster.rm.data import PairTexts
from orchrm_dagster.rm.domains import all_domains, with_domains
from orchrm_dagster.rm.versions import checkpoint_table, pair_problems, trained_batches, trained_on
from orchrm_dagster.storage import MANIFEST, StorageRoot, writing

TRAINING_WAIT_S = 6 * 3600  # a training waits this long for another on the same root


@dataclass(frozen=True)
class TrainingOutcome:
    train_pairs: int
    validation_pairs: int
    version: int
    path: str
    metrics: dict
    # the previous champion on the same validation pairs, when the domains this version stood for had one and the
    # same champion (else None: see `verdicts`)
    champion_accuracy: float | None
    is_champion: bool  # champion of at least one domain
    previous_champions: dict[str, int]  # domain -> champion before this version
    pairs_per_second: float
    seconds: float
    domains: tuple[str, ...] = ()  # the domains it stood for as a champion
    verdicts: dict[str, DomainVerdict] = field(default_factory=dict)  # domain -> how it fared there
    training_pairs: str = ""  # where the pairs it trained and validated on are saved (a URI on an object store)
    pair_set_fingerprint: str = ""
    memory: dict = field(default_factory=dict)  # the training's memory estimate, made before loading (`rm.memory`)

    @property
    def champion_of(self) -> tuple[str, ...]:
        return tuple(d for d, verdict in self.verdicts.items() if verdict.becomes_champion)

    def to_json(self) -> dict:
        """JSON-able data (what `from_json` reads back): how a training process reports its outcome."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> TrainingOutcome:
        return cls(**{**data, "domains": tuple(data["domains"]),
                      "verdicts": {d: DomainVerdict(**v) for d, v in data["verdicts"].items()}})


def pair_set_fingerprint(train: PairTexts, validation: PairTexts) -> str:
    digest = hashlib.sha256()
    for split, pairs in (("train", train), ("validation", validation)):
        for pid in sorted(pairs.pair_id):
            digest.update(f"{split}:{pid}\n".encode())
    return digest.hexdigest()[:16]


def _unfinished_version(root: StorageRoot) -> int | None:
    """A version folder without a manifest is a training that was interrupted: it is resumed, not skipped."""
    store = rm_store(root)
    return max((v for v in store.numbers() if not store.is_finished(v)), default=None)


def train_on_current_pairs(root: StorageRoot, config: RMTrainConfig) -> list[TrainingOutcome]:
    """New versions trained on the pairs table (and imported pairs): one shared model, or one per domain, as
    `config.domain_models` says; with `config.retrain_from_version`, that version again (`retrain_version`). The
    `rm_checkpoints` table is rewritten."""
    if config.retrain_from_version is not None:
        outcomes = [retrain_version(root, config.retrain_from_version, config)]
        root.write_table(checkpoint_table(root), root.table_file("rm_checkpoints"))
        return outcomes
    batches = pairs_batches(root)  # read before the pairs: a rebuild meanwhile makes it name fewer, never more
    texts = training_pair_texts(root)
    available = texts.height
    # the ids as `new_pairs_since_training` counts them later (the tables', including pairs whose runs are gone)
    texts_pair_ids = current_pair_ids(root)
    if config.pair_sources:
        texts = texts.filter(pl.col("source").is_in(config.pair_sources))
    texts = with_domains(root, texts)
    train, validation = texts.filter(pl.col("split") == TRAIN), texts.filter(pl.col("split") == VALIDATION)
    if config.max_train_pairs is not None:
        train = train.sort("pair_id").head(config.max_train_pairs)
    outcomes = []
    for domains, train_part, validation_part in domain_trainings(train, validation, config, all_domains()):
        start = incremental_start(root, config, domains, train_part)
        read = start.pairs if start is not None else train_part
        problems = pl.concat([train_part["problem_id"], validation_part["problem_id"]]).unique().sort().to_list()
        outcomes.append(train_new_version(
            root, _pair_texts(read), _pair_texts(validation_part), config, problems, pairs_available=available,
            available_pair_ids=texts_pair_ids, domains=domains, batches=batches,
            validation_domains=validation_part["domain"].to_list(),
            described=pl.concat([read, validation_part]).select("problem_id", "domain"), start=start))
    root.write_table(checkpoint_table(root), root.table_file("rm_checkpoints"))
    return outcomes


@dataclass(frozen=True)
class Start:
    """An incremental retraining: the champion it continues, and the pairs it reads (new ones, then old ones
    replayed)."""

    version: int
    model: str  # the champion's weights
    pairs: pl.DataFrame
    new: int
    replayed: int
    old: int  # old training pairs it could have replayed

    def record(self) -> dict:
        return {"started_from": self.version, "new_pairs": self.new, "replayed_pairs": self.replayed,
                "old_pairs": self.old}


def replay_selection(train: pl.DataFrame, seen: pl.DataFrame, ratio: float, seed: int
                     ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the training pairs not in `seen`, `ratio` old ones per new one drawn with `seed` from the rest)."""
    new = train.join(seen.select("pair_id"), on="pair_id", how="anti")
    old = train.join(seen.select("pair_id"), on="pair_id", how="semi").sort("pair_id")
    wanted = min(old.height, round(ratio * new.height))
    return new, old.sample(wanted, seed=seed, shuffle=True) if wanted else old.head(0)


# what a checkpoint must share with the config for a retraining to continue it
_CONTINUABLE = ("backbone", "input_format", "max_length", "thinking_tokens", "template", "lora", "save", "dtype",
                "pair_sources")


def incremental_start(root: StorageRoot, config: RMTrainConfig, domains: Sequence[str],
                      train: pl.DataFrame) -> Start | None:
    """How a retraining continues the champion of `domains` (config.start_from champion), or None: a full training
    (start_from scratch, no champion, one that recorded no pair ids or trained otherwise, or nothing new)."""
    from orchrm_dagster.rm.versions import seen_pair_ids, version_manifest

    champions = read_champions(synced_checkpoints_dir(root), all_domains())
    candidates = {champions[d] for d in domains if d in champions}
    if config.start_from != "champion" or not candidates:
        return None
    version = max(candidates)
    seen, saved = seen_pair_ids(root, version), version_manifest(root, version).get("config", {})
    wanted = {**asdict(config), "pair_sources": list(config.pair_sources)}
    if seen is None or any(_same(saved.get(name)) != _same(wanted.get(name)) for name in _CONTINUABLE):
        return None
    new, replayed = replay_selection(train, seen, config.replay_ratio, config.seed)
    if not new.height:
        return None
    old = train.height - new.height
    return Start(version, model_dir(root, version), pl.concat([new, replayed]), new.height, replayed.height, old)


def _same(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


def domain_trainings(train: pl.DataFrame, validation: pl.DataFrame, config: RMTrainConfig,
                     domains: Sequence[str]) -> list[tuple[tuple[str, ...], pl.DataFrame, pl.DataFrame]]:
    """(the domains a new version stands for, its training pairs, its validation pairs) of each version to train.
    shared: one model on every pair, for every domain. per_domain: a model per domain with at least
    `min_domain_pairs` training pairs, on that domain's pairs only; the other domains (too few pairs to learn
    from alone) share one model trained on every pair, pairs of no known domain included."""
    if config.domain_models == "shared":
        return [(tuple(domains), train, validation)]
    counts = dict(train.group_by("domain").len().iter_rows())
    own = [d for d in domains if counts.get(d, 0) >= config.min_domain_pairs]
    trainings = [((d,), train.filter(pl.col("domain") == d), validation.filter(pl.col("domain") == d)) for d in own]
    rest = tuple(d for d in domains if d not in own)
    return trainings + ([(rest, train, validation)] if rest else [])


def _pair_texts(texts: pl.DataFrame) -> PairTexts:
    return PairTexts.from_arrow(texts.to_arrow())


def train_new_version(root: StorageRoot, train: PairTexts, validation: PairTexts, config: RMTrainConfig,
                      pair_problems: list[str] | None = None, pairs_available: int | None = None,
                      available_pair_ids: pl.DataFrame | None = None, domains: Collection[str] | None = None,
                      validation_domains: Sequence[str | None] | None = None, described: pl.DataFrame | None = None,
                      retrained_from: int | None = None, batches: Mapping[str, str] | None = None,
                      start: Start | None = None) -> TrainingOutcome:
    """A new version trained on `train`, champion of each of `domains` (None: every domain) where the gate says so.
    `validation_domains`: the domain of each validation pair (None, or a None entry: not known). The pairs are saved
    beside the checkpoint (`described`: each one's problem_id and domain, train rows then validation rows)."""
    validation_domains = list(validation_domains or [None] * len(validation))
    if described is None:  # texts alone: no problem known, nor the domain of a training pair
        described = pl.DataFrame({"problem_id": [None] * (len(train) + len(validation)),
                                  "domain": [None] * len(train) + validation_domains},
                                 schema={"problem_id": pl.String, "domain": pl.String})
    # one training at a time per storage root, on any machine: versions are numbered, and champions replaced,
    # in order
    with rm_store(root).lock(timeout_s=TRAINING_WAIT_S):
        return _train_new_version(root, train, validation, config, pair_problems, pairs_available, available_pair_ids,
                                  tuple(sorted(domains or all_domains())), validation_domains, described,
                                  retrained_from, batches, start)


def _train_new_version(root, train, validation, config, pair_problems, pairs_available, available_pair_ids,
                       domains, validation_domains, described, retrained_from, batches, start) -> TrainingOutcome:
    from orchrm_dagster.rm.train import train_reward_model

    base, store = synced_checkpoints_dir(root), rm_store(root)
    version = _unfinished_version(root) or store.next_number()
    folder, name = str(store.folder(version)), store.name(version)
    with writing(f"reward-model checkpoint {name}", folder):  # its trainer checkpoints and model
        # validated below, once, with the champions on the same pairs
        # an incremental retraining starts from the champion's weights; its manifest keeps the config's backbone
        trained = dataclasses.replace(config, backbone=start.model) if start is not None else config
        result = train_reward_model(train, PairTexts.empty(), trained, folder, resume=True)
    champions = read_champions(base, all_domains())
    # a champion trained on other pair sources (the other GRPO recipe) is not a rival: the recipe changed on purpose
    rivals = {d: v for d, v in champions.items() if trained_on(root, v) == tuple(config.pair_sources)}
    metrics, judged = _gate(root, result.model_dir, validation, validation_domains, domains, rivals, config, version)
    becomes_champion = any(v.becomes_champion for v in judged.verdicts.values())
    metrics.update(champion_val_accuracy=judged.champion_accuracy, is_champion=becomes_champion,
                   verdicts={d: asdict(v) for d, v in judged.verdicts.items()})
    fingerprint = pair_set_fingerprint(train, validation)
    manifest = build_manifest(version, config, fingerprint, len(train), len(validation), metrics, result.seconds,
                              result.pairs_per_second)
    manifest["pairs_available"] = pairs_available  # pairs in the tables when it trained: new ones are counted from it
    manifest["domains"] = list(domains)
    if retrained_from is not None:
        manifest["retrained_from"] = retrained_from
    if start is not None:
        manifest.update(start.record())
    if result.memory:
        manifest["memory_estimate"] = result.memory
    # what resumability cost this call: the checkpoints written by the clock, and their share of its seconds
    manifest["trainer_checkpoints"] = {"written": result.checkpoints, "seconds": round(result.checkpoint_seconds, 2)}
    manifest["training_tokens"] = result.training_tokens  # what the loop's token budget counts of a retraining
    _drop_trainer_checkpoints(folder)  # they only serve to resume; the manifest marks the version finished
    with writing(f"reward-model checkpoint {name}", folder):
        Path(folder, PAIR_PROBLEMS_FILE).write_text(json.dumps(sorted(pair_problems or [])))
        save_training_pairs(folder, version, train, validation, described)
        if available_pair_ids is not None:
            available_pair_ids.write_parquet(Path(folder, PAIR_IDS_FILE))
        if batches is not None:
            Path(folder, PAIR_BATCHES_FILE).write_text(json.dumps(dict(batches), sort_keys=True))
        write_manifest(folder, manifest)
    if becomes_champion:
        _crown(base, folder, name, crowned(champions, judged.verdicts, version))
    upload_version(root, version)
    saved = store.uri(store.name(version), RM_TRAINING_PAIRS_FILE)
    return TrainingOutcome(len(train), len(validation), version, folder, metrics, judged.champion_accuracy,
                           becomes_champion, champions, result.pairs_per_second, result.seconds, domains,
                           judged.verdicts, saved, fingerprint, result.memory)


def retrain_version(root: StorageRoot, version: int, run: RMTrainConfig | None = None) -> TrainingOutcome:
    """A new version trained again on exactly the pairs `version` trained and validated on (saved beside it, in the
    order it read them), with its saved settings and seed, standing for the same domains: the same pair-set
    fingerprint and, on the same device, the same model. Where its training logs go comes from `run`. The gate
    judges it like any new version."""
    synced_checkpoints_dir(root)
    store = rm_store(root)
    folder = str(store.folder(version))
    if not store.is_finished(version):
        raise FileNotFoundError(f"no reward-model version {version} in {store.uri()}")
    for name in (RM_TRAINING_PAIRS_FILE, PAIR_IDS_FILE):
        store.fetch_file(version, name)
    manifest = read_manifest(folder)
    saved = read_training_pairs(folder)
    ids_file = Path(folder, PAIR_IDS_FILE)
    start = None
    if manifest.get("started_from") is not None:  # it continued a champion: so does its retraining
        trained = split_pairs(saved, TRAIN)
        start = Start(manifest["started_from"], model_dir(root, manifest["started_from"]), pl.DataFrame(),
                      manifest.get("new_pairs", len(trained)), manifest.get("replayed_pairs", 0),
                      manifest.get("old_pairs", 0))
    return train_new_version(
        root, split_pairs(saved, TRAIN), split_pairs(saved, VALIDATION), saved_config(manifest, run),
        pair_problems(root, version), pairs_available=manifest.get("pairs_available"),
        available_pair_ids=pl.read_parquet(ids_file) if ids_file.exists() else None,
        domains=manifest.get("domains"),
        validation_domains=saved.filter(pl.col("split") == VALIDATION)["domain"].to_list(),
        described=saved.select("problem_id", "domain"), retrained_from=version,
        batches=trained_batches(root, version), start=start)


def _gate(root, new_model: str, validation: PairTexts, validation_domains: list, domains: tuple[str, ...],
          champions: Mapping[str, int], config: RMTrainConfig, version: int) -> tuple[dict, Gate]:
    """The new model's validation metrics, and the per-domain gate with its floor: the new model and the champions
    of its domains, each scored once on the validation pairs."""
    if not len(validation):
        return {}, gate(np.zeros(0, bool), {}, [], domains, champions, config.champion_margin, config.floor(), version)
    metrics, wins = _validation(new_model, validation, config.device)
    judges = {v: _wins(model_dir(root, v), validation, config.device)
              for v in {champions[d] for d in domains if d in champions}}
    judged = gate(wins, judges, validation_domains, domains, champions, config.champion_margin, config.floor(),
                  version)
    return {**metrics, "accuracy_by_domain": judged.accuracy_by_domain}, judged


def _validation(model: str, pairs: PairTexts, device: str) -> tuple[dict, np.ndarray]:
    """The model's `pairwise_metrics` on the pairs, and which pairs it ranks right."""
    from orchrm_dagster.rm.metrics import pairwise_metrics

    scorer, chosen, rejected = _scores(model, pairs, device)
    lengths = scorer.count_plan_tokens(pairs.chosen_plan + pairs.rejected_plan)
    metrics = pairwise_metrics(chosen, rejected, pairs.source, lengths[:len(pairs)], lengths[len(pairs):])
    return metrics, np.asarray(chosen) > np.asarray(rejected)


def _wins(model: str, pairs: PairTexts, device: str) -> np.ndarray:
    """Which pairs the model ranks right."""
    _, chosen, rejected = _scores(model, pairs, device)
    return np.asarray(chosen) > np.asarray(rejected)


def _scores(model: str, pairs: PairTexts, device: str):
    from orchrm_dagster.rm.score import RewardScorer

    scorer = RewardScorer(model, device)
    scores = scorer.score(pairs.question * 2, pairs.chosen_plan + pairs.rejected_plan)
    return scorer, scores[:len(pairs)], scores[len(pairs):]


def _crown(base: Path, folder: str, name: str, champions: Mapping[str, int]) -> None:
    """The champion pointer rewritten. One that cannot be (a full disk) unfinishes the version (its manifest removed):
    the next training trains it again, under its number, rather than a version after it that the pointer never
    named."""
    try:
        with writing(f"the champion pointer crowning reward-model {name}", Path(base, CHAMPION_FILE)):
            write_champions(base, champions)
    except BaseException:
        Path(folder, MANIFEST).unlink(missing_ok=True)
        raise


def _drop_trainer_checkpoints(folder: str) -> None:
    for checkpoint in Path(folder).glob("checkpoint-*"):
        shutil.rmtree(checkpoint, ignore_errors=True)
