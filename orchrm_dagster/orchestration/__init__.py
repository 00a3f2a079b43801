from orchrm_dagster.orchestration.execution import ExecutionReport, ExecutionSettings, execute_samples, run_record
from orchrm_dagster.orchestration.policy import PolicySpec, run_id_for, sample_seed
from orchrm_dagster.orchestration.sampling import PlanSample, Problem, sample_plans

__all__ = ["ExecutionReport", "ExecutionSettings", "PlanSample", "PolicySpec", "Problem", "execute_samples",
           "run_id_for", "run_record", "sample_plans", "sample_seed"]
