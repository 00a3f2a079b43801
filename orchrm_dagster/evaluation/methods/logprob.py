"""`logprob`: the plan with the highest mean token log-probability under its policy, the only one executed."""

from __future__ import annotations

import polars as pl

from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, register_method
from orchrm_dagster.evaluation.methods.common import ranked_choice
from orchrm_dagster.evaluation.settings import EvaluationSettings


def choose(pool: pl.DataFrame, n: int, settings: EvaluationSettings) -> pl.DataFrame:
    return ranked_choice(pool, "logprob", n, None)


LOGPROB = register_method(EvaluationMethod(
    name="logprob", description="the plan with the highest log-probability", kind=MethodKind.RANKED, choose=choose,
    executes_all=False))
