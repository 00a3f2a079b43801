"""TRL's real GRPOTrainer trains a tiny random policy for two steps on rewards from a live `orchrm serve` process
(a subprocess, behind its token), whose storage root has a math champion and no qa champion: math rewards train;
the qa reward stops training with the service's reason."""

from pathlib import Path

import httpx
import pytest

from orchrm_dagster.integrations.trl import AsyncChampionReward, ChampionReward, NoChampionError
from tests.integrations.conftest import TOKEN

QUESTIONS = ["How many apples are left if 12 of 40 are eaten?", "What is 12 * 7?"]


def grpo_trainer(policy: str, reward, output_dir: Path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": q}] for q in QUESTIONS] * 2})
    config = GRPOConfig(output_dir=str(output_dir), per_device_train_batch_size=4, num_generations=4,
                        max_completion_length=8, max_steps=2, learning_rate=1e-3, use_cpu=True, bf16=False,
                        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True, seed=0)
    return GRPOTrainer(model=policy, reward_funcs=reward, args=config, train_dataset=dataset)


@pytest.mark.slow  # 31-47 s on the loaded 2-core machine, 15-35 s of it `orchrm serve` starting (Dagster, torch, TRL)
def test_grpo_trains_on_the_champions_rewards_and_stops_where_there_is_none(orchrm_serve, tiny_policy, tmp_path):
    before = httpx.get(f"{orchrm_serve}/v1/stats", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    reward = AsyncChampionReward(orchrm_serve, token=TOKEN, domain="math", name="orchrm_math")
    trainer = grpo_trainer(tiny_policy, reward, tmp_path / "math")
    trainer.train()
    assert trainer.state.global_step == 2
    logged = [entry for entry in trainer.state.log_history if "rewards/orchrm_math/mean" in entry]
    assert len(logged) == 2 and all(entry["rewards/orchrm_math/mean"] == entry["rewards/orchrm_math/mean"]
                                    for entry in logged)  # a number, not NaN
    assert [entry["orchrm_math/rm_version"] for entry in logged] == [1.0, 1.0]
    after = httpx.get(f"{orchrm_serve}/v1/stats", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert after["items"] - before["items"] == 8  # 2 steps x 4 completions, each scored by the service

    refused = grpo_trainer(tiny_policy, ChampionReward(orchrm_serve, token=TOKEN, domain="qa"), tmp_path / "qa")
    with pytest.raises(NoChampionError, match=r"refused to score \(503\): no champion reward model for the qa "
                                              r"domain in .*: none trained yet"):
        refused.train()
