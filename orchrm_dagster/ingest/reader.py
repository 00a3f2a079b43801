"""Stream records out of a batch file without loading it whole."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

_READ_BUFFER = 8 << 20
_SKIP_CHUNK = 1 << 20
_UTF8_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class SourceLine:
    """One line of a JSONL batch, or one row of a Parquet batch (`record` set instead of `data`)."""

    line_number: int
    data: bytes | None = None
    record: dict[str, Any] | None = None
    oversize_bytes: int | None = None  # the line was longer than the limit; its text is truncated to `data`


def iter_jsonl(stream, max_record_bytes: int, first_line: int = 1, byte_budget: int | None = None
               ) -> Iterator[SourceLine]:
    """Lines of a JSONL stream from its current position; with `byte_budget`, only the lines that start
    within that many bytes (a worker's share of a large file)."""
    reader = stream if isinstance(stream, io.BufferedReader) else io.BufferedReader(stream, _READ_BUFFER)
    line_number = first_line - 1
    consumed = 0
    while byte_budget is None or consumed < byte_budget:
        line = reader.readline(max_record_bytes + 1)
        if not line:
            return
        line_number += 1
        consumed += len(line)
        if len(line) > max_record_bytes and not line.endswith(b"\n"):
            rest = _skip_rest_of_line(reader)
            consumed += rest
            yield SourceLine(line_number, data=line[:max_record_bytes], oversize_bytes=len(line) + rest)
            continue
        if line_number == 1 and line.startswith(_UTF8_BOM):  # written by some editors and exporters: not JSON
            line = line[len(_UTF8_BOM):]
        if line.strip():
            yield SourceLine(line_number, data=line)


def line_aligned_ranges(stream, size: int, parts: int) -> list[tuple[int, int]]:
    """Split [0, size) into up to `parts` byte ranges that each begin at the start of a line."""
    starts = [0]
    for i in range(1, parts):
        stream.seek(size * i // parts)
        stream.readline()
        position = stream.tell()
        if starts[-1] < position < size:
            starts.append(position)
    return [(start, end) for start, end in zip(starts, [*starts[1:], size])]


def count_newlines(stream, start: int, end: int) -> int:
    stream.seek(start)
    count, remaining = 0, end - start
    while remaining > 0:
        chunk = stream.read(min(_READ_BUFFER, remaining))
        if not chunk:
            break
        count += chunk.count(b"\n")
        remaining -= len(chunk)
    return count


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
