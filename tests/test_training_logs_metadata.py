"""The `training_logs` entry of the reward_model and grpo_round assets' metadata, and the CLI's reading of it."""

import dagster as dg

from assets.training_logs import training_logs_metadata
from orchrm_dagster.training_logs import TrainingLogs


def test_a_trainings_logs_are_a_path_a_tracking_server_a_url_and_nothing_when_it_reports_nowhere(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    folder = TrainingLogs(("tensorboard",), "reward-model-v0001", "/s/checkpoints/rm/v0001/logs")
    assert training_logs_metadata([folder]) == {"training_logs": dg.MetadataValue.path(folder.folder)}
    assert training_logs_metadata([TrainingLogs((), "grpo-r0001", "/s/logs")]) == {}
    assert training_logs_metadata([]) == {}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    server = TrainingLogs(("mlflow",), "grpo-r0001", "/s/logs")
    assert training_logs_metadata([server]) == {"training_logs": dg.MetadataValue.url("http://mlflow.example:5000")}


def test_several_trainings_in_one_materialization_are_listed_by_run_name():
    logs = [TrainingLogs(("tensorboard",), f"reward-model-v000{v}", f"/s/v000{v}/logs") for v in (2, 3)]
    assert training_logs_metadata(logs) == {"training_logs": dg.MetadataValue.json(
        {"reward-model-v0002": "/s/v0002/logs", "reward-model-v0003": "/s/v0003/logs"})}
