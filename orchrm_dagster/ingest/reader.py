"""Stream records out of a batch file without loading it whole."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract import type_name

_BLOCK = 8 << 20  # what one read asks for: whole lines are split a block at a time
_BUFFER = 1 << 20  # the reader's own buffer: a block read past it goes straight to the stream, so a chunk's last
# read fetches at most this much beyond the chunk (a remote stream fetches just what is asked: batch._ranged_stream)
_SKIP_CHUNK = 1 << 20
_UTF8_BOM = b"\xef\xbb\xbf"
_CONVERSION_ERRORS = (pa.ArrowException, OverflowError, ValueError, UnicodeError)


@dataclass(slots=True)  # not frozen: a frozen dataclass is built three times slower, and this is built per line
class SourceLine:
    """One line of a JSONL batch (its bytes without the newline), or one row of a Parquet batch (`record` set
    instead of `data`)."""

    line_number: int
    data: bytes | None = None
    record: dict[str, Any] | None = None
    oversize_bytes: int | None = None  # the line was longer than the limit; its text is truncated to `data`
    unreadable: tuple[str, str] | None = None  # (column, why): a Parquet value Python cannot hold (a year past 9999)


def iter_jsonl(stream, max_record_bytes: int, first_line: int = 1, byte_budget: int | None = None
               ) -> Iterator[SourceLine]:
    """Lines of a JSONL stream from its current position; with `byte_budget`, only the lines that start
    within that many bytes (a worker's share of a large file). Whole blocks are split at once; a line that no
    block holds whole (longer than a block, or the last, unterminated one) is read on its own."""
    reader = stream if isinstance(stream, io.BufferedReader) else io.BufferedReader(stream, _BUFFER)
    line_number = first_line - 1
    consumed = 0
    while byte_budget is None or consumed < byte_budget:
        block = reader.read(_BLOCK if byte_budget is None else min(_BLOCK, byte_budget - consumed))
        if not block:
            return
        end = block.rfind(b"\n") + 1
        if end == 0:  # no whole line here
            reader.seek(-len(block), io.SEEK_CUR)
            line_number += 1
            line, size = _one_line(reader, max_record_bytes, line_number)
            consumed += size
            if line is not None:
                yield line
            continue
        if end < len(block):
            reader.seek(end - len(block), io.SEEK_CUR)
        consumed += end
        for data in block[:end - 1].split(b"\n"):
            line_number += 1
            line = _source_line(data, len(data) + 1, max_record_bytes, line_number)
            if line is not None:
                yield line


def _one_line(reader: io.BufferedReader, max_record_bytes: int, line_number: int) -> tuple[SourceLine | None, int]:
    """The line at the reader's position, read without holding more than `max_record_bytes` of it, and its size."""
    data = reader.readline(max_record_bytes + 1)
    size = len(data)
    if len(data) > max_record_bytes and not data.endswith(b"\n"):
        size += _skip_rest_of_line(reader)
    return _source_line(data.removesuffix(b"\n"), size, max_record_bytes, line_number), size


def _source_line(data: bytes, size: int, max_record_bytes: int, line_number: int) -> SourceLine | None:
    """`data` (a line without its newline, `size` bytes with it) as a SourceLine; None for a blank line."""
    if len(data) > max_record_bytes:
        return SourceLine(line_number, data=data[:max_record_bytes], oversize_bytes=size)
    if line_number == 1 and data.startswith(_UTF8_BOM):  # written by some editors and exporters: not JSON
        data = data[len(_UTF8_BOM):]
    if data[:1].isspace() and not data.strip() or not data:  # strip() copies the line: only for one that may be blank
        return None
    return SourceLine(line_number, data=data)


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
        chunk = stream.read(min(_BLOCK, remaining))
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
    """Parquet rows as records; `line_number` is the 1-based row number. A value that cannot become a Python value
    costs its own row (`unreadable`), not its batch of rows."""
    row = 0
    for batch in pq.ParquetFile(stream).iter_batches(batch_size=batch_rows):
        batch = _timestamps_in_utc(batch)
        try:
            records = batch.to_pylist()
        except _CONVERSION_ERRORS:
            records = [_row_or_problem(batch, i) for i in range(batch.num_rows)]
        for record in records:
            row += 1
            if isinstance(record, tuple):
                column, reason, readable = record
                yield SourceLine(row, record=readable, unreadable=(column, reason))
            else:
                yield SourceLine(row, record={k: v for k, v in record.items() if v is not None})


def _timestamps_in_utc(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Zoned timestamps as UTC (the same instants): the contract normalises to UTC, and an instant near year 1 or
    9999 may have no Python datetime in its own zone (0001-01-01T00:00Z is year 0 at -05:00)."""
    zoned = [i for i, column in enumerate(batch.schema) if pa.types.is_timestamp(column.type) and column.type.tz
             and column.type.tz != "UTC"]
    for i in zoned:
        column = batch.schema.field(i)
        batch = batch.set_column(i, column.with_type(pa.timestamp(column.type.unit, "UTC")),
                                 batch.column(i).cast(pa.timestamp(column.type.unit, "UTC")))
    return batch


def _row_or_problem(batch: pa.RecordBatch, index: int) -> dict | tuple[str, str, dict]:
    row = batch.slice(index, 1)
    try:
        return row.to_pylist()[0]
    except _CONVERSION_ERRORS:
        pass
    readable = {}
    problem = None
    for name, column in zip(row.schema.names, row.columns):
        try:
            readable[name] = column.to_pylist()[0]
        except _CONVERSION_ERRORS as err:
            problem = problem or (name, _unreadable_reason(column, err))
            readable[name] = f"<unreadable {column.type}>"
    return (*(problem or ("record", "the row cannot be read")), readable)


def _unreadable_reason(column: pa.Array, err: Exception) -> str:
    if pa.types.is_timestamp(column.type):  # the storable range's own words (contract.storable)
        return f"{column.cast(pa.int64())[0]} {column.type.unit} from 1970 is outside years 1-9999 once normalised to UTC"
    return f"a {column.type} value Python cannot hold: {type_name(err)}"
