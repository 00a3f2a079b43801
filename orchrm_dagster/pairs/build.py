"""Build the win-lose plan pairs of every problem from the `runs` and `labels` relations.

Steps: the side of specialized-over-base pairs each policy of the runs stands on (`rules.policy_side`); one row
per (problem, environment, plan_hash) with the run standing for it on each side of each source (DuckDB,
sql/pairs_plans.sql); per problem, its candidate pairs (two plans of one environment) streamed into counts and the
pairs its caps keep (DuckDB, sql/pairs_per_problem.sql: set-based, the square of a problem's plans never
materialized); the global source mix
over the capped pairs (Polars: a sort and a per-source quota); the split and one Parquet file (DuckDB). Only ids,
kinds, labels and plan hashes are read: plan texts never enter a join, so memory does not grow with plan length.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb
import polars as pl
import pyarrow as pa

import sql
from orchrm_dagster.contract import DEFAULT_ENVIRONMENT
from orchrm_dagster.pairs.rules import SOURCES, SPLITS, PairRules, policy_side, seed_mask
from orchrm_dagster.storage import bulk_settings, duckdb_settings

_TEMP_TABLES = ("pairs_plans", "pairs_per_problem")


@dataclass(frozen=True)
class PolicyRuns:
    """A policy of the runs, how many runs it has, and the side of specialized-over-base pairs they stand on."""

    kind: str | None
    name: str | None
    runs: int
    side: str  # "specialized", "base", or "neither" (correct-over-incorrect pairs only)


@dataclass(frozen=True)
class PairStats:
    pairs: dict[str, dict[str, int]]  # source -> split -> pairs written
    candidates: dict[str, int]  # source -> plan pairs before the caps, conflicts removed (sources disjoint)
    after_caps: dict[str, int]  # source -> pairs left by the per-problem caps, before the mix
    conflicts: int  # unordered plan pairs preferred both ways; all their candidates were dropped
    identical_plans_skipped: int  # (problem, plan, source) where the same plan stood on both sides
    problems: int  # problems with at least one usable run
    problems_with_pairs: int
    seconds: float
    policies: tuple[PolicyRuns, ...] = ()

    @property
    def by_source(self) -> dict[str, int]:
        return {source: sum(splits.values()) for source, splits in self.pairs.items()}

    @property
    def total(self) -> int:
        return sum(self.by_source.values())


def build_pairs(con: duckdb.DuckDBPyConnection, rules: PairRules, out_path: str, *,
                verified_checkpoints: Collection[str] = (), memory_limit: str | None = None) -> PairStats:
    """Write the pairs of `rules` from the relations `runs` and `labels` of `con` to one Parquet file.
    `verified_checkpoints`: the checkpoint policies this root promoted on measured held-out accuracy, whose runs
    win specialized-over-base pairs (`policy_side`).

    preserve_insertion_order is off during the build, and `memory_limit` (e.g. "2GB") applies if given; both
    are restored afterwards (DuckDB reports a memory limit to 0.1 GiB, so give connections that build
    repeatedly their limit at connect time instead). The temporary tables the build makes are dropped."""
    started = time.perf_counter()
    with duckdb_settings(con, bulk_settings(memory_limit)), _temp_tables(con):
        policies = _policy_sides(con, verified_checkpoints)
        con.register("policy_sides", _sides_table(policies))
        try:
            con.execute(sql.load("pairs_plans", seed_mask=str(seed_mask(rules.seed)),
                                 default_environment=sql.literal(DEFAULT_ENVIRONMENT)))
        finally:
            con.unregister("policy_sides")
        problems, identical = con.execute(sql.load("pairs_plan_counts")).fetchall()[0]
        con.execute(sql.load("pairs_per_problem", specialized_cap=str(rules.specialized_per_problem),
                             correct_cap=str(rules.correct_per_problem)))
        counts = con.execute(sql.load("pairs_per_problem_counts")).fetchall()[0]
        candidates, conflicts, after_caps = counts[0:2], counts[2], counts[3:5]
        mixed = mix_sources(con.sql(sql.load("pairs_capped")).pl(), dict(zip(SOURCES, rules.mix_quotas(*after_caps))))
        con.register("mixed", mixed)
        try:
            con.execute(sql.load("pairs_write", validation_cutoff=str(rules.validation_cutoff),
                                 default_environment=sql.literal(DEFAULT_ENVIRONMENT), out=sql.literal(out_path)))
        finally:
            con.unregister("mixed")
    pairs, problems_with_pairs = _written_counts(con, out_path)
    return PairStats(
        pairs=pairs,
        candidates=dict(zip(SOURCES, candidates)),
        after_caps=dict(zip(SOURCES, after_caps)),
        conflicts=conflicts,
        identical_plans_skipped=identical,
        problems=problems,
        problems_with_pairs=problems_with_pairs,
        seconds=time.perf_counter() - started,
        policies=tuple(policies),
    )


def _policy_sides(con: duckdb.DuckDBPyConnection, verified_checkpoints: Collection[str]) -> list[PolicyRuns]:
    verified = frozenset(verified_checkpoints)
    found = []
    for kind, name, runs in con.execute(sql.load("pairs_policies")).fetchall():
        specialized, base = policy_side(kind, name, verified)
        found.append(PolicyRuns(kind, name, runs, "specialized" if specialized else "base" if base else "neither"))
    return found


def _sides_table(policies: list[PolicyRuns]) -> pa.Table:
    return pa.table({"policy_kind": pa.array([p.kind for p in policies], pa.string()),
                     "policy_name": pa.array([p.name for p in policies], pa.string()),
                     "specialized": pa.array([p.side == "specialized" for p in policies], pa.bool_()),
                     "base": pa.array([p.side == "base" for p in policies], pa.bool_())})


def mix_sources(capped: pl.DataFrame, quotas: dict[str, int]) -> pl.DataFrame:
    """The capped pairs the mix keeps: `quotas[source]` pairs of each source, taken in order of their place
    within their problem (every problem's first pair before any problem's second, so a cut source still spans
    its problems), then of their pair key (sample rank, chosen and rejected plan index) and problem."""
    order = ["source", "place", "sample_rank", "chosen_index", "rejected_index", "problem_id"]
    quota = pl.col("source").replace_strict(quotas, return_dtype=pl.Int64)
    return (capped.sort(order)
            .filter(pl.int_range(pl.len()).over("source") < quota)
            .select("problem_id", "source", "chosen_index", "rejected_index"))


def _written_counts(con: duckdb.DuckDBPyConnection, path: str) -> tuple[dict[str, dict[str, int]], int]:
    pairs = {source: dict.fromkeys(SPLITS, 0) for source in SOURCES}
    problems_with_pairs = 0
    for source, split, count, problems in con.execute(sql.load("pairs_written_counts"), {"path": path}).fetchall():
        if source is None:
            problems_with_pairs = problems
        else:
            pairs[source][split] = count
    return pairs, problems_with_pairs


@contextmanager
def _temp_tables(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    try:
        yield
    finally:
        for table in _TEMP_TABLES:
            con.execute(sql.load("pairs_drop_temp", table=table))
