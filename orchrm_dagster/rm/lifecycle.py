"""Versioned reward-model checkpoints under the storage root, and one champion per domain (see `champions`)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from orchrm_dagster.contract import RM_CHECKPOINTS, RM_TRAINING_PAIRS_FILE
from orchrm_dagster.pairs import TRAIN, VALIDATION, current_pair_ids, training_pair_texts
from orchrm_dagster.rm.champions import (CHAMPION_FILE, DomainVerdict, Gate, NoChampion, crowned, gate,
                                         read_champions, write_champions)
from orchrm_dagster.rm.checkpoints import (MANIFEST, MODEL_SUBDIR, build_manifest, list_versions, next_version,
                                          read_manifest, read_training_pairs, save_training_pairs, saved_config,
                                          split_pairs, version_dir, write_manifest)
from orchrm_dagster.rm.config import RMTrainConfig, ScoringSettings
from orchrm_dagster.rm.data import PairTexts
from orchrm_dagster.rm.domains import DomainScorer, all_domains, with_domains
from orchrm_dagster.storage import StorageRoot, local_work_dir, root_lock

PAIR_PROBLEMS_FILE = "pair_problems.json"  # the problems of every pair a version saw, for held-out evaluation
PAIR_IDS_FILE = "pair_ids.parquet"  # every pair in the tables when a version trained: new pairs are counted from it


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

    @property
    def champion_of(self) -> tuple[str, ...]:
        return tuple(d for d, verdict in self.verdicts.items() if verdict.becomes_champion)


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


def synced_checkpoints_dir(root: StorageRoot) -> Path:
    """The checkpoints folder, up to date with the storage root: on an object store, a fresh machine (an empty
    local mirror) first fetches the champion pointer and every version's manifest, so versions continue from the
    last one and nothing is overwritten. Weights come when used (`model_dir`)."""
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
    return base


def model_dir(root: StorageRoot, base: Path, version: int) -> str:
    """The local folder of `version`'s weights, fetched from the object store the first time."""
    model = Path(version_dir(str(base), version), MODEL_SUBDIR)
    if not root.is_local and not model.exists():
        staging = model.with_name(MODEL_SUBDIR + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        root.fs.get(root.path("checkpoints", "rm", model.parent.name, MODEL_SUBDIR), str(staging), recursive=True)
        staging.rename(model)
    return str(model)


def current_champions(root: StorageRoot) -> dict[str, int]:
    """Domain -> champion version ({} before the first reward model)."""
    return read_champions(synced_checkpoints_dir(root), all_domains())


def champion_version(root: StorageRoot, domain: str) -> int:
    """`domain`'s champion version; NoChampion saying why when the domain has none."""
    version = current_champions(root).get(domain)
    if version is None:
        raise NoChampion(no_champion_reason(root, domain))
    return version


def champion_scorer(root: StorageRoot, settings: ScoringSettings, domain: str):
    """(version, RewardScorer) of `domain`'s champion; NoChampion saying why when the domain has none."""
    version = champion_version(root, domain)  # syncs the checkpoints folder
    return version, _scorer(root, checkpoints_dir(root), version, settings)


def domain_scorer(root: StorageRoot, settings: ScoringSettings = ScoringSettings()) -> DomainScorer:
    """A scorer that reads each plan with its domain's champion; NoChampion saying why when no domain has one."""
    base = synced_checkpoints_dir(root)
    champions = read_champions(base, all_domains())
    if not champions:
        raise NoChampion(no_champion_reason(root))
    return DomainScorer(champions, lambda version: _scorer(root, base, version, settings))


def no_champion_reason(root: StorageRoot, domain: str | None = None) -> str:
    """Why `domain` (None: every domain) has no champion reward model: no version trained yet, or what the gate said
    of the latest version that stood for it (its floor: too few validation pairs, accuracy not above chance)."""
    return _cached_reasons(root, [domain])[domain]


def _no_champion_reasons(root: StorageRoot, versions: Sequence[dict],
                         domains: Collection[str | None]) -> dict[str | None, str]:
    """`no_champion_reason` of each of `domains`, from the finished versions' manifests (`list_versions`)."""
    reasons = {}
    for domain in domains:
        where = f"for the {domain} domain" if domain else "for any domain"
        standing = [v for v in versions if domain is None or domain in v.get("domains", all_domains())]
        if not standing:
            reasons[domain] = (f"no champion reward model {where} in {root.uri('checkpoints', 'rm')}: none trained "
                               f"yet (materialize `reward_model` once the runs make pairs)")
            continue
        latest = standing[-1]
        verdicts = latest.get("metrics", {}).get("verdicts", {})
        shown = [domain] if domain else sorted(verdicts)
        said = "; ".join(("" if domain else f"{d}: ") + verdicts[d]["refusal"] for d in shown
                         if (verdicts.get(d) or {}).get("refusal"))
        said = said or f"v{latest['version']} was not crowned (it trained before the gate recorded why)"
        reasons[domain] = f"no champion reward model {where}: {said}; a version trains again once new pairs arrive"
    return reasons


@dataclass(frozen=True)
class Standing:
    """A domain's champion and what it showed on the domain's validation pairs when crowned, or why there is none."""

    domain: str
    champion: int | None
    accuracy: float | None = None
    pairs: int = 0
    p_value: float | None = None  # of its accuracy against chance
    falls_short: str | None = None  # why it (crowned before the floor, say) does not clear the floor it trained with
    no_champion: str | None = None  # why the domain has none

    @property
    def beats_chance(self) -> bool:
        return self.champion is not None and self.falls_short is None


def champion_standings(root: StorageRoot) -> list[Standing]:
    """Every domain's standing: its champion with the verdict that crowned it (a champion crowned before verdicts
    recorded a p-value is tested again on its recorded accuracy and pairs, against the floor of its config), or why
    it has none."""
    champions = current_champions(root)
    versions = list_versions(str(synced_checkpoints_dir(root)))
    manifests = {v["version"]: v for v in versions}
    reasons = _no_champion_reasons(root, versions, [d for d in all_domains() if d not in champions])
    standings = []
    for domain in all_domains():
        version = champions.get(domain)
        if version is None:
            standings.append(Standing(domain, None, no_champion=reasons[domain]))
            continue
        manifest = manifests.get(version, {})
        metrics = manifest.get("metrics", {})
        verdict = metrics.get("verdicts", {}).get(domain) or {}
        accuracy = verdict.get("accuracy", (metrics.get("accuracy_by_domain") or {}).get(domain,
                                                                                          metrics.get("val_accuracy")))
        pairs = verdict.get("pairs", manifest.get("n_validation_pairs") or 0) if accuracy is not None else 0
        floor = saved_config(manifest).floor() if manifest else RMTrainConfig().floor()
        p_value = verdict.get("p_value")
        if p_value is None:
            p_value = floor.p_value(round((accuracy or 0.0) * pairs), pairs)
        standings.append(Standing(domain, version, accuracy, pairs, p_value,
                                  floor.refusal(version, accuracy, pairs, p_value)))
    return standings


def champion_refusals(root: StorageRoot, domains: Collection[str] | None = None,
                      champions: Mapping[str, int] | None = None, latest: int | None = None) -> dict[str, str]:
    """Domain -> why it has no champion, for each of `domains` (None: every domain) without one. `champions` and
    `latest` (`latest_version`): the current ones, if read already (the loop's read does; it asks every few
    seconds)."""
    champions = current_champions(root) if champions is None else champions
    wanted = sorted(d for d in (domains if domains is not None else all_domains()) if d not in champions)
    return _cached_reasons(root, wanted, latest)


# (root url, latest finished version, domain or None) -> why the domain has no champion: a version's verdicts are
# final once its manifest is written, so the reasons change only with the latest version
_REASONS: dict[tuple, str] = {}


def _cached_reasons(root: StorageRoot, domains: Collection[str | None], latest: int | None = None) -> dict:
    latest = latest_version(root) if latest is None else latest
    keys = {domain: (root.url, latest, domain) for domain in domains}
    found = {domain: _REASONS.get(key) for domain, key in keys.items()}
    missing = [domain for domain, why in found.items() if why is None]
    if missing:
        if len(_REASONS) > 256:
            _REASONS.clear()
        for domain, why in _no_champion_reasons(root, list_versions(str(synced_checkpoints_dir(root))),
                                                missing).items():
            _REASONS[keys[domain]] = found[domain] = why
    return found


def _scorer(root: StorageRoot, base: Path, version: int, settings: ScoringSettings):
    from orchrm_dagster.rm.score import RewardScorer

    return RewardScorer(model_dir(root, base, version), settings.device, settings.max_length, settings.batch_size)


def latest_version(root: StorageRoot) -> int | None:
    """The latest finished reward-model version, champion or not (None: none trained yet): the newest version
    folder with a manifest (no manifest is read)."""
    base = str(synced_checkpoints_dir(root))
    return next((v for v in range(next_version(base) - 1, -1, -1) if Path(version_dir(base, v), MANIFEST).exists()),
                None)


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


_TRAINED_ON: dict[tuple[str, int], tuple[str, ...]] = {}


def trained_on(root: StorageRoot, version: int) -> tuple[str, ...]:
    """The pair sources reward-model `version` trained on (empty: every source). A manifest never changes once
    written, so each is read once per process."""
    key = (root.url, version)
    if key not in _TRAINED_ON:
        manifest = next((v for v in list_versions(str(synced_checkpoints_dir(root))) if v["version"] == version), {})
        _TRAINED_ON[key] = tuple(manifest.get("config", {}).get("pair_sources") or ())
    return _TRAINED_ON[key]


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


def train_on_current_pairs(root: StorageRoot, config: RMTrainConfig) -> list[TrainingOutcome]:
    """New versions trained on the pairs table (and imported pairs): one shared model, or one per domain, as
    `config.domain_models` says; with `config.retrain_from_version`, that version again (`retrain_version`). The
    `rm_checkpoints` table is rewritten."""
    if config.retrain_from_version is not None:
        outcomes = [retrain_version(root, config.retrain_from_version, config)]
        root.write_table(checkpoint_table(root), root.table_file("rm_checkpoints"))
        return outcomes
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
        problems = pl.concat([train_part["problem_id"], validation_part["problem_id"]]).unique().sort().to_list()
        outcomes.append(train_new_version(
            root, _pair_texts(train_part), _pair_texts(validation_part), config, problems, pairs_available=available,
            available_pair_ids=texts_pair_ids, domains=domains,
            validation_domains=validation_part["domain"].to_list(),
            described=pl.concat([train_part, validation_part]).select("problem_id", "domain")))
    root.write_table(checkpoint_table(root), root.table_file("rm_checkpoints"))
    return outcomes


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
                      retrained_from: int | None = None) -> TrainingOutcome:
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
    with root_lock(root, "reward-model", timeout_s=6 * 3600, lease_s=6 * 3600):
        return _train_new_version(root, train, validation, config, pair_problems, pairs_available, available_pair_ids,
                                  tuple(sorted(domains or all_domains())), validation_domains, described,
                                  retrained_from)


def _train_new_version(root, train, validation, config, pair_problems, pairs_available, available_pair_ids,
                       domains, validation_domains, described, retrained_from) -> TrainingOutcome:
    from orchrm_dagster.rm.train import train_reward_model

    base = synced_checkpoints_dir(root)
    version = _unfinished_version(base) or next_version(str(base))
    folder = version_dir(str(base), version)
    # validated below, once, with the champions on the same pairs
    result = train_reward_model(train, PairTexts.empty(), config, folder, resume=True)
    champions = read_champions(base, all_domains())
    # a champion trained on other pair sources (the other GRPO recipe) is not a rival: the recipe changed on purpose
    rivals = {d: v for d, v in champions.items() if trained_on(root, v) == tuple(config.pair_sources)}
    metrics, judged = _gate(root, base, result.model_dir, validation, validation_domains, domains, rivals, config,
                            version)
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
    _drop_trainer_checkpoints(folder)  # they only serve to resume; the manifest marks the version finished
    Path(folder, PAIR_PROBLEMS_FILE).write_text(json.dumps(sorted(pair_problems or [])))
    save_training_pairs(folder, version, train, validation, described)
    if available_pair_ids is not None:
        available_pair_ids.write_parquet(Path(folder, PAIR_IDS_FILE))
    write_manifest(folder, manifest)
    if becomes_champion:
        write_champions(base, crowned(champions, judged.verdicts, version))
    _upload(root, base, folder)
    saved = root.uri("checkpoints", "rm", Path(folder).name, RM_TRAINING_PAIRS_FILE)
    return TrainingOutcome(len(train), len(validation), version, folder, metrics, judged.champion_accuracy,
                           becomes_champion, champions, result.pairs_per_second, result.seconds, domains,
                           judged.verdicts, saved, fingerprint)


def retrain_version(root: StorageRoot, version: int, run: RMTrainConfig | None = None) -> TrainingOutcome:
    """A new version trained again on exactly the pairs `version` trained and validated on (saved beside it, in the
    order it read them), with its saved settings and seed, standing for the same domains: the same pair-set
    fingerprint and, on the same device, the same model. Where its training logs go comes from `run`. The gate
    judges it like any new version."""
    base = synced_checkpoints_dir(root)
    folder = version_dir(str(base), version)
    if not Path(folder, MANIFEST).exists():
        raise FileNotFoundError(f"no reward-model version {version} in {root.uri('checkpoints', 'rm')}")
    for name in (RM_TRAINING_PAIRS_FILE, PAIR_IDS_FILE):
        _fetch(root, folder, name)
    manifest = read_manifest(folder)
    saved = read_training_pairs(folder)
    ids_file = Path(folder, PAIR_IDS_FILE)
    return train_new_version(
        root, split_pairs(saved, TRAIN), split_pairs(saved, VALIDATION), saved_config(manifest, run),
        pair_problems(root, version), pairs_available=manifest.get("pairs_available"),
        available_pair_ids=pl.read_parquet(ids_file) if ids_file.exists() else None,
        domains=manifest.get("domains"),
        validation_domains=saved.filter(pl.col("split") == VALIDATION)["domain"].to_list(),
        described=saved.select("problem_id", "domain"), retrained_from=version)


def _fetch(root: StorageRoot, folder: str, name: str) -> None:
    """A file of a version's folder, fetched from the object store when the local mirror lacks it."""
    local = Path(folder, name)
    remote = root.path("checkpoints", "rm", Path(folder).name, name)
    if not root.is_local and not local.exists() and root.fs.exists(remote):
        root.fs.get_file(remote, str(local))


def _gate(root, base, new_model: str, validation: PairTexts, validation_domains: list, domains: tuple[str, ...],
          champions: Mapping[str, int], config: RMTrainConfig, version: int) -> tuple[dict, Gate]:
    """The new model's validation metrics, and the per-domain gate with its floor: the new model and the champions
    of its domains, each scored once on the validation pairs."""
    if not len(validation):
        return {}, gate(np.zeros(0, bool), {}, [], domains, champions, config.champion_margin, config.floor(), version)
    metrics, wins = _validation(new_model, validation, config.device)
    judges = {v: _wins(model_dir(root, base, v), validation, config.device)
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


def _drop_trainer_checkpoints(folder: str) -> None:
    for checkpoint in Path(folder).glob("checkpoint-*"):
        shutil.rmtree(checkpoint, ignore_errors=True)


def _upload(root: StorageRoot, base: Path, folder: str) -> None:
    if root.is_local:
        return
    remote = root.path("checkpoints", "rm", Path(folder).name)
    root.fs.put(folder, remote, recursive=True)
    if (base / CHAMPION_FILE).exists():
        root.fs.put_file(str(base / CHAMPION_FILE), root.path("checkpoints", "rm", CHAMPION_FILE))


def checkpoint_table(root: StorageRoot) -> pa.Table:
    """The `rm_checkpoints` table: one row per finished version, with the domains it stood for and those it is
    champion of now."""
    base = synced_checkpoints_dir(root)
    every = all_domains()
    champions = read_champions(base, every)
    rows = []
    for v in list_versions(str(base)):
        metrics = v.get("metrics", {})
        champion_of = sorted(d for d, version in champions.items() if version == v["version"])
        by_domain = metrics.get("accuracy_by_domain")
        rows.append({
            "version": v["version"], "path": root.uri("checkpoints", "rm", Path(v["path"]).name) if not root.is_local
            else v["path"], "backbone": v["backbone"], "n_train_pairs": v["n_train_pairs"],
            "n_validation_pairs": v["n_validation_pairs"], "val_accuracy": metrics.get("val_accuracy"),
            "champion_val_accuracy": metrics.get("champion_val_accuracy"), "ece": metrics.get("ece"),
            "length_spearman": metrics.get("length_spearman"), "pairs_per_second": v["pairs_per_second"],
            "pair_set_fingerprint": v["pair_set_fingerprint"], "is_champion": bool(champion_of),
            "created_at": v["created_at"],
            # a version from before domains were recorded was one model trained on every pair
            "domains": v.get("domains", list(every)), "champion_of": champion_of,
            "val_accuracy_by_domain": json.dumps(by_domain, sort_keys=True) if by_domain is not None else None,
        })
    return pa.Table.from_pylist(rows, schema=RM_CHECKPOINTS)
