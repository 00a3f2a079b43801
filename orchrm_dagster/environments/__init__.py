"""Environments, a registry: where executing a plan happens and where its correctness comes from.

`agents` (the default everywhere) runs the plan's sub-agents on an LLM backend; `simulated` draws correctness from a
truth function of the parsed plan (orchrm_dagster/truths/). Each is one module of this package registering an
`Environment` (its name, its `@engine_config` settings section, how it builds an `Executor`) plus its test.
Everything that executes plans goes through `executor_for` (the runs of `execution_artifacts` and the loop's
rollouts, GRPO's trajectory and collaborative rewards, held-out accuracy, RFT) and labels them by
`execute_and_label`, so a run's environment is chosen by config in one place (`ExecutionSettings.environment`) and
recorded with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchrm_dagster.contract import DEFAULT_ENVIRONMENT
from orchrm_dagster.environments.base import Environment, EnvironmentContext, Executor, PlanJob
from orchrm_dagster.labels import label_answer
from orchrm_dagster.mas import ExecutionResult
from orchrm_dagster.registry import Registry

__all__ = ["ENVIRONMENTS", "Environment", "EnvironmentContext", "Executor", "Labeled", "PlanJob", "environment_label", "environment_named",
           "environment_names", "environments", "execute_and_label", "executor_for", "is_simulated",
           "register_environment"]

ENVIRONMENTS: Registry[Environment] = Registry("environment", __name__, group="orchrm.environments",
                                               skip=("base", "costs"), entry_type=Environment)
register_environment = ENVIRONMENTS.register
environments = ENVIRONMENTS.all
environment_names = ENVIRONMENTS.names
environment_named = ENVIRONMENTS.named


def is_simulated(name: str | None) -> bool:
    """Whether runs of environment `name` (None: a run from before environments, executed by real agents) had their
    correctness simulated. An environment this installation does not know counts as not simulated."""
    entry = environments().get(name or DEFAULT_ENVIRONMENT)
    return bool(entry and entry.simulated)


def environment_label(name: str | None) -> str:
    """How every table, plot and metadata entry names an environment: a simulated one says so."""
    name = name or DEFAULT_ENVIRONMENT
    return f"{name} (SIMULATED)" if is_simulated(name) else name


def executor_for(execution, backend: Callable[[], object]) -> Executor:
    """The executor of `execution.environment` (an `orchestration.ExecutionSettings`), built with its settings
    section; `backend` builds the sub-agents' LLM backend when the environment needs one."""
    entry = environment_named(execution.environment)
    section = ENVIRONMENTS.settings_of(execution.environment_settings, entry)
    return entry.build(section, EnvironmentContext(execution, backend))


@dataclass(frozen=True)
class Labeled:
    result: ExecutionResult
    correct: bool  # executed without error and labeled correct against the job's reference


def execute_and_label(jobs: Sequence[PlanJob], executor: Executor) -> list[Labeled]:
    """Executes every job in its environment and labels each final answer against its reference (its choices listed),
    in the order given: the one path from a plan to a verdict."""
    return [Labeled(result, result.error is None
                    and label_answer(job.answer_type, job.reference, result.final_answer, job.choices).is_correct)
            for job, result in zip(jobs, executor.execute(jobs))]
