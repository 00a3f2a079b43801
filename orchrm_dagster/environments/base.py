"""What every environment shares: a plan to execute, the executor an environment builds, and its registry entry."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from orchrm_dagster.mas import ExecutionResult


@dataclass(frozen=True)
class PlanJob:
    """One plan to execute on one problem."""

    question: str
    plan: str
    answer_type: str
    seed: int = 0  # the run's seed: agents sample with it, a simulated truth draws with it
    choices: tuple[str, ...] | None = None  # a multiple-choice problem's options: the agents see them listed
    reference: str | None = None  # the reference answer (what a simulated truth answers when it draws "correct")


class Executor:
    """Executes plans in one environment. Subclasses implement `completed`; `execute` keeps the order given."""

    environment: str = ""  # the registry name, recorded with every run it executes
    model_id: str = ""  # what run records name as the sub-agent model
    mean_batch_size: float | None = None  # requests per backend call, when concurrent plans shared batches
    retriever = None  # WebSearchAgent's retriever (mas.Retriever), when the environment searches a corpus
    record_meta: dict = {}  # what each run record's meta says of the environment (a simulated truth's name)
    truth: str | None = None  # what decides correctness where it is simulated: the truth function and its parameters

    def completed(self, jobs: Sequence[PlanJob]) -> Iterator[tuple[int, ExecutionResult]]:
        """(index in `jobs`, result) as each plan finishes. Never raises for one plan: its failure comes back in the
        result's `error`."""
        raise NotImplementedError

    def execute(self, jobs: Sequence[PlanJob]) -> list[ExecutionResult]:
        results: list[ExecutionResult | None] = [None] * len(jobs)
        for index, result in self.completed(jobs):
            results[index] = result
        return results  # type: ignore[return-value]


@dataclass(frozen=True)
class EnvironmentContext:
    """What an environment is built from: the execution settings (`orchestration.ExecutionSettings`: sub-agent budgets,
    concurrency, corpus, agent settings) and the sub-agents' LLM backend (built lazily; a simulated environment never
    loads a model)."""

    execution: object
    backend: Callable[[], object]  # () -> LLMBackend


@dataclass(frozen=True)
class Environment:
    """A registry entry: one module of `orchrm_dagster.environments` registers one."""

    name: str  # what `ExecutionSettings.environment` calls it; also its settings section's name
    description: str  # one line: the config's and the CLI's help
    config: type  # an @engine_config class (possibly without fields): its settings section
    build: Callable[[object, EnvironmentContext], Executor]  # (its config, the context) -> the executor
    simulated: bool  # correctness comes from a simulated truth, not from executed sub-agents: tables say so
