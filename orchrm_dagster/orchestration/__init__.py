"""The MAS runner: sample orchestration plans from a policy, execute them with sub-agents, land the runs."""

from orchrm_dagster.environments import PlanJob
from orchrm_dagster.orchestration.execution import (ExecutionReport, execute_samples, finished_run_ids, plan_job,
                                                    run_record)
from orchrm_dagster.orchestration.partition import SamplingReport, execute_and_land, sample_partition
from orchrm_dagster.orchestration.policy import EMBEDDED_POLICIES, PolicySpec, run_id_for, sample_seed
from orchrm_dagster.orchestration.sampling import PlanSample, Problem, orchestrator_request, sample_plans
from orchrm_dagster.orchestration.selection import PlanScore, ScoredSamples, Selection, best_of_n, score_samples
from orchrm_dagster.orchestration.settings import ExecutionSettings, PlanSamplingSettings
from orchrm_dagster.orchestration.store import (SAMPLES_TABLE, Cell, benchmarks_available, execution_batch_name,
                                                read_samples, select_problems, write_samples)

__all__ = [
    "EMBEDDED_POLICIES", "Cell", "ExecutionReport", "ExecutionSettings", "PlanJob", "PlanSample", "PlanSamplingSettings", "PlanScore",
    "PolicySpec", "Problem", "SAMPLES_TABLE", "SamplingReport", "ScoredSamples", "Selection", "benchmarks_available",
    "best_of_n", "execute_and_land", "execute_samples", "execution_batch_name",
    "finished_run_ids", "orchestrator_request", "plan_job", "read_samples", "run_id_for",
    "run_record", "sample_partition", "sample_plans", "sample_seed", "score_samples", "select_problems",
    "write_samples",
]
