"""`single`: one sampled run, nothing verified; the N=1 baseline the other methods are compared with."""

from __future__ import annotations

import polars as pl

from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, register_method
from orchrm_dagster.evaluation.methods.common import one_sample
from orchrm_dagster.evaluation.settings import EvaluationSettings


def choose(pool: pl.DataFrame, n: int, settings: EvaluationSettings) -> pl.DataFrame:
    return one_sample(pool)


SINGLE = register_method(EvaluationMethod(
    name="single", description="one run, no verification (N=1 only)", kind=MethodKind.RANKED, choose=choose,
    executes_all=False, max_n=1))
