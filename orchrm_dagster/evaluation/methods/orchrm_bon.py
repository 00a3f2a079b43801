"""`orchrm_bon`: the plan the champion reward model scores highest, the only one executed."""

from __future__ import annotations

import polars as pl

from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, register_method
from orchrm_dagster.evaluation.methods.common import ranked_choice
from orchrm_dagster.evaluation.settings import EvaluationSettings


def choose(pool: pl.DataFrame, n: int, settings: EvaluationSettings) -> pl.DataFrame:
    return ranked_choice(pool, "score", n, "rm_tokens")


ORCHRM_BON = register_method(EvaluationMethod(
    name="orchrm_bon", description="the plan the champion reward model scores highest", kind=MethodKind.RANKED,
    choose=choose, executes_all=False, needs_reward_model=True))
