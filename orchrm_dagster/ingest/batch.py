"""Ingest one run batch: validate every line, quarantine the bad ones, write the good ones once.

A large JSONL batch is split into line-aligned byte ranges staged by parallel worker processes; each
worker streams its range, so memory stays flat however large the file is. DuckDB then drops duplicate
run_ids (within the file, and against the runs other batches already landed) working on ids only.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import sql
from orchrm_dagster.contract import QUARANTINE, RUNS, SUBAGENT_CALLS, QuarantineKind, RunRecord
from orchrm_dagster.ingest.flatten import call_rows, run_row
from orchrm_dagster.ingest.reader import count_newlines, iter_jsonl, iter_parquet, line_aligned_ranges
from orchrm_dagster.ingest.settings import IngestSettings
from orchrm_dagster.ingest.validate import Rejection, validate_line
from orchrm_dagster.storage import ParquetSink, StorageRoot, root_lock

_PROGRESS_EVERY = 10_000
PARALLEL_MIN_BYTES = 64 << 20  # below this, starting worker processes costs more than it saves


@dataclass
class IngestReport:
    batch_id: str
    source_file: str
    lines_read: int = 0
    runs_written: int = 0
    subagent_calls_written: int = 0
    quarantined: int = 0
    workers: int = 1
    reasons: Counter = field(default_factory=Counter)  # "kind" or "kind: field" -> quarantined lines
    seconds: float = 0.0

    @property
    def quarantine_rate(self) -> float:
        return self.quarantined / self.lines_read if self.lines_read else 0.0

    @property
    def runs_per_second(self) -> float:
        return self.lines_read / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class StageTask:
    """One worker's share of a batch: the lines starting in [start, end), the first being `first_line`."""

    root: StorageRoot
    source_path: str
    batch_id: str
    start: int
    end: int | None
    first_line: int
    out_prefix: str
    settings: IngestSettings


@dataclass(frozen=True)
class StagedPart:
    lines_read: int
    runs: str
    calls: str
    quarantine: str


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def ingest_batch(
    root: StorageRoot,
    batch_id: str,
    source_path: str,
    settings: IngestSettings = IngestSettings(),
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    source_fingerprint: str | None = None,
) -> IngestReport:
    """Ingests one batch file; with `source_fingerprint` (the landed file's), the batch records which content it
    holds, so the loop can tell a landed file already ingested from one replaced since."""
    started = time.perf_counter()
    source_name = source_path.rsplit("/", 1)[-1]
    report = IngestReport(batch_id, source_name)
    with tempfile.TemporaryDirectory(prefix=f"orchrm-ingest-{batch_id}-") as staging:
        workers = _worker_count(root, source_path, workers or default_workers())
        if workers == 1:
            parts = [stage_part(_task(root, batch_id, source_path, staging, settings, 0, 0, None, 1), progress)]
        else:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                tasks = _parallel_tasks(pool, root, batch_id, source_path, staging, settings, workers)
                parts = _run_parallel(pool, tasks, progress)
        report.workers = len(parts)
        report.lines_read = sum(p.lines_read for p in parts)
        # run_ids are de-duplicated against every other batch: two ingests must not do it at once, whichever
        # Dagster instance or host they run on
        with root_lock(root, "runs"):
            _deduplicate_and_publish(root, batch_id, parts, staging, settings, report)
            if source_fingerprint is not None:
                root.mark_batch_source("runs", batch_id, source_fingerprint)
    report.seconds = time.perf_counter() - started
    return report


def _worker_count(root: StorageRoot, source_path: str, workers: int) -> int:
    if source_path.endswith(".parquet") or root.fs.size(source_path) < PARALLEL_MIN_BYTES:
        return 1
    return workers


def _task(root, batch_id, source_path, staging, settings, index, start, end, first_line) -> StageTask:
    return StageTask(root, source_path, batch_id, start, end, first_line, str(Path(staging, f"part{index:03d}")),
                     settings)


def _parallel_tasks(pool, root, batch_id, source_path, staging, settings, workers) -> list[StageTask]:
    with root.fs.open(source_path, "rb") as stream:
        ranges = line_aligned_ranges(stream, root.fs.size(source_path), workers)
    newlines = list(pool.map(_count_range_newlines, [(root, source_path, s, e) for s, e in ranges]))
    first_lines = [1 + sum(newlines[:i]) for i in range(len(ranges))]
    return [_task(root, batch_id, source_path, staging, settings, i, s, e, first)
            for i, ((s, e), first) in enumerate(zip(ranges, first_lines))]


def _count_range_newlines(args) -> int:
    root, path, start, end = args
    with root.fs.open(path, "rb") as stream:
        return count_newlines(stream, start, end)


def _run_parallel(pool, tasks: list[StageTask], progress) -> list[StagedPart]:
    parts = []
    for part in pool.map(stage_part, tasks):
        parts.append(part)
        if progress:
            progress(sum(p.lines_read for p in parts))
    return parts


def stage_part(task: StageTask, progress: Callable[[int], None] | None = None) -> StagedPart:
    """Validate one share of a batch into staged Parquet files (runs a worker process's whole job)."""
    source_name = task.source_path.rsplit("/", 1)[-1]
    out = StagedPart(0, f"{task.out_prefix}-runs.parquet", f"{task.out_prefix}-calls.parquet",
                     f"{task.out_prefix}-quarantine.parquet")
    rows_per_group = task.settings.rows_per_group
    runs = ParquetSink(out.runs, RUNS, rows_per_group)
    calls = ParquetSink(out.calls, SUBAGENT_CALLS, rows_per_group)
    quarantine = ParquetSink(out.quarantine, QUARANTINE, rows_per_group)
    lines_read = 0
    with task.root.fs.open(task.source_path, "rb") as stream:
        try:
            for line in _lines(stream, task):
                lines_read += 1
                outcome = validate_line(line, task.settings)
                if isinstance(outcome, RunRecord):
                    runs.append(run_row(outcome, task.batch_id, source_name, line.line_number))
                    for row in call_rows(outcome, task.batch_id, line.line_number):
                        calls.append(row)
                else:
                    quarantine.append_mapping(_quarantine_row(outcome, task.batch_id, source_name))
                if progress and lines_read % _PROGRESS_EVERY == 0:
                    progress(lines_read)
        except (pa.ArrowException, OSError) as err:  # a corrupt or truncated Parquet file: keep what was read
            quarantine.append_mapping(_quarantine_row(Rejection(
                lines_read + 1, QuarantineKind.UNREADABLE_FILE, None,
                f"the file cannot be read past row {lines_read}: {type(err).__name__}: {err}", "", False),
                task.batch_id, source_name))
    for sink in (runs, calls, quarantine):
        sink.close()
    if progress:
        progress(lines_read)
    return StagedPart(lines_read, out.runs, out.calls, out.quarantine)


def _lines(stream, task: StageTask):
    if task.source_path.endswith(".parquet"):
        return iter_parquet(stream)
    stream.seek(task.start)
    budget = None if task.end is None else task.end - task.start
    return iter_jsonl(stream, task.settings.max_record_bytes, task.first_line, budget)


def _quarantine_row(rejection: Rejection, batch_id: str, source_name: str) -> dict:
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


def _existing_runs_relation(root: StorageRoot, batch_id: str) -> str:
    files = [root.to_uri(path) for b in root.batch_ids("runs") if b != batch_id for path in root.batch_files("runs", b)]
    if not files:
        return "(SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS batch_id WHERE false)"
    return f"(SELECT run_id, batch_id FROM read_parquet({sql.list_literal(files)}))"


def _deduplicate_and_publish(root, batch_id, parts: list[StagedPart], staging, settings, report) -> None:
    outputs = {"runs": [p.runs for p in parts], "calls": [p.calls for p in parts],
               "quarantine": [str(Path(staging, "final-quarantine.parquet"))]}
    # order is not needed, and keeping it costs memory on multi-GB batches
    config = {"memory_limit": "2GB", "temp_directory": staging, "threads": 2, "preserve_insertion_order": False}
    with duckdb.connect(config=config) as con:
        if not root.is_local:
            con.register_filesystem(root.fs)
        common = {"staged_runs": sql.list_literal(outputs["runs"])}
        con.execute(sql.load("ingest_classify_lines", existing_runs=_existing_runs_relation(root, batch_id), **common))
        (dropped,) = con.execute("SELECT count(*) FROM line_fate WHERE NOT keep").fetchone()
        if dropped:  # rewrite runs and calls without the duplicates; otherwise the staged parts are final
            final = {name: str(Path(staging, f"final-{name}.parquet")) for name in ("runs", "calls")}
            con.execute(sql.load("ingest_write_runs", out=sql.literal(final["runs"]), **common))
            con.execute(sql.load("ingest_write_calls", staged_calls=sql.list_literal(outputs["calls"]),
                                 out=sql.literal(final["calls"])))
            outputs["runs"], outputs["calls"] = [final["runs"]], [final["calls"]]
        con.execute(sql.load("ingest_write_quarantine", staged_quarantine=sql.list_literal([p.quarantine for p in parts]),
                             out=sql.literal(outputs["quarantine"][0]), max_raw_chars=str(settings.max_raw_chars),
                             duplicate_in_file=sql.literal(QuarantineKind.DUPLICATE_IN_FILE.value),
                             already_ingested=sql.literal(QuarantineKind.ALREADY_INGESTED.value), **common))
        kinds = con.execute("SELECT kind, field FROM read_parquet(?)", [outputs["quarantine"][0]]).fetchall()
        report.reasons = Counter(kind if kind != QuarantineKind.INVALID_FIELD.value else f"{kind}: {field}"
                                 for kind, field in kinds)
    report.runs_written, report.subagent_calls_written, report.quarantined = (
        sum(pq.ParquetFile(path).metadata.num_rows for path in outputs[key]) for key in ("runs", "calls", "quarantine"))
    # runs last: a batch's runs appear only once its calls and quarantine are in place
    for table, key in (("subagent_calls", "calls"), ("quarantine", "quarantine"), ("runs", "runs")):
        root.replace_batch(table, batch_id, outputs[key])
