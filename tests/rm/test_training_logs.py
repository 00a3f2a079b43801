"""Training you can watch: `report_to` as TRL takes it, refused with the extra to install when its package is
missing, and a reward-model training that writes its loss curve as TensorBoard event files beside its checkpoint."""

import glob
import importlib.util
import os

import pydantic
import pytest

from orchrm_dagster.rm.config import RMTrainConfig
from orchrm_dagster.rm.train import train_reward_model
from orchrm_dagster.training_logs import training_logs
from tests.rm.toy import toy_pairs


def scalars(folder: str) -> dict[str, list[float]]:
    """Every scalar of the TensorBoard event files in `folder`, by tag, in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(folder)
    events.Reload()
    return {tag: [event.value for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def event_files(folder) -> list[str]:
    return sorted(glob.glob(os.path.join(str(folder), "**", "events.out.tfevents.*"), recursive=True))


@pytest.mark.parametrize("given, expected", [
    (None, ()), ("none", ()), ("tensorboard", ("tensorboard",)), (["tensorboard"], ("tensorboard",)),
    (["none", "tensorboard"], ("tensorboard",)), ("tensorboard,none", ("tensorboard",)), ([], ()),
])
def test_report_to_takes_what_trls_report_to_takes(given, expected):
    assert RMTrainConfig(report_to=given).report_to == expected
    assert RMTrainConfig().report_to == ()  # by default a training reports nowhere


@pytest.mark.parametrize("given, message", [
    ("wandb", "'tensorboard' or 'mlflow'"),
    (["tensorboard", "tensorboard"], "at most once"),
])
def test_unknown_or_repeated_integrations_are_refused(given, message):
    with pytest.raises(pydantic.ValidationError, match=message):
        RMTrainConfig(report_to=given)


def test_an_integration_whose_package_is_missing_is_refused_naming_the_extra_to_install(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "tensorboard" else real_find_spec(name, *args))
    with pytest.raises(pydantic.ValidationError, match=r"needs the tensorboard package.*pip install -e '\.\[tensorboard\]'"):
        RMTrainConfig(report_to="tensorboard")


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is not None, reason="mlflow is installed")
def test_mlflow_without_mlflow_installed_names_its_extra():
    from orchrm_dagster.grpo import GRPOSettings

    for settings in (RMTrainConfig, GRPOSettings):
        with pytest.raises(pydantic.ValidationError, match=r"needs the mlflow package.*'\.\[mlflow\]'"):
            settings(report_to=["tensorboard", "mlflow"])


def test_logs_go_beside_the_checkpoint_or_in_a_folder_of_their_own_under_logging_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    version = str(tmp_path / "checkpoints" / "rm" / "v0003")
    beside = RMTrainConfig(report_to="tensorboard").training_logs(version)
    assert (beside.folder, beside.run_name) == (os.path.join(version, "logs"), "reward-model-v0003")
    assert beside.location == beside.folder
    assert beside.trainer_args() == {"report_to": ["tensorboard"], "run_name": "reward-model-v0003"}
    shared = RMTrainConfig(report_to="tensorboard", logging_dir=str(tmp_path / "tb")).training_logs(version)
    assert shared.folder == str(tmp_path / "tb" / "reward-model-v0003")
    unwatched = RMTrainConfig().training_logs(version)
    assert unwatched.location is None and unwatched.trainer_args()["report_to"] == "none"


def test_mlflow_logs_to_a_local_store_in_the_logs_folder_unless_a_tracking_server_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    logs = training_logs(("mlflow",), None, "grpo", str(tmp_path / "r0002"), "model")
    assert logs.folder == str(tmp_path / "r0002" / "model" / "logs") and logs.location == logs.folder
    assert logs.mlflow_uri == (tmp_path / "r0002" / "model" / "logs" / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert logs.mlflow_uri == logs.location == "http://mlflow.example:5000"
    both = training_logs(("tensorboard", "mlflow"), None, "grpo", str(tmp_path / "r0002"), "model")
    assert both.location == both.folder  # TensorBoard's folder; the runs themselves are on the server


def tiny_config(backbone: str, **changes) -> RMTrainConfig:
    return RMTrainConfig(**{"backbone": backbone, "max_length": 32, "epochs": 1, "batch_size": 4,
                            **changes})


def test_a_watched_version_writes_its_loss_curve_where_the_asset_says_beside_its_checkpoint(storage_root,
                                                                                          tiny_backbone):
    from orchrm_dagster.rm import train_new_version

    config = tiny_config(tiny_backbone, report_to="tensorboard")
    outcome = train_new_version(storage_root, toy_pairs(16, seed=3), toy_pairs(4, seed=4), config, ["x"])
    logs = config.training_logs(outcome.path)  # what the reward_model asset's `training_logs` metadata shows
    assert logs.location == os.path.join(outcome.path, "logs")
    [event_file] = event_files(outcome.path)
    assert os.path.dirname(event_file) == logs.folder
    logged = scalars(logs.folder)
    print(f"\n{event_file}\n" + "\n".join(f"  {tag}: {values}" for tag, values in sorted(logged.items())))
    assert len(logged["train/loss"]) == 4  # logging_steps=0.1 of 4 steps: every step
    assert all(0 < loss < 1 for loss in logged["train/loss"])  # Bradley-Terry: ln 2 for an untrained head


def test_a_training_started_over_replaces_the_logs_of_the_one_before(tmp_path, tiny_backbone):
    pairs = toy_pairs(16, seed=3)
    config = tiny_config(tiny_backbone, report_to="tensorboard")
    run = tmp_path / "v0001"
    train_reward_model(pairs, toy_pairs(0, 0), config, str(run))
    again = train_reward_model(pairs, toy_pairs(0, 0), config, str(run), resume=False)
    assert len(event_files(run)) == 1  # a training started over drops the logs of the one it replaced
    assert scalars(str(run / "logs"))["train/loss"][-1] == pytest.approx(again.final_loss, rel=1e-5)


def test_by_default_a_training_writes_no_logs(tmp_path, tiny_backbone):
    quiet = tmp_path / "v0002"
    train_reward_model(toy_pairs(8, seed=3), toy_pairs(0, 0), tiny_config(tiny_backbone), str(quiet))
    assert event_files(quiet) == [] and not (quiet / "logs").exists() and not (quiet / "runs").exists()
    assert os.path.exists(quiet / "model" / "model.safetensors")  # it trained


@pytest.mark.parametrize("verbosity, printed", [("warning", True), ("error", False)])
def test_the_metrics_printed_each_step_follow_transformers_verbosity(tmp_path, tiny_backbone, capsys, verbosity,
                                                                     printed):
    from transformers.utils import logging as transformers_logging

    before = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity(getattr(transformers_logging, verbosity.upper()))
    try:
        result = train_reward_model(toy_pairs(16, seed=3), toy_pairs(0, 0), tiny_config(tiny_backbone),
                                    str(tmp_path / "v0001"))
    finally:
        transformers_logging.set_verbosity(before)
    out = capsys.readouterr()
    assert ("'loss'" in out.out + out.err) is printed
    assert result.final_loss > 0  # logged all the same: the history keeps what the console no longer shows
