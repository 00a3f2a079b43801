"""`orchrm_bon`: the plan the champion reward model picks by the Best-of-N rule production runs, the only one
executed.

The rule is `rm.best_of_n_order` (plans that parse first, then the champion's score, then the lower plan hash), the
one `orchestration.best_of_n` and `orchrm serve` call: the evaluation measures the choice production makes. Whether a
plan parses is read here from its text (each distinct plan parsed once).
"""

from __future__ import annotations

import polars as pl

from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, Preparation, register_method
from orchrm_dagster.evaluation.methods.common import choice_by_position
from orchrm_dagster.evaluation.pools import run_texts
from orchrm_dagster.evaluation.settings import EvaluationSettings
from orchrm_dagster.rm import best_of_n_order, plan_parses


def prepare(preparation: Preparation) -> None:
    """Adds `parses` (the run's plan is a plan that can run) to the pool."""
    pool = preparation.pool
    plans = run_texts(preparation.root, pool["run_id"].to_list()).select("run_id", "plan")
    hashes = pool.select("run_id", "plan_hash").join(plans, on="run_id", how="left")
    distinct = hashes.unique("plan_hash", keep="first").drop_nulls("plan")
    parsed = distinct.select("plan_hash", parses=pl.Series([plan_parses(plan) for plan in distinct["plan"]],
                                                           dtype=pl.Boolean))
    preparation.pool = pool.join(parsed, on="plan_hash", how="left").with_columns(pl.col("parses").fill_null(False))
    preparation.reports["orchrm_bon"] = {"plans_parsed": distinct.height,
                                         "runs_whose_plan_does_not_parse": int((~preparation.pool["parses"]).sum())}


def choose(pool: pl.DataFrame, n: int, settings: EvaluationSettings) -> pl.DataFrame:
    eligible = pool.filter(pl.col("m") >= n).sort("pkey", "idx")
    if not eligible.height:  # an empty pool is never prepared: it has no `parses`
        return choice_by_position(eligible, n, "rm_tokens")
    order = best_of_n_order(eligible["parses"].to_list(), eligible["score"].to_list(),
                            eligible["plan_hash"].to_list(), groups=eligible["pkey"].to_numpy())
    return choice_by_position(eligible[order], n, "rm_tokens")


ORCHRM_BON = register_method(EvaluationMethod(
    name="orchrm_bon", description="the plan the champion reward model picks (the Best-of-N rule production runs)",
    kind=MethodKind.RANKED, choose=choose, executes_all=False, needs_reward_model=True, prepare=prepare))
