"""The query reward-model training reads: every pair with its question and both plan texts."""

from __future__ import annotations

import duckdb

import sql

# The template: `$imported` takes the optional part that adds the `imported_pairs` relation.
PAIR_TEXTS_SQL = sql.load("pair_texts")


def pair_texts_sql(include_imported: bool) -> str:
    """(pair_id, split, source, question, chosen_plan, rejected_plan) over the relations `pairs` and `runs`,
    plus `imported_pairs` when include_imported."""
    return sql.load("pair_texts", imported=sql.load("pair_texts_imported") if include_imported else "")


def pair_texts(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
    """The pair texts of `con`, with imported pairs when it has an `imported_pairs` table or view.

    The joins carry plan texts: at scale, read it with preserve_insertion_order off (or a memory_limit),
    as export_published does, so DuckDB may spill instead of keeping every text in order."""
    return con.sql(pair_texts_sql(include_imported=relation_exists(con, "imported_pairs")))


def relation_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return con.execute(sql.load("pairs_relation_exists"), {"name": name}).fetchall()[0][0]
