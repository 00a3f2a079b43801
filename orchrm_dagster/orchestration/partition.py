"""The work of one (benchmark, policy) partition: sample its plans, then execute them and land the runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from orchrm_dagster.llm import LLMBackend
from orchrm_dagster.orchestration.execution import ExecutionReport, execute_samples
from orchrm_dagster.orchestration.policy import PolicySpec, run_id_for
from orchrm_dagster.orchestration.sampling import PlanSample, sample_plans
from orchrm_dagster.orchestration.selection import best_of_n, score_samples
from orchrm_dagster.orchestration.settings import ExecutionSettings, PlanSamplingSettings
from orchrm_dagster.orchestration.store import (Cell, execution_batch_name, read_samples, select_problems,
                                                write_samples)
from orchrm_dagster.storage import LandedFile, StorageRoot, land, local_work_dir


@dataclass(frozen=True)
class SamplingReport:
    samples: list[PlanSample]
    new_samples: int

    @property
    def parse_rate(self) -> float:
        return sum(s.plan_parses for s in self.samples) / len(self.samples) if self.samples else 0.0

    @property
    def error_counts(self) -> Counter:
        """Plans that cannot be executed, by PlanError code (or by kind when generation failed)."""
        return Counter(s.plan_error_code or s.plan_error_kind for s in self.samples if s.plan_error_kind)


def sample_partition(root: StorageRoot, benchmark: str, policy: PolicySpec, backend: LLMBackend,
                     settings: PlanSamplingSettings) -> SamplingReport:
    """Samples `settings.n_samples` plans per problem; samples already stored for the same problems, indexes and
    seed are kept, so a re-materialization only draws what is missing (and drops what is no longer asked for)."""
    cell = Cell(benchmark, policy.name)
    problems = select_problems(root, benchmark, settings.problem_limit, settings.problem_ids)
    wanted = {run_id_for(policy, p.problem_id, settings.seed, i, settings.run_tag)
              for p in problems for i in range(settings.n_samples)}
    kept = [s for s in read_samples(root, cell) if s.run_id in wanted]
    fresh = sample_plans(policy, backend, problems, settings.n_samples, settings.seed,
                         skip_run_ids=frozenset(s.run_id for s in kept), run_tag=settings.run_tag)
    samples = kept + fresh
    write_samples(root, cell, samples)
    return SamplingReport(samples, len(fresh))


def execute_and_land(root: StorageRoot, cell: Cell, subagents: Callable[[], LLMBackend], settings: ExecutionSettings,
                     on_run: Callable[[dict], None] | None = None) -> tuple[ExecutionReport, LandedFile]:
    """Executes the partition's samples (all of them, or with selection=orchrm_bon only the champion's pick among
    each problem's first best_of_n) into a local partial file (resumable: finished runs, including those a
    previous attempt already landed, are not redone), then lands it as one batch file and removes the partial.
    `subagents` builds the sub-agents' backend where the environment runs agents."""
    samples = read_samples(root, cell)
    meta = None
    if settings.selection == "orchrm_bon":
        selections = best_of_n(samples, score_samples(root, cell, samples, settings.scoring),
                               settings.best_of_n)
        samples = [s.chosen for s in selections]
        meta = {s.chosen.run_id: s.meta for s in selections}
    batch_name = execution_batch_name(cell, settings)
    partial = local_work_dir(root) / "execution" / f"{batch_name}.partial"
    _seed_partial_from_landed(root, batch_name, partial)
    report = execute_samples(samples, subagents, partial, settings, on_run=on_run, meta_by_run=meta)
    landed = land(root, partial, name=batch_name)
    partial.unlink()
    return report, landed


def _seed_partial_from_landed(root: StorageRoot, batch_name: str, partial) -> None:
    """Runs already landed for this partition count as finished, so re-materializing redoes nothing."""
    landed = root.landing_path(batch_name)
    if not partial.exists() and root.exists(landed):
        partial.parent.mkdir(parents=True, exist_ok=True)
        root.fs.get_file(landed, str(partial))
