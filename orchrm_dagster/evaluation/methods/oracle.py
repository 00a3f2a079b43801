"""`oracle`: correct when any of the N runs is; an upper bound, not a method one could run."""

from __future__ import annotations

import polars as pl

from orchrm_dagster.evaluation.expectation import any_correct_probability
from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, register_method
from orchrm_dagster.evaluation.pools import GROUP
from orchrm_dagster.evaluation.settings import EvaluationSettings


def oracle(pool: pl.DataFrame, n: int) -> pl.DataFrame:
    """Correct when any of the N is: 1 - C(K, N) / C(M, N) with K incorrect runs. All N are executed."""
    per_problem = pool.filter(pl.col("m") >= n).group_by(GROUP).agg(
        m=pl.len(), incorrect=(~pl.col("correct")).sum(), mean_exec=pl.col("exec_tokens").cast(pl.Float64).mean())
    accuracy = any_correct_probability(per_problem["m"].to_numpy(), per_problem["incorrect"].to_numpy(), n)
    return per_problem.select(*GROUP, accuracy=pl.Series(accuracy), verification=pl.lit(0.0),
                              execution=pl.col("mean_exec") * n)


def choose(pool: pl.DataFrame, n: int, settings: EvaluationSettings) -> pl.DataFrame:
    return oracle(pool, n)


ORACLE = register_method(EvaluationMethod(
    name="oracle", description="correct if any of the N is (an upper bound)", kind=MethodKind.RANKED,
    choose=choose, executes_all=True))
