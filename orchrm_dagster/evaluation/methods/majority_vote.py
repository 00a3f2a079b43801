"""`majority_vote`: the most frequent extracted answer of the N executed runs."""

from __future__ import annotations

import polars as pl

from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, register_method
from orchrm_dagster.evaluation.methods.common import per_problem
from orchrm_dagster.evaluation.settings import EvaluationSettings


def majority_vote(members: pl.DataFrame, n: int) -> pl.DataFrame:
    """The most frequent answer of the set (runs without an answer do not vote); ties go to the answer seen first
    (lowest run_id), and the chosen run is the first that gives it. A set without any answer takes its first run."""
    votes = (members.filter(pl.col("vote").is_not_null())
             .group_by("pkey", "set_id", "vote").agg(votes=pl.len(), slot=pl.col("slot").min())
             .sort(["pkey", "set_id", "votes", "slot"], descending=[False, False, True, False])
             .unique(subset=["pkey", "set_id"], keep="first", maintain_order=True)
             .select("pkey", "set_id", "slot"))
    sets = members.select("pkey", "set_id").unique()
    picks = sets.join(votes, on=["pkey", "set_id"], how="left").with_columns(pl.col("slot").fill_null(0))
    chosen = members.join(picks, on=["pkey", "set_id", "slot"])
    return per_problem(chosen, members, n, pl.lit(0.0))


def choose(members: pl.DataFrame, n: int, settings: EvaluationSettings) -> pl.DataFrame:
    return majority_vote(members, n)


MAJORITY_VOTE = register_method(EvaluationMethod(
    name="majority_vote", description="the most frequent extracted answer", kind=MethodKind.CANDIDATE_SET,
    choose=choose, executes_all=True))
