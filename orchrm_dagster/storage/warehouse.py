"""The DuckDB warehouse: views over the Parquet tables. One writer at a time; readers open read-only."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
from filelock import FileLock

import sql
from orchrm_dagster.contract import PARTITIONED_TABLES, WAREHOUSE_TABLES
from orchrm_dagster.storage.root import StorageRoot

_LOCK_WAIT_S = 120.0


def tables_to_refresh(asked: tuple[str, ...] | None, existing: set[str]) -> list[str]:
    asked = asked or tuple(WAREHOUSE_TABLES)
    return list(asked) + [t for t in WAREHOUSE_TABLES if t not in existing and t not in asked]


class WarehouseBusy(RuntimeError):
    pass


class Warehouse:
    def __init__(self, root: StorageRoot, path: str | None = None):
        self.root = root
        if path:
            self.path = str(Path(path).expanduser().resolve())
        elif root.is_local:
            self.path = root.path("warehouse.duckdb")
        else:  # DuckDB needs a local file; the views inside it point at the object store
            self.path = str(Path("~/.cache/orchrm/warehouse.duckdb").expanduser())
        self.write_lock = FileLock(self.path + ".lock", timeout=_LOCK_WAIT_S)

    def _register_filesystem(self, con: duckdb.DuckDBPyConnection) -> None:
        if not self.root.is_local:
            con.register_filesystem(self.root.fs)

    def refresh_views(self, tables: tuple[str, ...] | None = None) -> None:
        """(Re)create the views of `tables` (default all) over the Parquet files that exist now."""
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with self.write_lock, duckdb.connect(self.path) as con:
            self._register_filesystem(con)
            existing = {name for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
            # every view exists from the first write on, so queries never meet a missing table
            for table in tables_to_refresh(tables, existing):
                con.execute(self._view_sql(con, table))

    def scratch_connection(self, tables: tuple[str, ...], **config) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB with the warehouse's views of `tables`, for a step that computes from them
        without holding the warehouse file (so readers and the single writer are never blocked)."""
        con = duckdb.connect(config=config)
        self._register_filesystem(con)
        for table in tables:
            con.execute(self._view_sql(con, table))
        return con

    def _view_sql(self, con: duckdb.DuckDBPyConnection, table: str) -> str:
        partitioned = table in PARTITIONED_TABLES
        glob = self.root.table_glob(table, partitioned)
        has_files = bool(self.root.fs.glob(glob if self.root.is_local else glob.split("://", 1)[1]))
        if has_files:
            return sql.load("create_parquet_view", view=sql.identifier(table), glob=sql.literal(glob))
        empty = con.from_arrow(WAREHOUSE_TABLES[table].empty_table())
        typed_nulls = ", ".join(
            f"CAST(NULL AS {dtype}) AS {sql.identifier(col)}" for col, dtype in zip(empty.columns, empty.dtypes)
        )
        return sql.load("create_empty_view", view=sql.identifier(table), typed_nulls=typed_nulls)

    def connect(self, read_only: bool = True, wait_s: float = 30.0) -> duckdb.DuckDBPyConnection:
        """A connection; read-only ones wait for a running writer to finish instead of failing."""
        if not Path(self.path).exists():
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

    def query(self, statement: str, params: dict | list | None = None):
        with self.connect() as con:
            return con.sql(statement, params=params).to_arrow_table()
