"""The trainings a pipeline step hands to a process of its own (`orchrm_dagster.app.training_process`, started through
Dagster Pipes): each a function from a JSON-able request to a JSON-able result, so the step's own process never
loads a model. The request carries the engine configs (`config_to_json`); the result, the outcome (`to_json`).

A new kind of training is one function here and its entry in `TRAINING_JOBS`."""

from __future__ import annotations

from collections.abc import Callable

from orchrm_dagster.engine_config import config_from_json, config_to_json
from orchrm_dagster.storage import StorageSettings

Log = Callable[[str], None]


def reward_model_request(storage: StorageSettings, config) -> dict:
    return {"storage": config_to_json(storage), "config": config_to_json(config)}


def reward_model_job(request: dict, log: Log) -> dict:
    """New reward-model versions trained on the current pairs and gated (`rm.train_on_current_pairs`)."""
    from orchrm_dagster.rm import train_on_current_pairs
    from orchrm_dagster.rm import RMTrainConfig

    root = config_from_json(StorageSettings, request["storage"]).storage_root()
    config = config_from_json(RMTrainConfig, request["config"])
    log(f"reward model: training on the pairs of {root.url} ({config.processes} process(es))")
    outcomes = train_on_current_pairs(root, config)
    return {"outcomes": [outcome.to_json() for outcome in outcomes]}


def grpo_round_request(storage: StorageSettings, round_number: int, settings, policies: dict, llm) -> dict:
    return {"storage": config_to_json(storage), "round": round_number, "settings": config_to_json(settings),
            "policies": [config_to_json(policy) for policy in policies.values()], "llm": config_to_json(llm)}


def grpo_round_job(request: dict, log: Log) -> dict:
    """One policy round (`grpo.run_round`)."""
    from orchrm_dagster.grpo import run_round
    from orchrm_dagster.grpo import GRPOSettings
    from orchrm_dagster.llm import LLMSettings
    from orchrm_dagster.orchestration import PolicySpec

    root = config_from_json(StorageSettings, request["storage"]).storage_root()
    policies = [config_from_json(PolicySpec, policy) for policy in request["policies"]]
    outcome = run_round(root, request["round"], config_from_json(GRPOSettings, request["settings"]),
                        {policy.name: policy for policy in policies},
                        config_from_json(LLMSettings, request["llm"]).backend, on_step=log)
    return {"outcome": outcome.to_json()}


TRAINING_JOBS: dict[str, Callable[[dict, Log], dict]] = {"reward_model": reward_model_job,
                                                         "grpo_round": grpo_round_job}


def run_training_job(name: str, request: dict, log: Log = lambda text: None) -> dict:
    if name not in TRAINING_JOBS:
        raise KeyError(f"no training job {name!r} (known: {', '.join(TRAINING_JOBS)})")
    return TRAINING_JOBS[name](request, log)
