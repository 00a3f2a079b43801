"""The MAS runner: sample orchestration plans from a policy, execute them with sub-agents, land the runs.

Names load lazily (`orchrm_dagster.lazy_names`)."""

from __future__ import annotations

from orchrm_dagster.lazy_names import lazy_names

from orchrm_dagster.environments import PlanJob

_EXPORTS = {
    "ExecutionReport": "execution",
    "execute_samples": "execution",
    "finished_run_ids": "execution",
    "plan_job": "execution",
    "run_record": "execution",
    "SamplingReport": "partition",
    "execute_and_land": "partition",
    "sample_partition": "partition",
    "EMBEDDED_POLICIES": "policy",
    "PolicySpec": "policy",
    "run_id_for": "policy",
    "sample_seed": "policy",
    "PlanSample": "sampling",
    "Problem": "sampling",
    "orchestrator_request": "sampling",
    "sample_plans": "sampling",
    "PlanScore": "selection",
    "ScoredSamples": "selection",
    "Selection": "selection",
    "best_of_n": "selection",
    "score_samples": "selection",
    "ExecutionSettings": "settings",
    "PlanSamplingSettings": "settings",
    "SAMPLES_TABLE": "store",
    "Cell": "store",
    "benchmarks_available": "store",
    "execution_batch_name": "store",
    "read_samples": "store",
    "select_problems": "store",
    "write_samples": "store",
}
__getattr__, __dir__, __all__ = lazy_names(__name__, _EXPORTS, eager=("PlanJob",))
