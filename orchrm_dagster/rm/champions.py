"""One reward-model champion per domain: the pointer file that names them, and the per-domain champion/challenger
rule with its floor (no torch).

`champion.json` is {"champions": {"math": 3, "qa": 5}}: the version that scores each domain's plans. A pointer
written before champions were per domain, {"version": v}, names v champion of every domain.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from orchrm_dagster.rm.floor import Floor

CHAMPION_FILE = "champion.json"
# Accuracies are ratios of counts; without a tolerance 0.9 - 0.01 > 0.89 in floating point.
_TOLERANCE = 1e-9


class NoChampion(LookupError):
    """A domain has no champion reward model: what would score, pick or reward with one refuses, saying why."""


def read_champions(base: Path, domains: Collection[str]) -> dict[str, int]:
    """Domain -> champion version in a checkpoints folder ({} before the first champion); `domains` are every
    domain, which an old single-champion pointer names its version champion of."""
    path = Path(base, CHAMPION_FILE)
    if not path.exists():
        return {}
    pointer = json.loads(path.read_text())
    if "champions" in pointer:
        return {domain: int(version) for domain, version in pointer["champions"].items()}
    return dict.fromkeys(domains, int(pointer["version"]))


def write_champions(base: Path, champions: Mapping[str, int]) -> None:
    """Replace the pointer atomically: a reader sees the old champions or the new ones."""
    path = Path(base, CHAMPION_FILE)
    partial = path.with_name(CHAMPION_FILE + ".partial")
    partial.write_text(json.dumps({"champions": dict(sorted(champions.items()))}))
    os.replace(partial, path)


def newest_champion(champions: Mapping[str, int]) -> int | None:
    """The newest version that is champion of some domain. It changes whenever any domain's champion does (a new
    champion is always the version just trained, newer than every version before it), so it names the set."""
    return max(champions.values(), default=None)


def is_new_champion(challenger_accuracy: float, champion_accuracy: float | None, margin: float) -> bool:
    """A challenger replaces the champion unless it is worse by more than `margin` (or there is no champion)."""
    if champion_accuracy is None:
        return True
    return challenger_accuracy >= champion_accuracy - margin - _TOLERANCE


@dataclass(frozen=True)
class DomainVerdict:
    """How a new version fared against one domain's champion."""

    domain: str
    pairs: int  # validation pairs both were judged on: the domain's own, else every validation pair; 0: none
    accuracy: float | None  # the new version's on those pairs
    champion: int | None  # the domain's champion before
    champion_accuracy: float | None  # the champion's on the same pairs
    becomes_champion: bool
    p_value: float | None = None  # of its accuracy against chance (one-sided binomial test); None: no pairs
    refusal: str | None = None  # why it did not become champion (the floor, or the champion did better)
    own_pairs: bool = True  # False: the domain had no validation pairs of its own, `pairs` are other domains'


@dataclass(frozen=True)
class Gate:
    verdicts: dict[str, DomainVerdict]  # domain -> the verdict, for each domain the new version stands for
    accuracy_by_domain: dict[str, float]  # the new version's on each domain's own validation pairs
    # the previous champion's accuracy on every validation pair, when the domains the version stands for had one
    # and the same champion (else None: see the verdicts)
    champion_accuracy: float | None


def gate(wins: np.ndarray, champion_wins: Mapping[int, np.ndarray], pair_domains: Sequence[str | None],
         stands_for: Collection[str], champions: Mapping[str, int], margin: float, floor: Floor,
         version: int) -> Gate:
    """The per-domain champion/challenger rule. `wins[i]`: the new `version` ranks validation pair i right;
    `champion_wins[v]`: the same for champion version v; `pair_domains[i]`: pair i's domain (None: not known).

    For each domain the new version stands for, it is judged on the domain's validation pairs (a domain without
    validation pairs of its own: on every validation pair). It must first clear the `floor` there (enough pairs,
    accuracy above chance by a one-sided binomial test), the first version of a domain included: a version without
    validation pairs is crowned nowhere. It then becomes champion when the domain has none yet, or when it is not
    worse than the domain's champion by more than `margin` on the same pairs."""
    labels = np.asarray(pair_domains, dtype=object)
    own = {d: labels == d for d in sorted(set(labels) - {None})}
    verdicts = {}
    for domain in sorted(stands_for):
        champion = champions.get(domain)
        pairs = own[domain] if domain in own else np.ones(len(labels), bool)
        borrowed = domain not in own and bool(own)  # other domains' pairs (with none known, every pair is all)
        count = int(pairs.sum())
        accuracy = float(wins[pairs].mean()) if count else None
        p_value = floor.p_value(int(wins[pairs].sum()), count)
        champion_accuracy = (float(champion_wins[champion][pairs].mean())
                             if champion is not None and accuracy is not None else None)
        refusal = floor.refusal(version, accuracy, count, p_value, own=not borrowed)
        if refusal is None and champion is not None and not is_new_champion(accuracy, champion_accuracy, margin):
            refusal = (f"v{version}'s validation accuracy {accuracy:.3f} trails champion v{champion}'s "
                       f"{champion_accuracy:.3f} on the same {count} pairs by more than the margin ({margin})")
        verdicts[domain] = DomainVerdict(domain, count, accuracy, champion, champion_accuracy, refusal is None,
                                         p_value, refusal, own_pairs=not borrowed)
    sole = {champions.get(d) for d in stands_for}
    sole_champion = sole.pop() if len(sole) == 1 else None
    return Gate(verdicts, {d: float(wins[mask].mean()) for d, mask in own.items()},
                float(champion_wins[sole_champion].mean()) if sole_champion is not None and len(labels) else None)


def crowned(champions: Mapping[str, int], verdicts: Mapping[str, DomainVerdict], version: int) -> dict[str, int]:
    """The champions after `version`'s verdicts."""
    return {**champions, **{domain: version for domain, verdict in verdicts.items() if verdict.becomes_champion}}
