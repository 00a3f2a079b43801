"""Execute sampled plans in the configured environment and write contract-v1 run records, resumably."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import orjson

from orchrm_dagster.contract import CONTRACT_VERSION, DEFAULT_ENVIRONMENT, RunErrorKind
from orchrm_dagster.environments import Executor, PlanJob, executor_for
from orchrm_dagster.faults import fault_point
from orchrm_dagster.llm import LLMBackend
from orchrm_dagster.mas import ExecutionResult
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
    environment: str = DEFAULT_ENVIRONMENT  # where the plans executed (simulated: correctness drawn from a truth)
    subagent_model: str = ""  # what the runs name as their sub-agent model ("simulated" in a simulated environment)


def plan_job(sample: PlanSample) -> PlanJob:
    """The execution of one sampled plan: its question, choices, reference answer and the run's seed."""
    return PlanJob(sample.question, sample.plan, sample.answer_type, sample.seed, sample.choices,
                   sample.reference_answer)


def run_record(sample: PlanSample, result: ExecutionResult | None, executor: Executor,
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
        "environment": executor.environment,
        "meta": {"contract": CONTRACT_VERSION, "orchestrator_model": sample.orchestrator_model,
                 "subagent_model": executor.model_id, "grammar": sample.grammar, "seed": sample.seed,
                 "plan_error": _plan_error_code(sample, result),
                 "error_kind": RunErrorKind(error_kind).value if error_kind else None, **executor.record_meta,
                 **(extra_meta or {})},
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


def execute_samples(samples: Iterable[PlanSample], subagents: Callable[[], LLMBackend], partial: Path,
                    settings: ExecutionSettings = ExecutionSettings(),
                    on_run: Callable[[dict], None] | None = None,
                    meta_by_run: dict[str, dict] | None = None) -> ExecutionReport:
    """Execute each sample not yet in `partial` in the settings' environment, appending its run record as it finishes
    (flushed per run, so an interrupted execution resumes where it stopped). With real agents up to
    `settings.concurrent_plans` plans run at once, their sub-agent calls sharing batches on an in-process backend.
    `meta_by_run` adds fields to the meta of the runs it names. `subagents` builds the sub-agents' backend, called
    only where the environment runs agents."""
    started = time.perf_counter()
    executor = executor_for(settings, subagents)
    report = ExecutionReport(environment=executor.environment, subagent_model=executor.model_id)
    done = finished_run_ids(partial)
    samples = list(samples)
    todo = [sample for sample in samples if sample.run_id not in done]
    report.resumed = len(samples) - len(todo)
    partial.parent.mkdir(parents=True, exist_ok=True)
    _drop_torn_tail(partial)
    if executor.retriever is not None:
        report.corpus_documents, report.corpus_rejected = len(executor.retriever), executor.retriever.rejected
    # a plan whose generation failed has nothing to execute: its record says why
    unexecutable = [s for s in todo if s.plan_error_kind == RunErrorKind.GENERATION_FAILED]
    executable = [s for s in todo if s.plan_error_kind != RunErrorKind.GENERATION_FAILED]
    with open(partial, "ab") as out:
        def write(sample: PlanSample, result: ExecutionResult | None) -> None:
            record = run_record(sample, result, executor, (meta_by_run or {}).get(sample.run_id))
            out.write(orjson.dumps(record) + b"\n")
            out.flush()
            os.fsync(out.fileno())
            report.executed += 1
            report.failed += record["error"] is not None
            report.malformed_plans += not sample.plan_parses
            if on_run:
                on_run(record)
            fault_point("rollout.executing")

        for sample in unexecutable:
            write(sample, None)
        for index, result in executor.completed([plan_job(s) for s in executable]):
            write(executable[index], result)
    report.seconds = time.perf_counter() - started
    report.mean_batch_size = executor.mean_batch_size
    return report


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
