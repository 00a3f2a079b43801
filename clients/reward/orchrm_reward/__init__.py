"""orchrm's champion reward model as a reward for other trainers, over HTTP: TRL reward functions
(`ChampionReward`, `AsyncChampionReward`), OpenRLHF's reward-function file (`orchrm_reward.openrlhf.reward_func`) and
verl's custom reward (`orchrm_reward.verl.compute_score`). Its one dependency is httpx: it installs beside a
trainer's own torch, transformers and TRL without changing them. The champion answers from a running `orchrm serve`
(docs/guide/reward-for-trainers.md)."""

from orchrm_reward.trl import (AsyncChampionReward, ChampionReward, ChampionRewardError, NoChampionError,
                               completion_text, prompt_question)

__all__ = ["AsyncChampionReward", "ChampionReward", "ChampionRewardError", "NoChampionError", "completion_text",
           "prompt_question"]
__version__ = "0.1.0"
