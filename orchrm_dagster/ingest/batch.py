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
from orchrm_dagster.contract import QuarantineKind, RunRecord, safe_text
from orchrm_dagster.ingest.reader import count_newlines, iter_jsonl, iter_parquet, line_aligned_ranges
from orchrm_dagster.ingest.settings import IngestSettings
from orchrm_dagster.ingest.staging import RecordStager
from orchrm_dagster.ingest.validate import Rejection, validate_line
from orchrm_dagster.storage import StorageRoot, root_lock

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
            # this process stages the first share itself: one worker fewer to start (each imports the engine,
            # about a second of CPU), and work begins while the others start
            with ProcessPoolExecutor(workers - 1, mp_context=multiprocessing.get_context("spawn")) as pool:
                for _ in range(workers - 1):
                    pool.submit(_ready)
                tasks = _parallel_tasks(root, batch_id, source_path, staging, settings, workers)
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


def _ready() -> None:
    """Started in each worker at once, so that it imports the engine while this process counts lines."""
    import pyarrow as pa

    pa.array([0])  # pyarrow's first conversion imports pandas (about half a second)


def _parallel_tasks(root, batch_id, source_path, staging, settings, workers) -> list[StageTask]:
    with root.fs.open(source_path, "rb") as stream:
        ranges = line_aligned_ranges(stream, root.fs.size(source_path), workers)
        # a range's first line number is the newlines before it (counting is a fast scan, done here)
        newlines = [count_newlines(stream, start, end) for start, end in ranges[:-1]]
    first_lines = [1 + sum(newlines[:i]) for i in range(len(ranges))]
    return [_task(root, batch_id, source_path, staging, settings, i, s, e, first)
            for i, ((s, e), first) in enumerate(zip(ranges, first_lines))]


def _run_parallel(pool, tasks: list[StageTask], progress) -> list[StagedPart]:
    others = [pool.submit(stage_part, task) for task in tasks[1:]]
    parts = [stage_part(tasks[0])]
    for future in others:
        if progress:
            progress(sum(p.lines_read for p in parts))
        parts.append(future.result())
    if progress:
        progress(sum(p.lines_read for p in parts))
    return parts


def stage_part(task: StageTask, progress: Callable[[int], None] | None = None) -> StagedPart:
    """Validate one share of a batch into staged Parquet files (runs a worker process's whole job)."""
    source_name = task.source_path.rsplit("/", 1)[-1]
    out = StagedPart(0, f"{task.out_prefix}-runs.parquet", f"{task.out_prefix}-calls.parquet",
                     f"{task.out_prefix}-quarantine.parquet")
    stager = RecordStager(out.runs, out.calls, out.quarantine, task.batch_id, source_name, task.settings)
    lines_read = 0
    with task.root.fs.open(task.source_path, "rb") as stream:
        try:
            for line in _lines(stream, task):
                lines_read += 1
                outcome = validate_line(line, task.settings)
                if isinstance(outcome, RunRecord):
                    stager.add(line, outcome)
                else:
                    stager.reject(outcome)
                if progress and lines_read % _PROGRESS_EVERY == 0:
                    progress(lines_read)
        except (pa.ArrowException, OSError) as err:  # a corrupt or truncated Parquet file: keep what was read
            stager.reject(Rejection(
                lines_read + 1, QuarantineKind.UNREADABLE_FILE, None,
                f"the file cannot be read past row {lines_read}: {type(err).__name__}: {safe_text(str(err))}", "",
                False))
    stager.close()
    if progress:
        progress(lines_read)
    return StagedPart(lines_read, out.runs, out.calls, out.quarantine)


def _lines(stream, task: StageTask):
    if task.source_path.endswith(".parquet"):
        return iter_parquet(stream)
    stream.seek(task.start)
    budget = None if task.end is None else task.end - task.start
    return iter_jsonl(stream, task.settings.max_record_bytes, task.first_line, budget)


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
