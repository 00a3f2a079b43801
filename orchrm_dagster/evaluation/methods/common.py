"""What several evaluation methods compute alike, as per-problem expectations over the candidate sets.

Every method returns one row per problem (by `GROUP` for the ranked choices, by `pkey` for the set-based ones,
whose members carry numbers only, so that millions of candidate-set rows stay small): `accuracy` (expected
correctness of the run chosen), `verification` (tokens spent choosing) and `execution` (orchestrator + sub-agent
tokens of the runs the method must execute), each the expectation over candidate sets drawn uniformly from the
problem's pool.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from orchrm_dagster.evaluation.expectation import candidate_sets, pick_probability
from orchrm_dagster.evaluation.pools import GROUP
from orchrm_dagster.evaluation.settings import EvaluationSettings

RESULT_COLUMNS = (*GROUP, "accuracy", "verification", "execution")
MEMBER_COLUMNS = ("correct", "vote", "exec_tokens", "verifier_static", "verifier_tokens")
SET_RESULT_COLUMNS = ("pkey", "accuracy", "verification", "execution")


def one_sample(pool: pl.DataFrame) -> pl.DataFrame:
    """One run, no verification: the pool's mean correctness (what every method scores at N=1)."""
    return pool.group_by(GROUP).agg(
        accuracy=pl.col("correct").cast(pl.Float64).mean(), verification=pl.lit(0.0),
        execution=pl.col("exec_tokens").cast(pl.Float64).mean())


def ranked_choice(pool: pl.DataFrame, key: str, n: int, verification_column: str | None) -> pl.DataFrame:
    """The best-ranked of the N runs by `key` (highest first; a run without a key ranks last; ties go to the lower
    run_id), exactly: P(position i is chosen) = C(M-1-i, N-1) / C(M, N). Only the chosen run is executed;
    `verification_column` holds each run's verification cost (every drawn run is verified)."""
    eligible = (pool.filter(pl.col("m") >= n)
                .sort(["pkey", key, "run_id"], descending=[False, True, False], nulls_last=True)
                .with_columns(position=pl.int_range(pl.len()).over("pkey")))
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


def judged(members: pl.DataFrame, verdicts: pl.DataFrame, n: int, execute_all: bool) -> pl.DataFrame:
    """The candidate an LLM judge named, over the judged sets (`verdicts`: pkey, set_id, slot, tokens)."""
    chosen = members.join(verdicts.select("pkey", "set_id", "slot"), on=["pkey", "set_id", "slot"])
    accuracy = chosen.group_by("pkey").agg(
        accuracy=pl.col("correct").cast(pl.Float64).mean(),
        chosen_exec=pl.col("exec_tokens").cast(pl.Float64).mean())
    tokens = verdicts.group_by("pkey").agg(verification=pl.col("tokens").cast(pl.Float64).mean())
    every = members.group_by("pkey").agg(all_exec=pl.col("exec_tokens").cast(pl.Float64).mean() * n)
    result = accuracy.join(tokens, on="pkey").join(every, on="pkey")
    return result.select("pkey", "accuracy", "verification",
                         execution=pl.col("all_exec") if execute_all else pl.col("chosen_exec"))
