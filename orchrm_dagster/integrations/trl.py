"""The champion reward model as a TRL reward function, with the champion loaded in the trainer's process as well.

The reward functions themselves live in the `orchrm-reward` distribution (`clients/reward`, module `orchrm_reward`),
which needs only httpx and so installs beside any trainer's stack: `ChampionReward("http://rm-host:8000")` scores
through a running `orchrm serve`. This module adds what needs orchrm itself:
`ChampionReward(root="s3://bucket/orchrm")` (or a local folder) loads each domain's champion from the storage root as
`orchrm serve` does (`rm.domain_scorer`), once, at the first call; `scoring` sets its device and dtype. A domain
without a champion raises `NoChampionError` with `rm.no_champion_reason`. Everything else (what is scored, the
errors, pickling for `AsyncGRPOTrainer`) is the client's: see `orchrm_reward.trl`.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchrm_reward.trl import (DEFAULT_NAME, TOKEN_ENV, ChampionRewardError, Item, NoChampionError,
                               completion_text, message_text, prompt_question)
from orchrm_reward.trl import AsyncChampionReward as _HttpAsyncChampionReward
from orchrm_reward.trl import ChampionReward as _HttpChampionReward

__all__ = ["AsyncChampionReward", "ChampionReward", "ChampionRewardError", "NoChampionError", "completion_text",
           "prompt_question", "message_text", "DEFAULT_NAME", "TOKEN_ENV"]


class _InProcess:
    """`root=`: the champions loaded from the storage root in this process."""
    loads_in_process = True

    def _load(self):
        with self._lock:
            if self._scorer is None:
                from orchrm_dagster.rm import NoChampion, ScoringSettings, domain_scorer
                from orchrm_dagster.storage import StorageRoot

                if not isinstance(self.root, StorageRoot):
                    self.root = StorageRoot(str(self.root))
                try:
                    self._scorer = domain_scorer(self.root, self.scoring or ScoringSettings())
                except NoChampion as error:
                    raise NoChampionError(str(error)) from None
            return self._scorer

    def _score_in_process(self, items: Sequence[Item]) -> tuple[list[float | None], list[int]]:
        from orchrm_dagster.rm import all_domains, domain_of, no_champion_reason

        scorer = self._load()
        champions = scorer.champions
        domains: list[str] = []
        for item in items:
            domain = item.domain or (domain_of(item.benchmark) if item.benchmark else None)
            if domain is not None and domain not in all_domains():
                raise ChampionRewardError(f"unknown domain {domain!r}; known domains: {', '.join(all_domains())}")
            if domain is None:
                if len(set(champions.values())) > 1:
                    raise ChampionRewardError(
                        "the champions differ by domain (" + ", ".join(f"{d}: v{v}" for d, v in
                                                                      sorted(champions.items()))
                        + "): set `domain` or `benchmark`, or give the dataset a domain or benchmark column")
                domain = min(champions)
            if domain not in champions:
                raise NoChampionError(no_champion_reason(self.root, domain))
            domains.append(domain)
        scored = [i for i, item in enumerate(items) if item.plan]
        rewards: list[float | None] = [self.empty_reward] * len(items)
        if scored:
            scores, _, versions = scorer.score_with_lengths([items[i].question for i in scored],
                                                            [items[i].plan for i in scored],
                                                            [domains[i] for i in scored])
            for i, score in zip(scored, scores):
                rewards[i] = float(score)
            return rewards, sorted(set(versions))
        return rewards, []


class ChampionReward(_InProcess, _HttpChampionReward):
    """A synchronous TRL reward function: the champion's score of each completion, through `orchrm serve` (`url`)
    or in this process (`root`)."""


class AsyncChampionReward(_InProcess, _HttpAsyncChampionReward):
    """An asynchronous TRL reward function (`async __call__`), otherwise `ChampionReward`."""
