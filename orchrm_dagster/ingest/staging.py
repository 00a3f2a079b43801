"""Stage a worker's valid records into Parquet a chunk at a time, each chunk's columns checked whole against what
the tables can store (contract.storable): a value out of range sends its own record to quarantine, nothing else."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract import QUARANTINE, RUNS, SUBAGENT_CALLS, RunRecord, UnstorableValue, storable_column
from orchrm_dagster.ingest.flatten import RUN_COLUMN_FIELDS, call_rows, run_row
from orchrm_dagster.ingest.reader import SourceLine
from orchrm_dagster.ingest.settings import IngestSettings
from orchrm_dagster.ingest.validate import Rejection, unstorable
from orchrm_dagster.storage import ParquetSink

_RUN_ID = RUNS.names.index("run_id")
_CALL_INDEX = SUBAGENT_CALLS.names.index("call_index")


class RecordStager:
    def __init__(self, runs_path: str, calls_path: str, quarantine_path: str, batch_id: str, source_name: str,
                 settings: IngestSettings):
        self.batch_id, self.source_name, self.settings = batch_id, source_name, settings
        self.runs = pq.ParquetWriter(runs_path, RUNS, compression="zstd")
        self.calls = pq.ParquetWriter(calls_path, SUBAGENT_CALLS, compression="zstd")
        self.quarantine = ParquetSink(quarantine_path, QUARANTINE, settings.rows_per_group)
        self._clear()

    def _clear(self) -> None:
        self.lines: list[SourceLine] = []
        self.run_rows: list[tuple] = []
        self.call_rows: list[tuple] = []
        self.call_owner: list[int] = []  # the chunk row of each call row's record

    def add(self, line: SourceLine, record: RunRecord) -> None:
        try:
            run = run_row(record, self.batch_id, self.source_name, line.line_number)
            calls = call_rows(record, self.batch_id, line.line_number)
        except UnstorableValue as err:
            self.reject(unstorable(line, err.field, err.reason, self.settings, record.run_id))
            return
        self.call_owner.extend([len(self.run_rows)] * len(calls))
        self.lines.append(line)
        self.run_rows.append(run)
        self.call_rows.extend(calls)
        if len(self.run_rows) >= self.settings.rows_per_group:
            self.flush()

    def reject(self, rejection: Rejection) -> None:
        self.quarantine.append_mapping(quarantine_row(rejection, self.batch_id, self.source_name))

    def flush(self) -> None:
        if not self.run_rows:
            return
        runs, bad = _checked_table(self.run_rows, RUNS, lambda name, row: RUN_COLUMN_FIELDS.get(name, name))
        calls, bad_calls = _checked_table(
            self.call_rows, SUBAGENT_CALLS,
            lambda name, row: f"subagents[{self.call_rows[row][_CALL_INDEX]}].{name}")
        for call, problem in bad_calls.items():
            bad.setdefault(self.call_owner[call], problem)
        if bad:
            runs = runs.filter(pa.array([row not in bad for row in range(len(self.run_rows))], pa.bool_()))
            calls = calls.filter(pa.array([owner not in bad for owner in self.call_owner], pa.bool_()))
            for row, (field, reason) in sorted(bad.items()):
                self.reject(unstorable(self.lines[row], field, reason, self.settings, self.run_rows[row][_RUN_ID]))
        self.runs.write_table(runs)
        self.calls.write_table(calls)
        self._clear()

    def close(self) -> None:
        self.flush()
        self.runs.close()
        self.calls.close()
        self.quarantine.close()


def _checked_table(rows: list[tuple], schema: pa.Schema, field_of) -> tuple[pa.Table, dict[int, tuple[str, str]]]:
    """The rows as a table of `schema`, and {row: (field, why)} for the rows holding a value it cannot store."""
    columns = list(zip(*rows)) if rows else [()] * len(schema)
    arrays, bad = [], {}
    for values, column in zip(columns, schema):
        array, problems = storable_column(values, column.type)
        arrays.append(array)
        for row, reason in problems.items():
            bad.setdefault(row, (field_of(column.name, row), reason))
    return pa.Table.from_arrays(arrays, schema=schema), bad


def quarantine_row(rejection: Rejection, batch_id: str, source_name: str) -> dict:
    return {
        "batch_id": batch_id,
        "source_file": source_name,
        "line_number": rejection.line_number,
        "run_id": rejection.run_id,
        "field": rejection.field,
        "kind": rejection.kind.value,
        "reason": f"{source_name}:{rejection.line_number}: {rejection.reason}",
        "raw": rejection.raw,
        "raw_truncated": rejection.raw_truncated,
    }
