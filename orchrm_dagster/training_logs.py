"""Training a person can watch: where a training reports its metrics as it runs (TRL's `report_to`: TensorBoard
event files, an MLflow run) and the folder or tracking URI they go to. Written once for every trainer: the reward
model's, and the policy round's (GRPO, DPO, RFT). Off by default; each integration is an optional extra."""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator

from orchrm_dagster.engine_config import Field

# integration (a TRL `report_to` name) -> (the module it needs, the orchrm extra that installs it)
INTEGRATIONS = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow")}
LOGS_SUBDIR = "logs"


def _as_targets(value):
    """What TRL's `report_to` takes ("none", one name, "a,b", or a list) as a tuple of integration names."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.split(",")
    return tuple(name.strip() for name in value if name.strip() not in ("", "none"))


def _installed(targets: tuple[str, ...]) -> tuple[str, ...]:
    if len(set(targets)) < len(targets):
        raise ValueError("report_to names each integration at most once")
    for target in targets:
        module, extra = INTEGRATIONS[target]
        if importlib.util.find_spec(module) is None:
            raise ValueError(f"report_to {target!r} needs the {module} package, which is not installed: install "
                             f"orchrm's `{extra}` extra (pip install -e '.[{extra}]')")
    return targets


ReportTo = Annotated[tuple[Literal[tuple(INTEGRATIONS)], ...], BeforeValidator(_as_targets),
                     AfterValidator(_installed)]


def report_to_field():
    return Field(default=(), description="Where training reports its loss and metrics as it runs (TRL's report_to): "
                                         "empty (none), tensorboard, mlflow or both; each needs its orchrm extra "
                                         "installed (pip install -e '.[tensorboard]')")


def logging_dir_field():
    return Field(default=None, description="Where the training logs go: TensorBoard's event files, and MLflow's "
                                           "local store (mlruns/) unless MLFLOW_TRACKING_URI names a tracking "
                                           "server; each training in a folder of its own under it. Unset: logs/ in "
                                           "the checkpoint's folder, so the logs travel with the checkpoint")


@dataclass(frozen=True)
class TrainingLogs:
    """One training's logs: the integrations it reports to, its run name, and the folder its logs are written in."""

    targets: tuple[str, ...]
    run_name: str
    folder: str

    @property
    def mlflow_uri(self) -> str:
        return os.environ.get("MLFLOW_TRACKING_URI") or Path(self.folder, "mlruns").resolve().as_uri()

    @property
    def location(self) -> str | None:
        """Where a person looks (None: the training reports nowhere): the folder (`tensorboard --logdir`; MLflow's
        local store is inside it), or the MLflow tracking server when only MLflow reports to one."""
        if not self.targets:
            return None
        if "tensorboard" not in self.targets and os.environ.get("MLFLOW_TRACKING_URI"):
            return self.mlflow_uri
        return self.folder

    def trainer_args(self) -> dict:
        """The TrainingArguments fields that say what the trainer reports to."""
        return {"report_to": list(self.targets) or "none", "run_name": self.run_name}

    def attach(self, trainer, resumed: bool) -> None:
        """Points the trainer's reporting at this run's logs: TensorBoard writes to `folder` (transformers' own
        callback would pick output_dir/runs/<date>), MLflow to `mlflow_uri`. A training that starts over first
        drops the logs of the attempt it replaces; a resumed one appends to them. With transformers' verbosity at
        error or quieter (`orchrm` without --verbose), the trainer prints no metrics to the console."""
        quiet_console(trainer)
        if not self.targets:
            return
        if not resumed:
            shutil.rmtree(self.folder, ignore_errors=True)
        if "tensorboard" in self.targets:
            from torch.utils.tensorboard import SummaryWriter
            from transformers.integrations import TensorBoardCallback

            trainer.pop_callback(TensorBoardCallback)
            trainer.add_callback(TensorBoardCallback(SummaryWriter(log_dir=self.folder)))
        if "mlflow" in self.targets and not os.environ.get("MLFLOW_TRACKING_URI"):
            import mlflow

            mlflow.set_tracking_uri(self.mlflow_uri)  # transformers' MLflowCallback keeps a URI already set


def quiet_console(trainer) -> None:
    """Drops the callbacks that print each logged step's metrics (a dict per line, or beside a progress bar) when
    transformers' verbosity is error or quieter: the metrics still reach the log history and `report_to`."""
    import logging

    from transformers import PrinterCallback, ProgressCallback
    from transformers.utils import logging as transformers_logging

    if transformers_logging.get_verbosity() >= logging.ERROR:
        trainer.pop_callback(PrinterCallback)
        trainer.pop_callback(ProgressCallback)


def training_logs(report_to: tuple[str, ...], logging_dir: str | None, kind: str, run_dir: str,
                  checkpoint_subdir: str = "") -> TrainingLogs:
    """The logs of the training whose work folder is `run_dir` (named after it: `<kind>-<run_dir's name>`): in
    `logging_dir`/<run name> when set, else in the checkpoint folder (`run_dir`/`checkpoint_subdir`)/logs."""
    run_name = f"{kind}-{Path(run_dir).name}"
    folder = (Path(logging_dir).expanduser() / run_name if logging_dir
              else Path(run_dir, checkpoint_subdir, LOGS_SUBDIR))
    return TrainingLogs(tuple(report_to), run_name, str(folder))
