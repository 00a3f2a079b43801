"""A round's training method in several data-parallel processes (`GRPOSettings.processes`): the round writes its
context as a job (`train_in_processes`), `accelerate launch` starts `python -m orchrm_dagster.grpo.method_process
<job folder>` once per process, and each rebuilds the method's context (the problems, the champion's scorer, the
executor), trains its share of each step through TRL's own multi-process support, and hands back what it spent. The
first process saves the policy and writes the outcome, with every process's reward and rollout tokens added up.
Each dies with its owners."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

from orchrm_dagster.devices import resolve_device
from orchrm_dagster.engine_config import config_from_json, config_to_json
from orchrm_dagster.grpo.methods import METHODS, MethodContext, method_named
from orchrm_dagster.grpo.train import TrainOutcome
from orchrm_dagster.processes import launch_data_parallel, watch_owners, write_error

OUTCOME_FILE = "outcome.json"


def train_in_processes(context: MethodContext) -> TrainOutcome:
    """`context.settings.method` trained by `context.settings.processes` processes; `TrainingProcessFailed` with
    the failing process's own error."""
    # beside the method's folder, which a method may start over
    job = Path(f"{context.output_dir}-processes")
    shutil.rmtree(job, ignore_errors=True)
    job.mkdir(parents=True)
    subagents = context.subagents
    (job / "job.json").write_text(json.dumps({
        "root": context.root.url, "s3_endpoint_url": context.root.s3_endpoint_url, "round": context.round_number,
        "model_dir": context.model_dir, "policy": config_to_json(context.policy),
        "settings": config_to_json(context.settings), "rm_version": context.rm_version,
        "subagents": {"kind": subagents.kind, "spec": config_to_json(subagents)}, "output_dir": context.output_dir}))
    settings = context.settings
    context.on_step(f"round {context.round_number}: {settings.method} in {settings.processes} data-parallel "
                    f"processes")
    launch_data_parallel("orchrm_dagster.grpo.method_process", [str(job)], settings.processes,
                         resolve_device(settings.device), str(job))
    outcome = json.loads((job / OUTCOME_FILE).read_text())
    shutil.rmtree(job, ignore_errors=True)
    return TrainOutcome(**{**outcome, "generation_calls": tuple(map(tuple, outcome["generation_calls"]))})


def main(argv: list[str] | None = None) -> None:
    watch_owners()
    from accelerate import PartialState

    PartialState()  # joins the process group and takes this process's own device before anything loads
    job = Path((argv if argv is not None else sys.argv[1:])[0])
    rank = int(os.environ.get("RANK", "0"))
    try:
        outcome = _train(job)
        if rank == 0:
            (job / OUTCOME_FILE).write_text(json.dumps(dataclasses.asdict(outcome)))
    except BaseException as error:
        write_error(str(job), rank, error)
        raise
    finally:
        import torch.distributed as dist

        if dist.is_initialized():  # gloo aborts the process at exit otherwise
            dist.destroy_process_group()


def _train(job: Path) -> TrainOutcome:
    import torch.distributed as dist

    method_settings, context = _context(json.loads((job / "job.json").read_text()))
    method = method_named(context.settings.method)
    outcome = method.train(METHODS.settings_of(method_settings, method), context)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, outcome)
    # each process counted the rewards and rollouts of its own share of the plans; the trainer's log is global
    return dataclasses.replace(outcome, reward_tokens=sum(o.reward_tokens for o in every),
                               rollout_tokens=sum(o.rollout_tokens for o in every),
                               generation_seconds=max(o.generation_seconds for o in every))


def _context(spec: dict):
    from orchrm_dagster.environments import executor_for
    from orchrm_dagster.grpo.problems import round_problems
    from orchrm_dagster.grpo.settings import GRPOSettings
    from orchrm_dagster.llm import build_backend, spec_class
    from orchrm_dagster.orchestration import PolicySpec
    from orchrm_dagster.rm import version_scorer
    from orchrm_dagster.storage import StorageRoot

    root = StorageRoot(spec["root"], spec["s3_endpoint_url"])
    settings = config_from_json(GRPOSettings, spec["settings"])
    subagents = config_from_json(spec_class(spec["subagents"]["kind"]), spec["subagents"]["spec"])
    train, held_out = round_problems(root, settings, spec["round"])
    executor = executor_for(settings.execution, lambda: build_backend(subagents))
    context = MethodContext(root, spec["round"], spec["model_dir"], config_from_json(PolicySpec, spec["policy"]), train,
                            held_out, settings, version_scorer(root, spec["rm_version"], settings.scoring),
                            spec["rm_version"], subagents, executor, spec["output_dir"])
    return settings.method_settings, context


if __name__ == "__main__":
    main()
