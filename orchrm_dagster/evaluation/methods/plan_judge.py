"""`plan_judge`: an LLM names the best of the N plans, read whole (a knockout if they do not fit its context),
before any is executed; only that one is."""

from __future__ import annotations

import polars as pl

from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, register_method
from orchrm_dagster.storage import StorageRoot


def plans(root: StorageRoot, runs: pl.DataFrame) -> dict[str, str]:
    return dict(zip(runs["run_id"].to_list(), runs["plan"].to_list()))


PLAN_JUDGE = register_method(EvaluationMethod(
    name="plan_judge", description="an LLM names the best of the N plans", kind=MethodKind.LLM_JUDGE,
    choose=plans, executes_all=False, judge_prompt="judge_plans"))
