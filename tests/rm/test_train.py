import glob
import os

import pytest

from orchrm_dagster.rm.config import RMTrainConfig
from orchrm_dagster.rm.score import RewardScorer
from orchrm_dagster.rm.train import train_reward_model
from tests.rm.toy import toy_pairs


@pytest.mark.slow
def test_minilm_learns_a_systematic_preference(tmp_path):
    train, held_out = toy_pairs(24, seed=1), toy_pairs(8, seed=2)
    config = RMTrainConfig(max_length=64, epochs=2, batch_size=4, learning_rate=1e-4, save_steps=100)
    result = train_reward_model(train, held_out, config, str(tmp_path / "run"))
    assert result.steps == 12 and result.train_pairs == 24
    assert result.final_loss < 0.69  # ln 2 is the loss of an untrained head
    assert result.validation_metrics["val_accuracy"] > 0.5
    assert os.path.exists(os.path.join(result.model_dir, "model.safetensors"))

    scorer = RewardScorer(result.model_dir, device="cpu", max_length=64)
    questions = held_out.question + held_out.question
    plans = held_out.chosen_plan + held_out.rejected_plan
    scores = scorer.score(questions, plans)
    assert scorer.score(questions, plans) == scores
    assert scorer.score(questions[::-1], plans[::-1]) == pytest.approx(scores[::-1], abs=1e-5)
    assert sum(w > l for w, l in zip(scores[:8], scores[8:])) / 8 == result.validation_metrics["val_accuracy"]


@pytest.mark.slow
def test_interrupted_training_resumes_from_its_last_checkpoint(tmp_path, tiny_backbone):
    train = toy_pairs(16, seed=3)
    run = str(tmp_path / "run")
    first = RMTrainConfig(backbone=tiny_backbone, max_length=32, epochs=1, batch_size=4, save_steps=2)
    assert train_reward_model(train, toy_pairs(0, 0), first, run).steps == 4
    assert [os.path.basename(c) for c in sorted(glob.glob(os.path.join(run, "checkpoint-*")))] == \
        ["checkpoint-2", "checkpoint-4"]  # save_total_limit keeps two

    resumed = train_reward_model(train, toy_pairs(0, 0), RMTrainConfig(**{**first.__dict__, "epochs": 2}), run)
    assert resumed.steps == 8
    assert round(resumed.pairs_per_second * resumed.seconds) == 16  # only the second epoch was trained
    assert os.path.exists(os.path.join(run, "checkpoint-8"))

    fresh = train_reward_model(train, toy_pairs(0, 0), RMTrainConfig(**{**first.__dict__, "epochs": 2}), run,
                               resume=False)
    assert fresh.steps == 8 and not os.path.exists(os.path.join(run, "checkpoint-4"))


@pytest.mark.slow
def test_other_pairs_do_not_resume_a_checkpoint(tmp_path, tiny_backbone):
    run = str(tmp_path / "run")
    config = RMTrainConfig(backbone=tiny_backbone, max_length=32, epochs=1, batch_size=4, save_steps=2)
    train_reward_model(toy_pairs(8, seed=4), toy_pairs(0, 0), config, run)
    other = train_reward_model(toy_pairs(12, seed=5), toy_pairs(0, 0), config, run)
    assert other.steps == 3
