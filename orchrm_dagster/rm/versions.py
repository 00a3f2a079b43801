"""Questions about the reward-model versions under a storage root: the latest one, each domain's champion and the
scorers made of them, why a domain has none (`champion_refusals`, cached), what a version trained on, the new pairs
since, and the `rm_checkpoints` table. Nothing here trains (`challenger` does)."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa

from orchrm_dagster.contract import RM_CHECKPOINTS
from orchrm_dagster.pairs import current_pair_ids
from orchrm_dagster.rm.champions import NoChampion, read_champions
from orchrm_dagster.rm.checkpoints import (PAIR_BATCHES_FILE, PAIR_IDS_FILE, PAIR_PROBLEMS_FILE, list_versions,
                                          model_dir, rm_store, saved_config, synced_checkpoints_dir)
from orchrm_dagster.rm.config import RMTrainConfig, ScoringSettings
from orchrm_dagster.rm.domains import DomainScorer, all_domains
from orchrm_dagster.storage import StorageRoot


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
    """(version, scorer: a RewardScorer, or a VLLMPoolingScorer with backend vllm) of `domain`'s champion;
    NoChampion saying why when the domain has none."""
    version = champion_version(root, domain)  # syncs the checkpoints folder
    return version, version_scorer(root, version, settings)


def domain_scorer(root: StorageRoot, settings: ScoringSettings = ScoringSettings()) -> DomainScorer:
    """A scorer that reads each plan with its domain's champion; NoChampion saying why when no domain has one."""
    base = synced_checkpoints_dir(root)
    champions = read_champions(base, all_domains())
    if not champions:
        raise NoChampion(no_champion_reason(root))
    return DomainScorer(champions, lambda version: version_scorer(root, version, settings))


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
            reasons[domain] = (f"no champion reward model {where} in {rm_store(root).uri()}: none trained "
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
    own_pairs: bool = True  # False: the domain had no validation pairs of its own, `pairs` are other domains'

    @property
    def beats_chance(self) -> bool:
        return self.champion is not None and self.falls_short is None

    @property
    def pairs_shown(self) -> str | None:
        """Its validation pairs as shown, saying when they were other domains' (its own had none)."""
        if not self.pairs:
            return None
        return str(self.pairs) if self.own_pairs else f"{self.pairs} (other domains')"

    @property
    def problem(self) -> str | None:
        """Why the domain has no champion that beats chance (None: it has one)."""
        return self.falls_short or self.no_champion


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
        own = verdict.get("own_pairs", True)
        standings.append(Standing(domain, version, accuracy, pairs, p_value,
                                  floor.refusal(version, accuracy, pairs, p_value, own=own), own_pairs=own))
    return standings


_TRAINED_AT: dict[tuple[str, int], float] = {}


def trained_at(root: StorageRoot, version: int) -> float | None:
    """When reward-model `version` finished training (seconds since the epoch; None: not a finished version). A
    manifest never changes once written, so each is read once per process: the loop asks every tick."""
    from datetime import datetime

    key = (root.url, version)
    if key not in _TRAINED_AT:
        manifest = next((v for v in list_versions(str(synced_checkpoints_dir(root))) if v["version"] == version),
                        None)
        created = (manifest or {}).get("created_at")
        if not created:
            return None
        _TRAINED_AT[key] = datetime.fromisoformat(created).timestamp()
    return _TRAINED_AT[key]


def champion_refusals(root: StorageRoot, domains: Collection[str] | None = None,
                      champions: Mapping[str, int] | None = None, latest: int | None | object = ...) -> dict[str, str]:
    """Domain -> why it has no champion, for each of `domains` (None: every domain) without one. `champions` and
    `latest` (`latest_version`): the current ones, if read already (the loop's read does; it asks every few
    seconds)."""
    champions = current_champions(root) if champions is None else champions
    wanted = sorted(d for d in (domains if domains is not None else all_domains()) if d not in champions)
    return _cached_reasons(root, wanted, latest)


# (root url, latest finished version, domain or None) -> why the domain has no champion: a version's verdicts are
# final once its manifest is written, so the reasons change only with the latest version
_REASONS: dict[tuple, str] = {}


def _cached_reasons(root: StorageRoot, domains: Collection[str | None], latest: int | None | object = ...) -> dict:
    latest = latest_version(root) if latest is ... else latest  # None: no version yet, as read by the caller
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


def version_scorer(root: StorageRoot, version: int, settings: ScoringSettings):
    """`version`'s scorer as `settings.backend` says: in this process (transformers) or on a vLLM server (vllm), the
    checkpoint folder giving the tokenizer and input spec either way."""
    folder = model_dir(root, version)
    if settings.backend == "vllm":
        from orchrm_dagster.rm.vllm_scorer import VLLMPoolingScorer

        served = settings.vllm_model.replace("{version}", str(version)) if settings.vllm_model else folder
        return VLLMPoolingScorer(settings.vllm_url, served, folder, settings.max_length, settings.batch_size,
                                 max_batch_tokens=settings.batch_tokens)
    from orchrm_dagster.rm.score import scorer_for

    return scorer_for(folder, settings)


def finished_versions(root: StorageRoot) -> list[int]:
    """Every finished reward-model version, oldest first (no manifest is read)."""
    synced_checkpoints_dir(root)
    store = rm_store(root)
    return [v for v in store.numbers() if store.is_finished(v)]


def latest_version(root: StorageRoot) -> int | None:
    """The latest finished reward-model version, champion or not (None: none trained yet): the newest version
    folder with a manifest (no manifest is read)."""
    synced_checkpoints_dir(root)
    store = rm_store(root)
    return next((v for v in reversed(store.numbers()) if store.is_finished(v)), None)


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
    seen = seen_pair_ids(root, latest["version"])
    if seen is None:  # a version trained before pair ids were recorded: compare counts
        return current.height - (latest.get("pairs_available") or 0)
    return current.join(seen, on="pair_id", how="anti").height


def trained_on(root: StorageRoot, version: int) -> tuple[str, ...]:
    """The pair sources reward-model `version` trained on (empty: every source). A manifest never changes once
    written, so each is read once per process."""
    return tuple(version_manifest(root, version).get("config", {}).get("pair_sources") or ())


_TRAINED_BATCHES: dict[tuple[str, int], dict[str, str]] = {}


def trained_batches(root: StorageRoot, version: int) -> dict[str, str] | None:
    """batch id -> runs generation of the batches the pairs reward-model `version` trained on were built from (None:
    a version trained before this was recorded, or on pairs that did not record it). Read once per process."""
    key = (root.url, version)
    if key not in _TRAINED_BATCHES:
        synced_checkpoints_dir(root)  # on an object store, each version's small files (this one too) fetched
        path = rm_store(root).folder(version) / PAIR_BATCHES_FILE
        if not path.exists():
            return None  # not kept: a sync may bring it later
        _TRAINED_BATCHES[key] = json.loads(path.read_text())
    return _TRAINED_BATCHES[key]


def pair_problems(root: StorageRoot, version: int) -> frozenset[str] | None:
    """The problems of every pair (train and validation) reward-model `version` saw; None for a version trained
    before this was recorded."""
    synced_checkpoints_dir(root)
    path = rm_store(root).folder(version) / PAIR_PROBLEMS_FILE
    return frozenset(json.loads(path.read_text())) if path.exists() else None


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
            "version": v["version"], "path": rm_store(root).uri(Path(v["path"]).name) if not root.is_local
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


_MANIFESTS: dict[tuple[str, int], dict] = {}


def version_manifest(root: StorageRoot, version: int) -> dict:
    """A finished version's manifest ({} for none), read once per process: a manifest never changes once written."""
    key = (root.url, version)
    if key not in _MANIFESTS:
        found = next((v for v in list_versions(str(synced_checkpoints_dir(root))) if v["version"] == version), None)
        if found is None:
            return {}
        _MANIFESTS[key] = found
    return _MANIFESTS[key]


def validation_accuracy(root: StorageRoot, version: int, domain: str) -> float | None:
    """Reward-model `version`'s accuracy on its validation pairs of `domain` (its overall one where it recorded none
    by domain)."""
    metrics = version_manifest(root, version).get("metrics", {})
    by_domain = metrics.get("accuracy_by_domain") or {}
    return by_domain.get(domain, metrics.get("val_accuracy"))


_SEEN: dict[tuple[str, int], pl.DataFrame] = {}


def seen_pair_ids(root: StorageRoot, version: int) -> pl.DataFrame | None:
    """The pair ids in the tables when reward-model `version` trained (None: not recorded)."""
    key = (root.url, version)
    if key not in _SEEN:
        synced_checkpoints_dir(root)
        path = rm_store(root).folder(version) / PAIR_IDS_FILE
        if not path.exists():
            return None
        if len(_SEEN) > 16:
            _SEEN.clear()
        _SEEN[key] = pl.read_parquet(path)
    return _SEEN[key]
