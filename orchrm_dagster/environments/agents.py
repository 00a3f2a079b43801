"""`agents`: today's sub-agents on an LLM backend (the default everywhere). Up to `concurrent_plans` plans run at once;
with a backend that batches in-process their sub-agent calls are merged into shared batches, since one plan alone
keeps the model at batch size 1; an HTTP backend gets the concurrent calls and lets its server batch them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import nullcontext

from orchrm_dagster.engine_config import engine_config
from orchrm_dagster.environments import Environment, EnvironmentContext, Executor, PlanJob, register_environment
from orchrm_dagster.llm import CoalescingBackend, LLMBackend, SamplingSettings
from orchrm_dagster.mas import AgentContext, ExecutionResult, Retriever, execute_plan, load_retriever, question_text


@engine_config
class AgentsEnvironmentSettings:
    """No settings of its own: the sub-agents work as the execution settings say (budgets, agents, corpus)."""


def execution_retriever(settings) -> Retriever | None:
    """WebSearchAgent's retriever for `settings.corpus` (built once per process and corpus file version), or None
    when the settings ask for no retrieval."""
    return None if settings.corpus is None else load_retriever(settings.corpus)


class AgentsExecutor(Executor):
    environment = "agents"

    def __init__(self, backend: LLMBackend, settings):
        self.backend = backend
        self.settings = settings
        self.model_id = backend.model_id
        self.retriever = execution_retriever(settings)

    def completed(self, jobs: Sequence[PlanJob]) -> Iterator[tuple[int, ExecutionResult]]:
        shared = self._shared_backend()
        with ThreadPoolExecutor(max(1, self.settings.concurrent_plans)) as pool:
            running = {pool.submit(self._run, job, shared): index for index, job in enumerate(jobs)}
            for finished in as_completed(running):
                yield running[finished], finished.result()
        if isinstance(shared, CoalescingBackend) and shared.batch_sizes:
            self.mean_batch_size = round(sum(shared.batch_sizes) / len(shared.batch_sizes), 2)

    def _shared_backend(self) -> LLMBackend:
        if self.settings.concurrent_plans > 1 and self.backend.batches_in_process:
            return CoalescingBackend(self.backend)
        return self.backend  # an HTTP backend serves concurrent calls itself (the server batches them)

    def _run(self, job: PlanJob, backend: LLMBackend) -> ExecutionResult:
        with backend.worker() if isinstance(backend, CoalescingBackend) else nullcontext():
            ctx = AgentContext(backend=backend, answer_format=job.answer_type, seed=job.seed, retriever=self.retriever,
                               sampling=SamplingSettings(temperature=self.settings.subagent_temperature,
                                                         max_new_tokens=self.settings.subagent_max_new_tokens))
            return execute_plan(question_text(job.question, job.choices), job.plan, ctx, self.settings.agents,
                                timeout_s=self.settings.plan_timeout_s)


def build(config: AgentsEnvironmentSettings, context: EnvironmentContext) -> AgentsExecutor:
    return AgentsExecutor(context.backend(), context.execution)


ENVIRONMENT = register_environment(Environment(
    name="agents", description="the plan's sub-agents run on the LLM backend and its final answer is labeled",
    config=AgentsEnvironmentSettings, build=build, simulated=False))
