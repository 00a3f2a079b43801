"""Writing Parquet row by row without holding a whole table in memory."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


class ParquetSink:
    """Appends rows (tuples in schema order) to one Parquet file, a row group every `rows_per_group` rows."""

    def __init__(self, path: str, schema: pa.Schema, rows_per_group: int):
        self.schema = schema
        self.rows_per_group = rows_per_group
        self.rows: list[tuple] = []
        self.written = 0
        self.writer = pq.ParquetWriter(path, schema, compression="zstd")

    def append(self, row: tuple) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.rows_per_group:
            self.flush()

    def append_mapping(self, row: dict[str, Any]) -> None:
        self.append(tuple(row.get(name) for name in self.schema.names))

    def flush(self) -> None:
        if not self.rows:
            return
        columns = zip(*self.rows)
        arrays = [pa.array(column, type=field.type) for column, field in zip(columns, self.schema)]
        self.writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))
        self.written += len(self.rows)
        self.rows = []

    def close(self) -> None:
        self.flush()
        self.writer.close()

    def __enter__(self) -> ParquetSink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
