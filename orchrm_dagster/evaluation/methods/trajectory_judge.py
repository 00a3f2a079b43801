"""`trajectory_judge`: an LLM names the best of the N executed trajectories (so all N are executed), reading each
whole (a knockout when the N do not fit its context; `trajectory_judge_truncated` is the cheaper cut reading)."""

from __future__ import annotations

import polars as pl

from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, register_method
from orchrm_dagster.evaluation.pools import trajectories
from orchrm_dagster.storage import StorageRoot


def executed_trajectories(root: StorageRoot, runs: pl.DataFrame) -> dict[str, str]:
    final_answers = dict(zip(runs["run_id"].to_list(), runs["final_answer"].to_list()))
    return trajectories(root, runs["run_id"].unique().to_list(), final_answers)


TRAJECTORY_JUDGE = register_method(EvaluationMethod(
    name="trajectory_judge", description="an LLM names the best of the N executed trajectories, read whole",
    kind=MethodKind.LLM_JUDGE, choose=executed_trajectories, executes_all=True, judge_prompt="judge_trajectories"))
