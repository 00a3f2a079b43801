"""Where a step's training runs: in a process of its own, started through Dagster Pipes, so that the run worker never
loads a model. Locally a subprocess (`PipesSubprocessClient`) that dies with the run worker, or with `orchrm loop`
(`processes.watch_owners`); in the k8s profile the same command in a pod of its own (`PipesK8sClient`), with the GPUs
the training's config asks for. The training reports its log lines and its result back through Pipes; a training that
fails, or dies without a word (OOM, kill -9), fails the step with its own last line."""

from __future__ import annotations

import os
import re
import sys
import tempfile

import dagster as dg
from dagster._core.errors import DagsterPipesExecutionError  # what PipesSubprocessClient raises; not exported

from assets.config_bridge import EngineResource, dagster_config
from assets.deployment import GPU_NODE_SELECTOR, GPU_TOLERATIONS, profile
from orchrm_dagster.processes import OWNERS_ENV, how_it_ended, owners_of_a_child
from orchrm_dagster.settings import TrainingProcessSettings

TRAINING_MODULE = "orchrm_dagster.app.training_process"


class TrainingProcessResource(dagster_config(TrainingProcessSettings, "TrainingProcessResourceFields",
                                             base=EngineResource)):
    """How a step starts its training process (`reward_model`, `grpo_round`): the settings file's `training`."""

    def chosen_launcher(self) -> str:
        """The launcher set, else the deployment profile's: a subprocess locally, a pod of its own on Kubernetes."""
        return self.launcher or ("k8s" if profile() == "k8s" else "subprocess")

    def run(self, context, job: str, request: dict, gpus: int = 1) -> dict:
        """The training `job`'s result (`training_jobs`), run in its own process; `gpus`: what its pod asks for."""
        invocation = (self._in_pod(context, job, request, gpus) if self.chosen_launcher() == "k8s"
                      else self._in_subprocess(context, job, request))
        results = invocation.get_custom_messages()
        if not results:
            raise dg.Failure(description=f"the {job} training process ended without reporting its result")
        return results[-1]

    def _in_subprocess(self, context, job: str, request: dict):
        with tempfile.TemporaryDirectory(prefix="orchrm-training-") as folder:
            log_file = os.path.join(folder, "training.log")
            client = dg.PipesSubprocessClient(env={OWNERS_ENV: owners_of_a_child()})
            try:
                return client.run(context=context, command=[sys.executable, "-m", TRAINING_MODULE],
                                  extras={"job": job, "request": request, "log_file": log_file})
            except DagsterPipesExecutionError as error:
                # from None: the cause shown (`runs.root_cause`) is the training's, not Pipes' exit code
                raise dg.Failure(description=training_failure(job, str(error), log_file)) from None

    def _in_pod(self, context, job: str, request: dict, gpus: int):
        from dagster_k8s import PipesK8sClient

        return PipesK8sClient().run(context=context, image=self.image or os.environ.get("DAGSTER_CURRENT_IMAGE"),
                                    command=training_command_in_pod(), namespace=self.namespace,
                                    extras={"job": job, "request": request}, base_pod_spec=training_pod_spec(gpus))


def default_training_process() -> TrainingProcessResource:
    """The deployment profile's: a subprocess locally, a pod of its own on Kubernetes."""
    return TrainingProcessResource()


def training_gpus(device: str, processes: int) -> int:
    """The GPUs a training asks for: one per data-parallel process, none on the CPU."""
    return 0 if device == "cpu" else processes


def training_command_in_pod() -> list[str]:
    return ["python", "-m", TRAINING_MODULE]


def training_pod_spec(gpus: int) -> dict:
    """The training pod: `gpus` GPUs on the GPU node pool (none: a CPU pod anywhere)."""
    if gpus < 1:
        return {}
    return {"containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            "node_selector": GPU_NODE_SELECTOR, "tolerations": GPU_TOLERATIONS}


def training_failure(job: str, error: str, log_file: str) -> str:
    """Why the training process failed: how it ended and its own last line (its error, or the last it logged)."""
    code = re.search(r"failed with code (-?\d+)", error)
    ended = how_it_ended(int(code.group(1))) if code else error
    try:
        with open(log_file) as lines:
            last = [line.rstrip("\n") for line in lines if line.strip()][-1:]
    except OSError:
        last = []
    said = f"; its last line: {last[0]}" if last else "; it logged nothing"
    return f"the {job} training process {ended}{said}"
