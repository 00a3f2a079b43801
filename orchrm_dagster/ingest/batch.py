"""Ingest one run batch: validate every line, quarantine the bad ones, write the good ones once."""

from __future__ import annotations

import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

import sql
from orchrm_dagster.contract.record import RunRecord
from orchrm_dagster.contract.tables import QUARANTINE, RUNS, SUBAGENT_CALLS
from orchrm_dagster.ingest.flatten import ParquetSink, call_rows, run_row
from orchrm_dagster.ingest.reader import SourceLine, iter_jsonl, iter_parquet
from orchrm_dagster.ingest.validate import Limits, Rejection, validate_line
from orchrm_dagster.storage.root import StorageRoot

_PROGRESS_EVERY = 10_000
_LOCATION_PREFIX = re.compile(r"^.*?:\d+: ")


@dataclass
class IngestReport:
    batch_id: str
    source_file: str
    lines_read: int = 0
    runs_written: int = 0
    subagent_calls_written: int = 0
    quarantined: int = 0
    reasons: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def quarantine_rate(self) -> float:
        return self.quarantined / self.lines_read if self.lines_read else 0.0

    @property
    def runs_per_second(self) -> float:
        return self.lines_read / self.seconds if self.seconds else 0.0


def _reason_kind(reason: str) -> str:
    """A short category for counting: 'malformed JSON', 'policy.kind', 'duplicate run_id', ..."""
    if reason.startswith("duplicate run_id"):
        return "duplicate run_id in file"
    if "was already ingested" in reason:
        return "run_id already ingested"
    return reason.split(":", 1)[0]


def ingest_batch(
    root: StorageRoot,
    batch_id: str,
    source_path: str,
    limits: Limits = Limits(),
    rows_per_group: int = 20_000,
    progress: Callable[[int], None] | None = None,
) -> IngestReport:
    started = time.perf_counter()
    source_name = source_path.rsplit("/", 1)[-1]
    report = IngestReport(batch_id, source_name)
    with tempfile.TemporaryDirectory(prefix=f"orchrm-ingest-{batch_id}-") as staging:
        staged = {name: str(Path(staging, f"{name}.parquet")) for name in ("runs", "calls", "quarantine")}
        _stage(root, batch_id, source_path, source_name, staged, limits, rows_per_group, report, progress)
        _deduplicate_and_publish(root, batch_id, staged, staging, limits, report)
    report.seconds = time.perf_counter() - started
    return report


def _source_lines(root: StorageRoot, source_path: str, limits: Limits):
    stream = root.fs.open(source_path, "rb")
    if source_path.endswith(".parquet"):
        return stream, iter_parquet(stream)
    return stream, iter_jsonl(stream, limits.max_record_bytes)


def _stage(root, batch_id, source_path, source_name, staged, limits, rows_per_group, report, progress) -> None:
    runs = ParquetSink(staged["runs"], RUNS, rows_per_group)
    calls = ParquetSink(staged["calls"], SUBAGENT_CALLS, rows_per_group)
    quarantine = ParquetSink(staged["quarantine"], QUARANTINE, rows_per_group)
    stream, lines = _source_lines(root, source_path, limits)
    with stream:
        for line in lines:
            report.lines_read += 1
            outcome = validate_line(line, limits)
            if isinstance(outcome, RunRecord):
                runs.append(run_row(outcome, batch_id, source_name, line.line_number))
                for row in call_rows(outcome, batch_id, line.line_number):
                    calls.append(row)
            else:
                quarantine.append(_quarantine_row(outcome, batch_id, source_name))
            if progress and report.lines_read % _PROGRESS_EVERY == 0:
                progress(report.lines_read)
    for sink in (runs, calls, quarantine):
        sink.close()
    if progress:
        progress(report.lines_read)


def _quarantine_row(rejection: Rejection, batch_id: str, source_name: str) -> dict:
    return {
        "batch_id": batch_id,
        "source_file": source_name,
        "line_number": rejection.line_number,
        "run_id": rejection.run_id,
        "field": rejection.field,
        "reason": f"{source_name}:{rejection.line_number}: {rejection.reason}",
        "raw": rejection.raw,
        "raw_truncated": rejection.raw_truncated,
    }


def _existing_runs_relation(root: StorageRoot, batch_id: str) -> str:
    others = [b for b in root.batch_ids("runs") if b != batch_id]
    if not others:
        return "(SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS batch_id WHERE false)"
    files = ", ".join(sql.literal(root.uri("tables", "runs", f"batch_id={b}", "data.parquet")) for b in others)
    return f"read_parquet([{files}])"


def _deduplicate_and_publish(root, batch_id, staged, staging, limits, report) -> None:
    outputs = {"runs": staged["runs"], "calls": staged["calls"],
               "quarantine": str(Path(staging, "final_quarantine.parquet"))}
    # order is not needed and keeping it costs memory on multi-GB batches
    config = {"memory_limit": "2GB", "temp_directory": staging, "threads": 2, "preserve_insertion_order": False}
    with duckdb.connect(config=config) as con:
        if not root.is_local:
            con.register_filesystem(root.fs)
        common = {"staged_runs": sql.literal(staged["runs"])}
        con.execute(sql.load("ingest_classify_lines", existing_runs=_existing_runs_relation(root, batch_id), **common))
        (dropped,) = con.execute("SELECT count(*) FROM line_fate WHERE NOT keep").fetchone()
        if dropped:  # rewrite runs and calls without the duplicates; otherwise the staged files are final
            outputs["runs"], outputs["calls"] = (str(Path(staging, f"final_{n}.parquet")) for n in ("runs", "calls"))
            con.execute(sql.load("ingest_write_runs", out=sql.literal(outputs["runs"]), **common))
            con.execute(sql.load("ingest_write_calls", staged_calls=sql.literal(staged["calls"]),
                                 out=sql.literal(outputs["calls"])))
        con.execute(sql.load("ingest_write_quarantine", staged_quarantine=sql.literal(staged["quarantine"]),
                             out=sql.literal(outputs["quarantine"]), max_raw_chars=str(limits.max_raw_chars), **common))
        reasons = con.execute("SELECT reason FROM read_parquet(?)", [outputs["quarantine"]]).fetchall()
        report.reasons = Counter(_reason_kind(_LOCATION_PREFIX.sub("", r, count=1)) for (r,) in reasons)
    report.runs_written, report.subagent_calls_written, report.quarantined = (
        pq.ParquetFile(outputs[key]).metadata.num_rows for key in ("runs", "calls", "quarantine"))
    # runs last: a batch's runs appear only once its calls and quarantine are in place
    for table, key in (("subagent_calls", "calls"), ("quarantine", "quarantine"), ("runs", "runs")):
        root.publish_local_file(outputs[key], root.table_file(table, batch_id))
