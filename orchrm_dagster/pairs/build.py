"""Build the win-lose plan pairs of every problem from the `runs` and `labels` relations (DuckDB SQL).

Steps (sql/pairs_*.sql): one row per (problem, plan_hash) with the run standing for it on each side of each
source; per problem, its candidate pairs streamed into counts and the pairs its caps keep; the global source
mix; the split; one Parquet file. Only ids, kinds, labels and plan hashes are read: plan texts never enter
a join, so memory does not grow with plan length.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb
import pyarrow as pa

import sql
from orchrm_dagster.pairs.rules import SOURCES, SPLITS, PairRules, seed_mask

PAIRS = pa.schema(
    [
        ("pair_id", pa.string()),
        ("problem_id", pa.string()),
        ("chosen_run_id", pa.string()),
        ("rejected_run_id", pa.string()),
        ("chosen_plan_hash", pa.string()),
        ("rejected_plan_hash", pa.string()),
        ("source", pa.string()),
        ("split", pa.string()),
    ]
)

_TEMP_TABLES = ("pairs_plans", "pairs_per_problem")


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

    @property
    def by_source(self) -> dict[str, int]:
        return {source: sum(splits.values()) for source, splits in self.pairs.items()}

    @property
    def total(self) -> int:
        return sum(self.by_source.values())


def build_pairs(con: duckdb.DuckDBPyConnection, rules: PairRules, out_path: str, *,
                memory_limit: str | None = None) -> PairStats:
    """Write the pairs of `rules` from the relations `runs` and `labels` of `con` to one Parquet file.

    preserve_insertion_order is off during the build, and `memory_limit` (e.g. "2GB") applies if given; both
    are restored afterwards (DuckDB reports a memory limit to 0.1 GiB, so give connections that build
    repeatedly their limit at connect time instead). The temporary tables the build makes are dropped."""
    started = time.perf_counter()
    with duckdb_settings(con, build_settings(memory_limit)), _temp_tables(con):
        con.execute(sql.load("pairs_plans", seed_mask=str(seed_mask(rules.seed))))
        problems, identical = con.execute(sql.load("pairs_plan_counts")).fetchall()[0]
        con.execute(sql.load("pairs_per_problem", specialized_cap=str(rules.specialized_per_problem),
                             correct_cap=str(rules.correct_per_problem)))
        counts = con.execute(sql.load("pairs_per_problem_counts")).fetchall()[0]
        candidates, conflicts, after_caps = counts[0:2], counts[2], counts[3:5]
        _write(con, rules, rules.mix_quotas(*after_caps), out_path)
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
    )


def build_settings(memory_limit: str | None) -> dict[str, str]:
    return {"preserve_insertion_order": "false"} | ({"memory_limit": memory_limit} if memory_limit else {})


def _write(con: duckdb.DuckDBPyConnection, rules: PairRules, quotas: tuple[int, int], out_path: str) -> None:
    max_cap = max(rules.specialized_per_problem, rules.correct_per_problem)
    levels = con.execute(sql.load("pairs_level_counts", max_cap=str(max_cap))).fetchall()
    specialized_boundary, specialized_at_boundary = _boundary([level[1] for level in levels], quotas[0])
    correct_boundary, correct_at_boundary = _boundary([level[2] for level in levels], quotas[1])
    con.execute(sql.load(
        "pairs_write",
        specialized_boundary=str(specialized_boundary), specialized_at_boundary=str(specialized_at_boundary),
        correct_boundary=str(correct_boundary), correct_at_boundary=str(correct_at_boundary),
        validation_cutoff=str(rules.validation_cutoff), out=sql.literal(out_path)))


def _boundary(pairs_at_place: list[int], quota: int) -> tuple[int, int]:
    """Where the mix cuts a source: the first place within problems (1 = each problem's first kept pair) that
    does not fit whole in the quota, and how many of its pairs do; places before it are kept whole."""
    kept = 0
    for place, count in enumerate(pairs_at_place, start=1):
        if kept + count > quota:
            return place, quota - kept
        kept += count
    return len(pairs_at_place) + 1, 0


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
def duckdb_settings(con: duckdb.DuckDBPyConnection, values: dict[str, str]) -> Iterator[None]:
    """Set DuckDB settings for the duration of a block, then restore the previous values."""
    current = sql.load("pairs_current_setting")
    saved = {name: con.execute(current, {"setting": name}).fetchall()[0][0] for name in values}
    try:
        for name, value in values.items():
            con.execute(sql.load("pairs_setting", setting=name, value=sql.literal(value)))
        yield
    finally:
        for name, value in saved.items():
            con.execute(sql.load("pairs_setting", setting=name, value=sql.literal(str(value))))


@contextmanager
def _temp_tables(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    try:
        yield
    finally:
        for table in _TEMP_TABLES:
            con.execute(sql.load("pairs_drop_temp", table=table))
