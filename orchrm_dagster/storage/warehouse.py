"""The DuckDB warehouse: views over the Parquet tables. One writer at a time; readers open read-only."""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

import duckdb
from filelock import FileLock

import sql
from orchrm_dagster.contract import COLUMN_DEFAULTS, RM_TRAINING_PAIRS, RM_TRAINING_PAIRS_FILE, WAREHOUSE_TABLES
from orchrm_dagster.storage.checkpoints import MANIFEST
from orchrm_dagster.storage.root import StorageRoot, root_cache_dir

_LOCK_WAIT_S = 120.0

# The warehouse file is written in DuckDB 1.0's storage format (header version 64), which every DuckDB from 1.0 on
# reads, the `duckdb` CLI on the package index included (1.5 reads 64-68; DuckDB 2.0's own format is newer).
# It holds only views, so a file in any other format is simply replaced by the next refresh.
WAREHOUSE_STORAGE_VERSION = "v1.0.0"


# DuckDB takes '?' in a database file's path for the start of a query string (its WAL path comes out wrong); a root
# whose path holds one keeps its warehouse file in the machine's cache instead.
_MISREAD_IN_DB_PATHS = "?#"


class WarehouseBusy(RuntimeError):
    pass


class NotAReadStatement(ValueError):
    """`orchrm query` runs one SELECT (or EXPLAIN) and nothing that writes, attaches, installs or sets."""


READ_STATEMENTS = (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN)


def check_read_only(statement: str) -> None:
    """Raises NotAReadStatement unless `statement` is exactly one SELECT or EXPLAIN."""
    try:
        statements = duckdb.extract_statements(statement)
    except duckdb.Error as err:
        raise NotAReadStatement(str(err)) from err
    if len(statements) != 1:
        raise NotAReadStatement(f"one statement at a time, got {len(statements)}")
    kind = statements[0].type
    if kind not in READ_STATEMENTS:
        raise NotAReadStatement(f"queries are read-only: only SELECT or EXPLAIN runs; this is a {kind.name} statement")


class Warehouse:
    def __init__(self, root: StorageRoot, path: str | None = None):
        self.root = root
        if path:
            self.path = str(Path(path).expanduser().resolve())
        elif root.is_local and not any(c in root.base for c in _MISREAD_IN_DB_PATHS):
            self.path = root.path("warehouse.duckdb")
        else:  # DuckDB needs a local file whose path it reads literally; the views in it point at the root
            self.path = str(root_cache_dir(root.url, "warehouse").with_suffix(".duckdb"))
        self.write_lock = FileLock(self.path + ".lock", timeout=_LOCK_WAIT_S)

    def _register_filesystem(self, con: duckdb.DuckDBPyConnection) -> None:
        if not self.root.is_local:
            con.register_filesystem(self.root.fs)

    def refresh_views(self, tables: tuple[str, ...] | None = None) -> None:
        """Rebuild every view over the Parquet files that exist now (`tables` names what changed; all views are
        rebuilt, which costs a file listing each). The views go into a new file that replaces the old one in a
        rename, so an open reader (a `duckdb -readonly` shell, a long query) never blocks the writer: it keeps
        reading the file it opened, and the next connection sees the new views."""
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        building = f"{self.path}.{uuid.uuid4().hex}.building"
        with self.write_lock:
            try:
                compatible = {"storage_compatibility_version": WAREHOUSE_STORAGE_VERSION}
                with duckdb.connect(building, config=compatible) as con:
                    self._register_filesystem(con)
                    for table in WAREHOUSE_TABLES:
                        con.execute(self._view_sql(con, table))
                    con.execute(self._files_view_sql(con, "rm_training_pairs", self._rm_training_pairs_files(),
                                                     RM_TRAINING_PAIRS))
                os.replace(building, self.path)
            finally:
                for leftover in (building, building + ".wal"):
                    if os.path.exists(leftover):
                        os.remove(leftover)

    def scratch_connection(self, tables: tuple[str, ...], **config) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB with the warehouse's views of `tables`, for a step that computes from them
        without holding the warehouse file (so readers and the single writer are never blocked)."""
        con = duckdb.connect(config=config)
        self._register_filesystem(con)
        for table in tables:
            con.execute(self._view_sql(con, table))
        return con

    def _view_sql(self, con: duckdb.DuckDBPyConnection, table: str) -> str:
        """A view over the table's files, listed (never globbed: a root may hold '[' or '*')."""
        from orchrm_dagster.storage.frames import table_files  # Polars: only a writer needs it

        files = [self.root.to_uri(path) for path in table_files(self.root, table)]
        return self._files_view_sql(con, table, files, WAREHOUSE_TABLES[table])

    def _rm_training_pairs_files(self) -> list[str]:
        """The training pairs saved in each reward-model version's folder (checkpoints/rm/v<N>/), listed."""
        folder = self.root.path("checkpoints", "rm")
        self.root.fs.invalidate_cache(folder)  # a version uploaded a moment ago is listed
        try:
            entries = self.root.fs.ls(folder, detail=True)
        except FileNotFoundError:
            return []
        versions = sorted(e["name"].rstrip("/") for e in entries if e["type"] == "directory"
                          and re.fullmatch(r"v\d+", e["name"].rstrip("/").rsplit("/", 1)[-1]))
        # a finished version's (its manifest is there): an upload cut short leaves its pairs without one
        return [self.root.to_uri(f"{v}/{RM_TRAINING_PAIRS_FILE}") for v in versions
                if self.root.fs.exists(f"{v}/{MANIFEST}") and self.root.fs.exists(f"{v}/{RM_TRAINING_PAIRS_FILE}")]

    def _files_view_sql(self, con: duckdb.DuckDBPyConnection, view: str, files: list[str], schema) -> str:
        """A view over `files` with `schema`'s columns (a file without a column reads it as NULL, or as the column's
        default in contract.COLUMN_DEFAULTS)."""
        empty = con.from_arrow(schema.empty_table())
        typed_nulls = ", ".join(
            f"CAST(NULL AS {dtype}) AS {sql.identifier(col)}" for col, dtype in zip(empty.columns, empty.dtypes)
        )
        defaults = COLUMN_DEFAULTS.get(view, {})
        filled = ", ".join(f"coalesce({sql.identifier(c)}, {sql.literal(v)}) AS {sql.identifier(c)}"
                           for c, v in defaults.items())
        replace = f"REPLACE ({filled})" if filled else ""
        if files:
            return sql.load("create_parquet_view", view=sql.identifier(view), files=sql.list_literal(files),
                            typed_nulls=typed_nulls, defaults=replace)
        return sql.load("create_empty_view", view=sql.identifier(view), typed_nulls=typed_nulls)

    def exists(self) -> bool:
        return Path(self.path).exists()

    def connect(self, read_only: bool = True, wait_s: float = 30.0) -> duckdb.DuckDBPyConnection:
        """A connection; read-only ones wait for a running writer to finish instead of failing."""
        if not self.exists():
            raise FileNotFoundError(
                f"no warehouse at {self.path} yet: ingest a batch first (orchrm ingest FILE) "
                f"or materialize any asset"
            )
        deadline = time.monotonic() + wait_s
        while True:
            try:
                con = duckdb.connect(self.path, read_only=read_only)
                self._register_filesystem(con)
                return con
            except duckdb.IOException as err:
                if "lock" not in str(err).lower() or time.monotonic() > deadline:
                    raise WarehouseBusy(f"{self.path}: {err}") from err
                time.sleep(0.2)

    def connect_sandboxed(self) -> duckdb.DuckDBPyConnection:
        """A read-only connection for statements a person types (`orchrm query`): it reads the storage root's files
        and nothing else (no other path, no extension install or load), and its settings are locked."""
        con = self.connect(read_only=True)
        con.execute(f"SET allowed_directories = {sql.list_literal([self.root.to_uri(self.root.base) + '/'])}")
        for setting in ("SET autoinstall_known_extensions = false", "SET autoload_known_extensions = false",
                        "SET enable_external_access = false", "SET lock_configuration = true"):
            con.execute(setting)
        return con

    def query(self, statement: str, params: dict | list | None = None):
        with self.connect() as con:
            return con.sql(statement, params=params).to_arrow_table()
