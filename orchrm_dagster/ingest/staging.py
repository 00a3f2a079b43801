"""Stage a worker's valid records into Parquet a chunk at a time, each chunk's columns checked whole against what
the tables can store (contract.storable): a value out of range sends its own record to quarantine, nothing else."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract import QUARANTINE, RUNS, SUBAGENT_CALLS, UnstorableValue, storable_column
from orchrm_dagster.ingest.flatten import RUN_COLUMN_FIELDS, Derived, call_columns, derived_values, run_columns
from orchrm_dagster.ingest.reader import SourceLine
from orchrm_dagster.ingest.settings import IngestSettings
from orchrm_dagster.ingest.validate import Rejection, unstorable
from orchrm_dagster.storage import ParquetSink

# A batch of several files stages each call with its run's file too: a line is (source_file, line_number) there,
# and the table's calls name only the line
KEYED_CALLS = SUBAGENT_CALLS.append(pa.field("source_file", pa.string()))


class RecordStager:
    def __init__(self, runs_path: str, calls_path: str, quarantine_path: str, batch_id: str, source_name: str,
                 settings: IngestSettings, keyed: bool = False):
        self.batch_id, self.source_name, self.settings, self.keyed = batch_id, source_name, settings, keyed
        self.runs = pq.ParquetWriter(runs_path, RUNS, compression="zstd")
        self.calls = pq.ParquetWriter(calls_path, KEYED_CALLS if keyed else SUBAGENT_CALLS, compression="zstd")
        self.quarantine = ParquetSink(quarantine_path, QUARANTINE, settings.rows_per_group)
        self._clear()

    def begin_source(self, source_name: str) -> None:
        """The records that follow come from `source_name` (another file of the batch)."""
        if source_name != self.source_name:
            self.flush()
            self.source_name = source_name

    def _clear(self) -> None:
        self.lines: list[SourceLine] = []
        self.records: list = []
        self.derived: list[Derived] = []

    def add(self, line: SourceLine, record) -> None:
        """Stage a valid record (a RunRecord, or the fast decoder's equal)."""
        try:
            derived = derived_values(record)
        except UnstorableValue as err:
            self.reject(unstorable(line, err.field, err.reason, self.settings, record.run_id))
            return
        self.lines.append(line)
        self.records.append(record)
        self.derived.append(derived)
        if len(self.records) >= self.settings.rows_per_group:
            self.flush()

    def reject(self, rejection: Rejection) -> None:
        self.quarantine.append_mapping(quarantine_row(rejection, self.batch_id, self.source_name))

    def flush(self) -> None:
        if not self.records:
            return
        line_numbers = [line.line_number for line in self.lines]
        runs, bad = _checked_table(
            run_columns(self.records, self.derived, self.batch_id, self.source_name, line_numbers), RUNS,
            lambda name, row: RUN_COLUMN_FIELDS.get(name, name))
        call_values, call_owner = call_columns(self.records, self.derived, self.batch_id, line_numbers)
        call_index = call_values[SUBAGENT_CALLS.names.index("call_index")]
        calls, bad_calls = _checked_table(call_values, SUBAGENT_CALLS,
                                          lambda name, row: f"subagents[{call_index[row]}].{name}")
        for call, problem in bad_calls.items():
            bad.setdefault(call_owner[call], problem)
        if bad:
            runs = runs.filter(pa.array([row not in bad for row in range(len(self.records))], pa.bool_()))
            calls = calls.filter(pa.array([owner not in bad for owner in call_owner], pa.bool_()))
            for row, (field, reason) in sorted(bad.items()):
                self.reject(unstorable(self.lines[row], field, reason, self.settings, self.records[row].run_id))
        if self.keyed:
            calls = calls.append_column("source_file", pa.array([self.source_name] * calls.num_rows, pa.string()))
        self.runs.write_table(runs)
        self.calls.write_table(calls)
        self._clear()

    def close(self) -> None:
        self.flush()
        self.runs.close()
        self.calls.close()
        self.quarantine.close()


def _checked_table(columns: list[list], schema: pa.Schema, field_of) -> tuple[pa.Table, dict[int, tuple[str, str]]]:
    """The columns as a table of `schema`, and {row: (field, why)} for the rows holding a value it cannot store."""
    arrays, bad = [], {}
    for values, column in zip(columns, schema, strict=True):
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
