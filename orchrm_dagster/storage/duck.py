"""DuckDB connections and settings shared by every step that computes with DuckDB."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

import sql


def bulk_settings(memory_limit: str | None = None) -> dict[str, str]:
    """Settings for a step over large tables: row order is not kept (keeping it holds rows in memory), and
    DuckDB spills to disk past `memory_limit` when one is given."""
    return {"preserve_insertion_order": "false"} | ({"memory_limit": memory_limit} if memory_limit else {})


@contextmanager
def duckdb_settings(con: duckdb.DuckDBPyConnection, values: dict[str, str]) -> Iterator[None]:
    """Set DuckDB settings for the duration of a block, then restore the previous values."""
    current = sql.load("current_setting")
    saved = {name: con.execute(current, {"setting": name}).fetchall()[0][0] for name in values}
    try:
        for name, value in values.items():
            con.execute(sql.load("set_setting", setting=name, value=sql.literal(value)))
        yield
    finally:
        for name, value in saved.items():
            con.execute(sql.load("set_setting", setting=name, value=sql.literal(str(value))))
