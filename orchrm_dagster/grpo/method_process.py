"""A round's training method in several data-parallel processes (`GRPOSettings.processes`): the round hands its
context over as a job (`train_in_processes`), `accelerate launch` starts `python -m orchrm_dagster.grpo.method_process
<job folder>` once per process, and each rebuilds the method's context (the problems, the champion's scorer, the
executor), trains its share of each step through TRL's own multi-process support, and hands back what it spent. The
first process saves the policy and reports the outcome, with every process's reward and rollout tokens added up
(`processes.data_parallel_process`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from orchrm_dagster.devices import resolve_device
from orchrm_dagster.engine_config import config_from_json, config_to_json
from orchrm_dagster.grpo.methods import METHODS, MethodContext, method_named
from orchrm_dagster.grpo.train import TrainOutcome
from orchrm_dagster.processes import run_data_parallel


def train_in_processes(context: MethodContext) -> TrainOutcome:
    """`context.settings.method` trained by `context.settings.processes` processes; `TrainingProcessFailed` with
    the failing process's own error."""
    settings, subagents = context.settings, context.subagents
    job = {"root": context.root.url, "s3_endpoint_url": context.root.s3_endpoint_url, "round": context.round_number,
           "model_dir": context.model_dir, "policy": config_to_json(context.policy),
           "settings": config_to_json(settings), "rm_version": context.rm_version,
           "subagents": {"kind": subagents.kind, "spec": config_to_json(subagents)}, "output_dir": context.output_dir}
    context.on_step(f"round {context.round_number}: {settings.method} in {settings.processes} data-parallel "
                    f"processes")
    # beside the method's folder, which a method may start over
    outcome = run_data_parallel("orchrm_dagster.grpo.method_process", f"{context.output_dir}-processes", job,
                                settings.processes, resolve_device(settings.device))
    return TrainOutcome(**{**outcome, "generation_calls": tuple(map(tuple, outcome["generation_calls"])),
                           "trained_problems": tuple(outcome.get("trained_problems", ()))})


def train_share(job: dict, folder: Path) -> dict:
    import torch.distributed as dist

    context = _context(job)
    method = method_named(context.settings.method)
    outcome = method.train(METHODS.settings_of(context.settings.method_settings, method), context)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, outcome)
    # each process counted the rewards and rollouts of its own share of the plans, and with transformers generation
    # its own prompts and completions; the trainer's log (vLLM's count) is global
    generation = (sum(o.generation_tokens for o in every) if outcome.generation_calls else outcome.generation_tokens)
    return dataclasses.asdict(dataclasses.replace(
        outcome, reward_tokens=sum(o.reward_tokens for o in every), rollout_tokens=sum(o.rollout_tokens for o in every),
        generation_tokens=generation, generation_seconds=max(o.generation_seconds for o in every)))


def _context(job: dict) -> MethodContext:
    from orchrm_dagster.environments import executor_for
    from orchrm_dagster.grpo.problems import round_problems
    from orchrm_dagster.grpo.settings import GRPOSettings
    from orchrm_dagster.llm import build_backend, spec_class
    from orchrm_dagster.orchestration import PolicySpec
    from orchrm_dagster.rm import version_scorer
    from orchrm_dagster.storage import StorageRoot

    root = StorageRoot(job["root"], job["s3_endpoint_url"])
    settings = config_from_json(GRPOSettings, job["settings"])
    subagents = config_from_json(spec_class(job["subagents"]["kind"]), job["subagents"]["spec"])
    train, held_out = round_problems(root, settings, job["round"])
    executor = executor_for(settings.execution, lambda: build_backend(subagents))
    return MethodContext(root, job["round"], job["model_dir"], config_from_json(PolicySpec, job["policy"]), train,
                         held_out, settings, version_scorer(root, job["rm_version"], settings.scoring),
                         job["rm_version"], subagents, executor, job["output_dir"])


if __name__ == "__main__":
    from orchrm_dagster.processes import data_parallel_process

    data_parallel_process(train_share)
