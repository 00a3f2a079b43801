"""verl's custom reward function: `custom_reward_function.path=orchrm_verl.py
custom_reward_function.name=compute_score`, where orchrm_verl.py makes one with
`compute_score = verl_compute_score("http://rm-host:8000", domain="math")`.

verl calls it once per sample with `data_source`, `solution_str`, `ground_truth` and `extra_info` (its reward loop
awaits a coroutine function); the question is `extra_info[question_key]` ("question", where verl's example datasets
keep it), else the ground truth. Each sample is one request to `orchrm serve`, whose batcher scores the concurrent
ones together."""

from __future__ import annotations

from typing import Any

from orchrm_reward.trl import AsyncChampionReward, ChampionRewardError


def verl_compute_score(url: str, *, question_key: str = "question", empty_reward: float = 0.0, **options: Any):
    """An async `compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)` scoring through
    `orchrm serve` at `url`; `options` are `AsyncChampionReward`'s (domain, benchmark, token, timeout...)."""
    reward = AsyncChampionReward(url, empty_reward=empty_reward, **options)

    async def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
        extra = extra_info or {}
        question = extra.get(question_key, ground_truth)
        if question is None:
            raise ChampionRewardError(f"the sample has no extra_info[{question_key!r}] nor ground truth to read "
                                      f"the question from (data_source {data_source!r})")
        [score] = await reward(prompts=[str(question)], completions=[solution_str])
        return score

    return compute_score
