"""`collaborative_verifier_fixed`: the run the verifier panel scores highest, its partial scores fused by the
configured weights (`verifier.weights`), not fitted: the CRM panel before its aggregator adapts."""

from __future__ import annotations

import polars as pl

from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, register_method
from orchrm_dagster.evaluation.methods.collaborative_verifier import panel_choice, prepare_panel
from orchrm_dagster.evaluation.settings import EvaluationSettings


def choose(members: pl.DataFrame, n: int, settings: EvaluationSettings) -> pl.DataFrame:
    weights = settings.verifier.weights
    return panel_choice(members, n, pl.col("verifier_static"), weights.agreement, weights.rank)


COLLABORATIVE_VERIFIER_FIXED = register_method(EvaluationMethod(
    name="collaborative_verifier_fixed", description="the best score of a panel of evaluators, fused by fixed weights",
    kind=MethodKind.CANDIDATE_SET, choose=choose, executes_all=True, prepare=prepare_panel))
