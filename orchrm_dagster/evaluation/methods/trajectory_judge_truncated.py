"""`trajectory_judge_truncated`: the trajectory judge reading only the first `max_candidate_chars` of each executed
trajectory (all N are executed): a cheaper judge, which does not read all it judges."""

from __future__ import annotations

from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, register_method
from orchrm_dagster.evaluation.methods.trajectory_judge import executed_trajectories

TRAJECTORY_JUDGE_TRUNCATED = register_method(EvaluationMethod(
    name="trajectory_judge_truncated",
    description="an LLM names the best of the N executed trajectories, each cut at max_candidate_chars",
    kind=MethodKind.LLM_JUDGE, choose=executed_trajectories, executes_all=True, judge_prompt="judge_trajectories",
    judge_reading="truncated"))
