"""Stream records out of a batch file without loading it whole."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

_READ_BUFFER = 8 << 20
_SKIP_CHUNK = 1 << 20


@dataclass(frozen=True)
class SourceLine:
    """One line of a JSONL batch, or one row of a Parquet batch (`record` set instead of `data`)."""

    line_number: int
    data: bytes | None = None
    record: dict[str, Any] | None = None
    oversize_bytes: int | None = None  # the line was longer than the limit; its text is truncated to `data`


def iter_jsonl(stream: io.RawIOBase | io.BufferedIOBase, max_record_bytes: int) -> Iterator[SourceLine]:
    reader = stream if isinstance(stream, io.BufferedReader) else io.BufferedReader(stream, _READ_BUFFER)
    line_number = 0
    while True:
        line = reader.readline(max_record_bytes + 1)
        if not line:
            return
        line_number += 1
        if len(line) > max_record_bytes and not line.endswith(b"\n"):
            total = len(line) + _skip_rest_of_line(reader)
            yield SourceLine(line_number, data=line[:max_record_bytes], oversize_bytes=total)
            continue
        if line.strip():
            yield SourceLine(line_number, data=line)


def _skip_rest_of_line(reader: io.BufferedReader) -> int:
    skipped = 0
    while True:
        chunk = reader.readline(_SKIP_CHUNK)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped


def iter_parquet(stream: Any, batch_rows: int = 4096) -> Iterator[SourceLine]:
    """Parquet rows as records; `line_number` is the 1-based row number."""
    row = 0
    for batch in pq.ParquetFile(stream).iter_batches(batch_size=batch_rows):
        for record in batch.to_pylist():
            row += 1
            yield SourceLine(row, record={k: v for k, v in record.items() if v is not None})
