"""Polars lazy frames over the Parquet tables of a storage root (the source of truth), local or on S3."""

from __future__ import annotations

import polars as pl
import pyarrow.dataset as ds
from pyarrow.fs import FSSpecHandler, PyFileSystem

from orchrm_dagster.contract import COLUMN_DEFAULTS, PARTITIONED_TABLES, WAREHOUSE_TABLES
from orchrm_dagster.storage.root import StorageRoot


def table_files(root: StorageRoot, table: str) -> list[str]:
    """The Parquet files of `table` now (every partition's parts, or the single file)."""
    if table in PARTITIONED_TABLES:
        return sorted(part for batch in root.batch_ids(table) for part in root.batch_files(table, batch))
    path = root.table_file(table)
    return [path] if root.exists(path) else []


def scan_table(root: StorageRoot, table: str) -> pl.LazyFrame:
    """`table` as a lazy frame with its contract schema: files written before a column existed read it as null (or
    as its default, contract.COLUMN_DEFAULTS), and a table without files yet is an empty frame of the right types."""
    frame = scan_files(root, table_files(root, table), WAREHOUSE_TABLES[table])
    defaults = COLUMN_DEFAULTS.get(table, {})
    return frame.with_columns(pl.col(c).fill_null(v) for c, v in defaults.items()) if defaults else frame


def scan_files(root: StorageRoot, files: list[str], schema) -> pl.LazyFrame:
    polars_schema = pl.from_arrow(schema.empty_table()).schema
    if not files:
        return pl.LazyFrame(schema=polars_schema)
    if root.is_local:  # paths are taken literally (glob=False): a root may hold '[' or '*' in its name
        return pl.scan_parquet(files, glob=False, schema=polars_schema, missing_columns="insert",
                               extra_columns="ignore")
    dataset = ds.dataset(files, schema=schema, format="parquet", filesystem=PyFileSystem(FSSpecHandler(root.fs)))
    return pl.scan_pyarrow_dataset(dataset)
