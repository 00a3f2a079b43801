"""A reward model trained by several data-parallel processes (`processes: 2`, `accelerate launch`, gloo on the CPU):
the same steps, loss, gate and scores as one process at the same global batch; a process killed mid-training fails
the training with how it died, and the next attempt resumes from the last trainer checkpoint."""

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from orchrm_dagster.processes import TrainingProcessFailed
from orchrm_dagster.rm.config import RMTrainConfig
from orchrm_dagster.rm.train import train_reward_model
from orchrm_dagster.trainer_checkpoints import checkpoint_step, is_whole
from tests.rm.toy import NO_FLOOR, toy_pairs


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory) -> str:
    from tests.tiny_models import make_tiny_policy

    return make_tiny_policy(tmp_path_factory.mktemp("tiny_decoder"), hidden_size=64)


def config(backbone: str, **changes) -> RMTrainConfig:
    return RMTrainConfig(**{"backbone": backbone, "max_length": 48, "epochs": 1, "batch_size": 8,
                            "learning_rate": 1e-3, "device": "cpu", "precision": "fp32", **NO_FLOOR, **changes})


def test_two_processes_train_as_one_at_the_same_global_batch(tmp_path, tiny_decoder):
    from orchrm_dagster.rm import read_manifest, train_new_version
    from orchrm_dagster.rm.score import RewardScorer
    from orchrm_dagster.storage import StorageRoot

    train, validation = toy_pairs(48, seed=1), toy_pairs(24, seed=2)
    outcomes = {n: train_new_version(StorageRoot(str(tmp_path / f"root{n}")), train, validation,
                                     config(tiny_decoder, processes=n), ["p"]) for n in (1, 2)}
    one, two = outcomes[1], outcomes[2]
    manifests = {n: read_manifest(o.path) for n, o in outcomes.items()}
    assert manifests[1]["n_train_pairs"] == manifests[2]["n_train_pairs"] == 48
    assert manifests[2]["config"]["processes"] == 2
    assert not Path(two.path, "data_parallel").exists()  # the job folder goes with the trainer checkpoints
    # each process took 4 pairs of a step of 8: 6 steps, and the loss the two processes logged together
    assert one.metrics["val_accuracy"] == two.metrics["val_accuracy"]
    assert one.is_champion == two.is_champion and one.champion_of == two.champion_of
    questions, plans = validation.question * 2, validation.chosen_plan + validation.rejected_plan
    scores = {n: np.array(RewardScorer(os.path.join(o.path, "model"), "cpu").score(questions, plans))
              for n, o in outcomes.items()}
    np.testing.assert_allclose(scores[2], scores[1], atol=1e-3)


def test_the_loss_after_k_steps_matches_one_process(tmp_path, tiny_decoder):
    train = toy_pairs(64, seed=3)
    results = {n: train_reward_model(train, toy_pairs(0, seed=0), config(tiny_decoder, processes=n),
                                     str(tmp_path / f"out{n}")) for n in (1, 2)}
    assert results[1].steps == results[2].steps == 8
    assert results[2].final_loss == pytest.approx(results[1].final_loss, rel=0.02, abs=1e-3)


def test_processes_must_divide_the_batch():
    with pytest.raises(ValueError, match="batch_size 8 must be a multiple of processes 3"):
        RMTrainConfig(batch_size=8, processes=3)


def _workers(job_marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "orchrm_dagster.rm.fit_process" in " ".join(process.cmdline()) and job_marker in process.cmdline()[-1]:
                found.append(process)
        except psutil.NoSuchProcess:
            pass
    return found


def _whole_checkpoint_steps(output: str) -> list[int]:
    return [checkpoint_step(p) for p in Path(output).glob("checkpoint-*") if is_whole(p)]


@pytest.mark.slow
def test_a_killed_process_fails_the_training_with_its_cause_and_a_rerun_resumes(tmp_path, tiny_decoder):
    train, output = toy_pairs(64, seed=5), str(tmp_path / "out")
    settings = config(tiny_decoder, processes=2, epochs=12, checkpoint_minutes=0)  # 96 steps
    failure: list[BaseException] = []

    def first_attempt():
        try:
            train_reward_model(train, toy_pairs(0, seed=0), settings, output)
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            failure.append(error)

    attempt = threading.Thread(target=first_attempt)
    attempt.start()
    deadline = time.monotonic() + 240
    while not _whole_checkpoint_steps(output) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _whole_checkpoint_steps(output), "no whole trainer checkpoint was written"
    second = next(p for p in _workers(output) if p.environ().get("RANK") == "1")
    second.send_signal(signal.SIGKILL)
    attempt.join(timeout=120)
    assert not attempt.is_alive()
    assert isinstance(failure[0], TrainingProcessFailed)
    assert "process 1 of 2 was killed by signal 9 (SIGKILL)" in str(failure[0])
    assert not _workers(output)  # the other process went with it
    saved = max(_whole_checkpoint_steps(output))  # one the kill cut short mid-write cannot be resumed from

    result = train_reward_model(train, toy_pairs(0, seed=0), settings, output)
    assert result.resumed_from == saved > 0 and result.steps == 96
