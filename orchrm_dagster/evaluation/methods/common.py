"""What several evaluation methods compute alike, as per-problem expectations over the candidate sets.

Every method returns one row per problem (by `GROUP` for the ranked choices, by `pkey` for the set-based ones,
whose members carry numbers only, so that millions of candidate-set rows stay small): `accuracy` (expected
correctness of the run chosen), `verification` (tokens spent choosing) and `execution` (sub-agent tokens of the runs
the method must execute), each the expectation over candidate sets drawn uniformly from the problem's pool.
`sampling_costs` then adds `generation` (the orchestrator tokens of all N sampled plans) and settles `execution` by
the method's `executes_all`: one rule for every method.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from orchrm_dagster.evaluation.expectation import candidate_sets, pick_probability
from orchrm_dagster.evaluation.pools import GROUP
from orchrm_dagster.evaluation.settings import EvaluationSettings
from orchrm_dagster.evaluation.verifier import STATIC_EVALUATORS

RESULT_COLUMNS = (*GROUP, "accuracy", "verification", "execution")
COST_COLUMNS = (*RESULT_COLUMNS, "generation")
# the verifier panel's columns (collaborative_verifier) are carried when its `prepare` added them to the pool
MEMBER_COLUMNS = ("correct", "vote", "exec_tokens", "verifier_static", "verifier_tokens", *STATIC_EVALUATORS,
                  "fitted_static", "fitted_agreement", "fitted_rank")
SET_RESULT_COLUMNS = ("pkey", "accuracy", "verification", "execution")


def one_sample(pool: pl.DataFrame) -> pl.DataFrame:
    """One run, no verification: the pool's mean correctness (what every method scores at N=1)."""
    return pool.group_by(GROUP).agg(
        accuracy=pl.col("correct").cast(pl.Float64).mean(), verification=pl.lit(0.0),
        execution=pl.col("exec_tokens").cast(pl.Float64).mean())


def token_means(pool: pl.DataFrame) -> pl.DataFrame:
    """Each problem's mean plan (orchestrator) and execution (sub-agent) tokens per run: what `sampling_costs` reads."""
    return pool.group_by(GROUP).agg(plan=pl.col("plan_tokens").cast(pl.Float64).mean(),
                                    run=pl.col("exec_tokens").cast(pl.Float64).mean())


def sampling_costs(frame: pl.DataFrame, means: pl.DataFrame, n: int, executes_all: bool) -> pl.DataFrame:
    """`frame` (one row per GROUP, RESULT_COLUMNS) with the honest cost of drawing N: every method samples N plans,
    so `generation` is N x the problem's mean orchestrator tokens whatever it then executes; a method that executes
    all N pays N x the mean sub-agent tokens, one that picks before execution only its chosen run's (the method's
    own `execution`). `means`: `token_means` of the pool (expectations over uniformly drawn sets)."""
    costed = frame.select(*RESULT_COLUMNS).join(means, on=list(GROUP), how="left").with_columns(
        generation=pl.col("plan").fill_null(0.0) * n)
    if executes_all:
        costed = costed.with_columns(execution=pl.col("run").fill_null(0.0) * n)
    return costed.select(*COST_COLUMNS)


def ranked_choice(pool: pl.DataFrame, key: str, n: int, verification_column: str | None) -> pl.DataFrame:
    """The best-ranked of the N runs by `key` (highest first; a run without a key ranks last; ties go to the lower
    run_id), exactly (`choice_by_position`)."""
    ranked = (pool.filter(pl.col("m") >= n)
              .sort(["pkey", key, "run_id"], descending=[False, True, False], nulls_last=True))
    return choice_by_position(ranked, n, verification_column)


def choice_by_position(ranked: pl.DataFrame, n: int, verification_column: str | None) -> pl.DataFrame:
    """The best-placed of the N runs, each problem's runs given best first in `ranked` (problems with at least N
    runs), exactly: P(position i is chosen) = C(M-1-i, N-1) / C(M, N), which holds for any fixed total order of a
    problem's pool. Only the chosen run is executed; `verification_column` holds each run's verification cost
    (every drawn run is verified)."""
    eligible = ranked.with_columns(position=pl.int_range(pl.len()).over("pkey"))
    p = pick_probability(eligible["m"].to_numpy(), eligible["position"].to_numpy(), n)
    cost = pl.col(verification_column).fill_null(0).cast(pl.Float64) if verification_column else pl.lit(0.0)
    return eligible.with_columns(p=pl.Series(p)).group_by(GROUP).agg(
        accuracy=(pl.col("p") * pl.col("correct").cast(pl.Float64)).sum(),
        verification=cost.sum() * n / pl.col("m").first(),
        execution=(pl.col("p") * pl.col("exec_tokens")).sum())


def candidate_set_members(pool: pl.DataFrame, n: int, settings: EvaluationSettings, stream: int = 0) -> pl.DataFrame:
    """The candidate sets of every problem with at least N runs: one row per (problem, set, slot) with the run in
    that slot and what the set-based choices read: `vote` numbers the pool's answers (equal answers, equal
    numbers; null without an answer). Every possible set when there are at most `max_enumerate`, else `draws`
    seeded sets."""
    sizes = pool.filter(pl.col("m") >= n).group_by("pkey").agg(pl.col("m").first()).sort("pkey")
    frames = []
    for (m,), group in sizes.group_by("m", maintain_order=True):
        sets = candidate_sets(m, n, settings.draws, settings.max_enumerate, settings.seed, group.height, stream)
        groups, per_group, _ = sets.shape
        frames.append(pl.DataFrame({
            "pkey": np.repeat(group["pkey"].to_numpy(), per_group * n),
            "set_id": np.tile(np.repeat(np.arange(per_group), n), groups),
            "slot": np.tile(np.arange(n), groups * per_group),
            "idx": sets.reshape(-1).astype(np.int64),
        }))
    if not frames:
        return pl.DataFrame(schema={"pkey": pl.Int64, "set_id": pl.Int64, "slot": pl.Int64, "idx": pl.Int64})
    members = pl.concat(frames).with_columns(pl.col("set_id").cast(pl.Int64), pl.col("slot").cast(pl.Int64))
    # numbers only: names and texts stay in the pool (a judge fetches them for the few sets it sees)
    numbered = pool.with_columns(vote=pl.col("answer").rank("dense").cast(pl.Int64))
    wanted = [c for c in MEMBER_COLUMNS if c in numbered.columns]
    return members.join(numbered.select("pkey", "idx", *wanted), on=["pkey", "idx"])


def per_problem(chosen: pl.DataFrame, members: pl.DataFrame, n: int, verification: pl.Expr) -> pl.DataFrame:
    """Mean correctness of the chosen runs over each problem's sets; all N runs are executed."""
    accuracy = chosen.group_by("pkey").agg(accuracy=pl.col("correct").cast(pl.Float64).mean())
    costs = members.group_by("pkey").agg(
        execution=pl.col("exec_tokens").cast(pl.Float64).mean() * n, verification=verification)
    return accuracy.join(costs, on="pkey").select(SET_RESULT_COLUMNS)


def judged(members: pl.DataFrame, verdicts: pl.DataFrame) -> pl.DataFrame:
    """The candidate an LLM judge named, over the judged sets (`verdicts`: pkey, set_id, slot, tokens: every call
    the set took); `execution` is the named run's (`sampling_costs` makes it all N for a judge that executes all)."""
    chosen = members.join(verdicts.select("pkey", "set_id", "slot"), on=["pkey", "set_id", "slot"])
    accuracy = chosen.group_by("pkey").agg(
        accuracy=pl.col("correct").cast(pl.Float64).mean(),
        execution=pl.col("exec_tokens").cast(pl.Float64).mean())
    tokens = verdicts.group_by("pkey").agg(verification=pl.col("tokens").cast(pl.Float64).mean())
    return accuracy.join(tokens, on="pkey").select(SET_RESULT_COLUMNS)
