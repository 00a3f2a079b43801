"""Execute sampled plans with sub-agents and write contract-v1 run records, resumably."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import nullcontext
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import orjson

from orchrm_dagster.contract import CONTRACT_VERSION, RunErrorKind
from orchrm_dagster.llm import CoalescingBackend, LLMBackend, SamplingSettings
from orchrm_dagster.mas import (AgentContext, BM25Retriever, ExecutionResult, Retriever, execute_plan, load_retriever,
                                question_text)
from orchrm_dagster.orchestration.sampling import PlanSample
from orchrm_dagster.orchestration.settings import ExecutionSettings


@dataclass
class ExecutionReport:
    executed: int = 0
    resumed: int = 0  # finished by an earlier, interrupted attempt and not redone
    failed: int = 0
    malformed_plans: int = 0
    seconds: float = 0.0
    mean_batch_size: float | None = None  # requests per backend call, when concurrent plans shared batches
    corpus_documents: int = 0  # documents WebSearchAgent searched (0: no retrieval)
    corpus_rejected: tuple[str, ...] = ()  # corpus lines skipped as malformed ("file:line: field: reason")


def execution_retriever(settings: ExecutionSettings) -> BM25Retriever | None:
    """WebSearchAgent's retriever for `settings.corpus` (built once per process and corpus file version), or None
    when the settings ask for no retrieval. Every executor entry point takes its retriever from here."""
    return None if settings.corpus is None else load_retriever(settings.corpus)


def run_record(sample: PlanSample, result: ExecutionResult | None, subagent_model: str,
               extra_meta: dict | None = None) -> dict:
    """The contract-v1 record of one executed (or unexecutable) plan; `extra_meta` joins its meta."""
    calls = result.subagent_records() if result else []
    sub_prompt = result.prompt_tokens if result else 0
    sub_completion = result.completion_tokens if result else 0
    error = sample.plan_error if result is None else (result.error or None)
    error_kind = sample.plan_error_kind if result is None else result.error_kind
    return {
        "run_id": sample.run_id, "problem_id": sample.problem_id, "benchmark": sample.benchmark,
        "question": sample.question,
        "policy": {"name": sample.policy_name, "kind": sample.policy_kind, "step": sample.policy_step},
        "plan": sample.plan, "reference_answer": sample.reference_answer, "sample_index": sample.sample_index,
        "final_answer": result.final_answer if result else None, "subagents": calls,
        "tokens": {"orchestrator_prompt": sample.orchestrator_prompt_tokens,
                   "orchestrator_completion": sample.orchestrator_completion_tokens,
                   "subagent_prompt": sub_prompt, "subagent_completion": sub_completion},
        "plan_logprob": sample.plan_logprob, "error": error,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "meta": {"contract": CONTRACT_VERSION, "orchestrator_model": sample.orchestrator_model,
                 "subagent_model": subagent_model, "grammar": sample.grammar, "seed": sample.seed,
                 "plan_error": _plan_error_code(sample, result),
                 "error_kind": RunErrorKind(error_kind).value if error_kind else None, **(extra_meta or {})},
    }


def _plan_error_code(sample: PlanSample, result: ExecutionResult | None) -> str | None:
    """The PlanError code of an unparseable plan, or the kind of a generation that failed."""
    if result is not None and result.plan_error:
        return result.plan_error
    return sample.plan_error_code


def finished_run_ids(partial: Path) -> set[str]:
    """Run ids already written to a partial output; a torn last line (a crash mid-write) is ignored."""
    if not partial.exists():
        return set()
    done = set()
    with open(partial, "rb") as src:
        for line in src:
            try:
                done.add(orjson.loads(line)["run_id"])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue
    return done


def execute_samples(samples: Iterable[PlanSample], backend: LLMBackend, partial: Path,
                    settings: ExecutionSettings = ExecutionSettings(),
                    on_run: Callable[[dict], None] | None = None,
                    meta_by_run: dict[str, dict] | None = None) -> ExecutionReport:
    """Execute each sample not yet in `partial`, appending its run record as it finishes (flushed per run, so an
    interrupted execution resumes where it stopped). Up to `settings.concurrent_plans` plans run at once; with a
    backend that batches in-process their sub-agent calls are merged into shared batches. `meta_by_run` adds
    fields to the meta of the runs it names."""
    started = time.perf_counter()
    report = ExecutionReport()
    done = finished_run_ids(partial)
    samples = list(samples)
    todo = [sample for sample in samples if sample.run_id not in done]
    report.resumed = len(samples) - len(todo)
    partial.parent.mkdir(parents=True, exist_ok=True)
    _drop_torn_tail(partial)
    retriever = execution_retriever(settings)
    if retriever is not None:
        report.corpus_documents, report.corpus_rejected = len(retriever), retriever.rejected
    shared = _shared_backend(backend, settings.concurrent_plans)
    with open(partial, "ab") as out, ThreadPoolExecutor(max(1, settings.concurrent_plans)) as pool:
        running = [pool.submit(_execute_as_worker, sample, shared, settings, retriever) for sample in todo]
        for finished in as_completed(running):
            sample, result = finished.result()
            record = run_record(sample, result, backend.model_id, (meta_by_run or {}).get(sample.run_id))
            out.write(orjson.dumps(record) + b"\n")
            out.flush()
            os.fsync(out.fileno())
            report.executed += 1
            report.failed += record["error"] is not None
            report.malformed_plans += not sample.plan_parses
            if on_run:
                on_run(record)
    report.seconds = time.perf_counter() - started
    if isinstance(shared, CoalescingBackend) and shared.batch_sizes:
        report.mean_batch_size = round(sum(shared.batch_sizes) / len(shared.batch_sizes), 2)
    return report


def _shared_backend(backend: LLMBackend, concurrent_plans: int) -> LLMBackend:
    if concurrent_plans > 1 and backend.batches_in_process:
        return CoalescingBackend(backend)
    return backend  # an HTTP backend serves concurrent calls itself (the server batches them)


def _execute_as_worker(sample: PlanSample, backend: LLMBackend, settings: ExecutionSettings,
                       retriever: Retriever | None):
    with backend.worker() if isinstance(backend, CoalescingBackend) else nullcontext():
        return sample, _execute(sample, backend, settings, retriever)


def _execute(sample: PlanSample, backend: LLMBackend, settings: ExecutionSettings,
             retriever: Retriever | None) -> ExecutionResult | None:
    if sample.plan_error_kind == RunErrorKind.GENERATION_FAILED:
        return None
    job = PlanJob(sample.question, sample.plan, sample.answer_type, sample.seed, sample.choices)
    return _execute_plan(job, backend, settings, retriever)


@dataclass(frozen=True)
class PlanJob:
    """A plan to execute outside a sampled partition (a GRPO reward, a held-out check)."""

    question: str
    plan: str
    answer_type: str
    seed: int = 0
    choices: tuple[str, ...] | None = None  # a multiple-choice problem's options: the agents see them listed


def execute_plans(jobs: list[PlanJob], backend: LLMBackend,
                  settings: ExecutionSettings = ExecutionSettings()) -> list[ExecutionResult]:
    """Executes every plan (never raises for one: failures come back in each result's `error`), up to
    `settings.concurrent_plans` at once with their sub-agent calls sharing batches, in the order given."""
    shared = _shared_backend(backend, settings.concurrent_plans)
    retriever = execution_retriever(settings)

    def run(job: PlanJob) -> ExecutionResult:
        with shared.worker() if isinstance(shared, CoalescingBackend) else nullcontext():
            return _execute_plan(job, shared, settings, retriever)

    with ThreadPoolExecutor(max(1, settings.concurrent_plans)) as pool:
        return list(pool.map(run, jobs))


def _execute_plan(job: PlanJob, backend: LLMBackend, settings: ExecutionSettings,
                  retriever: Retriever | None) -> ExecutionResult:
    ctx = AgentContext(
        backend=backend,
        sampling=SamplingSettings(temperature=settings.subagent_temperature,
                                  max_new_tokens=settings.subagent_max_new_tokens),
        answer_format=job.answer_type, seed=job.seed, retriever=retriever,
    )
    return execute_plan(question_text(job.question, job.choices), job.plan, ctx, settings.agents,
                        timeout_s=settings.plan_timeout_s)


def _drop_torn_tail(partial: Path) -> None:
    if not partial.exists() or partial.stat().st_size == 0:
        return
    with open(partial, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        content = f.read()
        f.seek(0)
        f.truncate(content.rfind(b"\n") + 1)
