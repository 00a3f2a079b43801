"""The champions the service scores with, reloaded when the champion pointer changes.

The pointer (`checkpoints/rm/champion.json`) is replaced atomically by every training that crowns a version, so a
poll reads only its file stamp (a stat; on S3 one HEAD request). On a change the new champions are loaded and warmed
up beside the old ones, then swapped in with one assignment: a batch already scoring keeps the snapshot it started
with, the next batch gets the new one.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from orchrm_dagster.rm import (CHAMPION_FILE, DomainScorer, NoChampion, ScoringSettings, domain_scorer,
                               no_champion_reason)
from orchrm_dagster.storage import StorageRoot

log = logging.getLogger(__name__)
_STAMP_FIELDS = ("ino", "mtime", "size", "ETag", "LastModified")
WARM_UP_TEXT = "warm-up"
__all__ = ["ChampionWatcher", "DomainRequired", "LoadedChampions", "NoChampion", "describe"]


class DomainRequired(ValueError):
    """The request names no domain and the domains' champions differ: the service answers 422."""


@dataclass(frozen=True)
class LoadedChampions:
    champions: dict[str, int]  # domain -> champion version, as the pointer named them when loaded
    scorer: DomainScorer
    stamp: tuple
    loaded_at: float

    def scoring_domain(self, domain: str | None) -> str | None:
        """The domain whose champion scores a request for `domain` (None: any, when one version is champion of every
        domain that has one); None when `domain` has none (`ChampionWatcher.refusal` says why)."""
        if domain is not None:
            return domain if domain in self.champions else None
        if len(set(self.champions.values())) > 1:
            raise DomainRequired(f"the champions differ by domain ({describe(self.champions)}): send `domain` or "
                                 f"`benchmark`")
        return min(self.champions)


def describe(champions: dict[str, int]) -> str:
    return ", ".join(f"{domain}: v{version}" for domain, version in sorted(champions.items())) or "none"


class ChampionWatcher:
    """Holds the current `LoadedChampions` (None before the first champion) and polls the pointer in a thread."""

    def __init__(self, root: StorageRoot, scoring: ScoringSettings, poll_seconds: float):
        self.root = root
        self.scoring = scoring
        self.poll_seconds = poll_seconds
        self.current: LoadedChampions | None = None
        self.reloads = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refusal(self, domain: str | None = None) -> str:
        """Why no champion scores `domain` (None: any domain): what the gate said of the latest version that stood
        for it (`rm.no_champion_reason`, read again once a newer version finished)."""
        return no_champion_reason(self.root, domain)

    @property
    def pointer(self) -> str:
        return self.root.path("checkpoints", "rm", CHAMPION_FILE)

    def pointer_stamp(self) -> tuple | None:
        """What changes when the pointer is replaced (None: no pointer yet)."""
        if not self.root.is_local:
            self.root.fs.invalidate_cache(self.pointer)
        try:
            info = self.root.fs.info(self.pointer)
        except FileNotFoundError:
            return None
        return tuple(str(info.get(name)) for name in _STAMP_FIELDS)

    def check(self) -> bool:
        """Load the champions if the pointer changed since they were loaded; True when a new snapshot was swapped
        in. A failed load leaves the old snapshot serving and is retried at the next check."""
        stamp = self.pointer_stamp()
        current = self.current
        if stamp is None or (current is not None and current.stamp == stamp):
            return False
        scorer = domain_scorer(self.root, self.scoring)
        _warm_up(scorer)
        self.current = LoadedChampions(dict(scorer.champions), scorer, stamp, time.time())
        self.reloads += current is not None
        log.info("scoring with %s", describe(scorer.champions))
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._poll, name="champion-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.check()
                self.last_error = None
            except Exception as error:  # a half-synced checkpoint, a storage hiccup: keep serving the old champions
                self.last_error = f"{type(error).__name__}: {error}"
                log.warning("champion reload failed, still serving the loaded champions: %s", self.last_error)


def _warm_up(scorer: DomainScorer) -> None:
    """Load each champion's weights (a version loaded before comes from the scorer's cache) and run one forward pass
    before the snapshot is swapped in, so that no request waits for a model load."""
    by_version = {version: domain for domain, version in sorted(scorer.champions.items())}
    for domain in by_version.values():
        scorer.score([WARM_UP_TEXT], [WARM_UP_TEXT], [domain])
