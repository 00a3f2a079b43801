"""`collaborative_verifier`: the run a panel of evaluators scores highest, their partial scores fused by weights."""

from __future__ import annotations

import polars as pl

from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, register_method
from orchrm_dagster.evaluation.methods.common import per_problem
from orchrm_dagster.evaluation.settings import EvaluationSettings


def collaborative_verifier(members: pl.DataFrame, n: int, agreement_weight: float) -> pl.DataFrame:
    """The highest fused panel score: each run's static partial scores (`verifier_static`, weighted) plus the
    weighted share of the set's other runs that agree with its answer; ties go to the lower run_id."""
    counts = members.filter(pl.col("vote").is_not_null()).group_by("pkey", "set_id", "vote").agg(same=pl.len())
    scored = members.join(counts, on=["pkey", "set_id", "vote"], how="left").with_columns(
        total=pl.col("verifier_static")
        + agreement_weight * ((pl.col("same").fill_null(1) - 1) / max(n - 1, 1)).cast(pl.Float64))
    chosen = (scored.sort(["pkey", "set_id", "total", "slot"], descending=[False, False, True, False])
              .unique(subset=["pkey", "set_id"], keep="first", maintain_order=True))
    verification = pl.col("verifier_tokens").cast(pl.Float64).mean() * n
    return per_problem(chosen, members, n, verification)


def choose(members: pl.DataFrame, n: int, settings: EvaluationSettings) -> pl.DataFrame:
    return collaborative_verifier(members, n, settings.verifier.weights.agreement)


COLLABORATIVE_VERIFIER = register_method(EvaluationMethod(
    name="collaborative_verifier",
    description="the best score of a panel of evaluators, fused by weights",
    kind=MethodKind.CANDIDATE_SET, choose=choose, executes_all=True, needs_verifier_panel=True))
