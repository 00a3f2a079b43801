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
    config = RMTrainConfig(max_length=64, epochs=2, batch_size=4, learning_rate=1e-4)
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
    first = RMTrainConfig(backbone=tiny_backbone, max_length=32, epochs=1, batch_size=4, checkpoint_minutes=0)
    trained = train_reward_model(train, toy_pairs(0, 0), first, run)
    assert trained.steps == 4 and trained.checkpoints == 3 and 0 < trained.checkpoint_seconds < trained.seconds
    assert checkpoints(run) == ["checkpoint-2", "checkpoint-3"]  # two kept; none at the end: the model is saved

    resumed = train_reward_model(train, toy_pairs(0, 0), RMTrainConfig(**{**first.__dict__, "epochs": 2}), run)
    assert resumed.steps == 8 and resumed.resumed_from == 3
    assert round(resumed.pairs_per_second * resumed.seconds) == 20  # steps 4 to 8 were trained
    assert checkpoints(run) == ["checkpoint-6", "checkpoint-7"]

    fresh = train_reward_model(train, toy_pairs(0, 0), RMTrainConfig(**{**first.__dict__, "epochs": 2}), run,
                               resume=False)
    assert fresh.steps == 8 and fresh.resumed_from == 0


def test_a_training_within_its_checkpoint_minutes_writes_no_checkpoint(tmp_path, tiny_backbone):
    run = str(tmp_path / "run")
    config = RMTrainConfig(backbone=tiny_backbone, max_length=32, epochs=1, batch_size=4)  # every 10 minutes
    trained = train_reward_model(toy_pairs(16, seed=3), toy_pairs(0, 0), config, run)
    assert trained.steps == 4 and trained.checkpoints == 0 and checkpoints(run) == []
    assert os.path.exists(os.path.join(trained.model_dir, "model.safetensors"))


def checkpoints(run: str) -> list[str]:
    return sorted((os.path.basename(c) for c in glob.glob(os.path.join(run, "checkpoint-*"))),
                  key=lambda name: int(name.split("-")[1]))


@pytest.mark.slow
def test_other_pairs_do_not_resume_a_checkpoint(tmp_path, tiny_backbone):
    run = str(tmp_path / "run")
    config = RMTrainConfig(backbone=tiny_backbone, max_length=32, epochs=1, batch_size=4, checkpoint_minutes=0)
    train_reward_model(toy_pairs(8, seed=4), toy_pairs(0, 0), config, run)
    other = train_reward_model(toy_pairs(12, seed=5), toy_pairs(0, 0), config, run)
    assert other.steps == 3
