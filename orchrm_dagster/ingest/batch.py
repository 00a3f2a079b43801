"""Ingest one run batch: validate every line, quarantine the bad ones, write the good ones once.

A large JSONL batch is split into line-aligned byte ranges staged by parallel worker processes; each
worker streams its range, so memory stays flat however large the file is. DuckDB then drops duplicate
run_ids (within the file, and against the runs other batches already landed) working on ids only.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import sql
from orchrm_dagster.contract import QuarantineKind, safe_text
from orchrm_dagster.ingest.reader import count_newlines, iter_jsonl, iter_parquet, line_aligned_ranges
from orchrm_dagster.ingest.settings import IngestSettings
from orchrm_dagster.ingest.staging import RecordStager
from orchrm_dagster.ingest.validate import Rejection, validate_line
from orchrm_dagster.storage import StorageRoot, root_lock

_PROGRESS_EVERY = 10_000
PARALLEL_MIN_BYTES = 64 << 20  # below this, starting worker processes costs more than it saves
CHUNK_BYTES = 16 << 20  # what a process claims at a time (and at least 16 chunks a process)


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
class Chunk:
    """The lines starting in [start, end) of a batch file, the first being line `first_line` (end None: to the end)."""

    start: int
    end: int | None
    first_line: int


@dataclass(frozen=True)
class StageTask:
    """One process's part of a batch: it stages the chunks it claims (all of them when it works alone)."""

    root: StorageRoot
    source_path: str
    batch_id: str
    chunks: tuple[Chunk, ...]
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
            whole = (Chunk(0, None, 1),)
            parts = [stage_part(_task(root, batch_id, source_path, staging, settings, 0, whole), itertools.count(),
                                progress)]
        else:
            parts = _stage_in_parallel(root, batch_id, source_path, staging, settings, workers, progress)
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
    if _is_parquet(source_path) or root.fs.size(source_path) < PARALLEL_MIN_BYTES:
        return 1
    return workers


def _task(root, batch_id, source_path, staging, settings, index, chunks) -> StageTask:
    return StageTask(root, source_path, batch_id, chunks, str(Path(staging, f"part{index:03d}")), settings)


def _stage_in_parallel(root, batch_id, source_path, staging, settings, workers, progress) -> list[StagedPart]:
    """Every process, this one included, claims chunks until none is left: a worker that starts late (each
    imports the engine) or runs slow takes fewer, and all finish together."""
    next_chunk = multiprocessing.get_context("spawn").Value("q", 0)
    pool = ProcessPoolExecutor(workers - 1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(next_chunk,))
    try:
        for _ in range(workers - 1):
            pool.submit(int)  # starts the workers now: each imports the engine while this process counts lines
        chunks = _chunks(root, source_path, workers)
        tasks = [_task(root, batch_id, source_path, staging, settings, i, chunks) for i in range(workers)]
        others = [pool.submit(_stage_claimed, task) for task in tasks[1:]]
        parts = [stage_part(tasks[0], _claimer(next_chunk))]
        for future in others:
            if progress:
                progress(sum(p.lines_read for p in parts))
            parts.append(future.result())
    except BaseException:
        with next_chunk.get_lock():
            next_chunk.value = _NO_MORE_CHUNKS  # the workers stop after the chunk in hand
        pool.shutdown(wait=True, cancel_futures=True)  # and are gone before the staging folder is
        raise
    pool.shutdown(wait=False)  # the workers are done: they exit while this process publishes
    if progress:
        progress(sum(p.lines_read for p in parts))
    return parts


_next_chunk = None  # in a worker process: the chunk counter its pool shares
_NO_MORE_CHUNKS = 2**62


def _start_worker(next_chunk) -> None:
    global _next_chunk
    _next_chunk = next_chunk
    import pyarrow as pa

    pa.array([0])  # pyarrow's first conversion imports pandas (about half a second)


def _stage_claimed(task: StageTask) -> StagedPart:
    return stage_part(task, _claimer(_next_chunk))


def _claimer(counter) -> Iterator[int]:
    while True:
        with counter.get_lock():
            index = counter.value
            counter.value += 1
        yield index


def _chunks(root: StorageRoot, source_path: str, workers: int) -> tuple[Chunk, ...]:
    size = root.fs.size(source_path)
    with _ranged_stream(root, source_path) as stream:
        ranges = line_aligned_ranges(stream, size, max(workers * 16, size // CHUNK_BYTES))
        # a chunk's first line number is the newlines before it (counting is a fast scan, done here)
        newlines = [count_newlines(stream, start, end) for start, end in ranges[:-1]]
    first_lines = itertools.accumulate(newlines, initial=1)
    return tuple(Chunk(start, end, first) for (start, end), first in zip(ranges, first_lines))


def stage_part(task: StageTask, claimed: Iterator[int], progress: Callable[[int], None] | None = None
               ) -> StagedPart:
    """Validate the chunks `claimed` yields (indexes into task.chunks, until one past the end) into staged Parquet
    files: a worker process's whole job."""
    source_name = task.source_path.rsplit("/", 1)[-1]
    out = StagedPart(0, f"{task.out_prefix}-runs.parquet", f"{task.out_prefix}-calls.parquet",
                     f"{task.out_prefix}-quarantine.parquet")
    stager = RecordStager(out.runs, out.calls, out.quarantine, task.batch_id, source_name, task.settings)
    lines_read = 0
    with _no_cycle_collection():
        for index in claimed:
            if index >= len(task.chunks):
                break
            lines_read = _stage_chunk(stager, task, task.chunks[index], lines_read, progress)
        stager.close()
    if progress:
        progress(lines_read)
    return StagedPart(lines_read, out.runs, out.calls, out.quarantine)


def _stage_chunk(stager: RecordStager, task: StageTask, chunk: Chunk, lines_read: int, progress) -> int:
    last_line = chunk.first_line - 1
    # a stream a chunk: the line reader's buffer closes the stream it wraps when it is done
    with _open(task) as stream:
        try:
            for line in _lines(stream, task, chunk):
                lines_read += 1
                last_line = line.line_number
                outcome = validate_line(line, task.settings)
                if isinstance(outcome, Rejection):
                    stager.reject(outcome)
                else:
                    stager.add(line, outcome)
                if progress and lines_read % _PROGRESS_EVERY == 0:
                    progress(lines_read)
        except (pa.ArrowException, OSError) as err:  # a corrupt or truncated file: keep what was read
            unit = "row" if _is_parquet(task.source_path) else "line"
            stager.reject(Rejection(
                last_line + 1, QuarantineKind.UNREADABLE_FILE, None,
                f"the file cannot be read past {unit} {last_line}: {type(err).__name__}: {safe_text(str(err))}",
                "", False))
    return lines_read


def _is_parquet(path: str) -> bool:
    return path.endswith(".parquet")


def _open(task: StageTask):
    if _is_parquet(task.source_path):
        return task.root.fs.open(task.source_path, "rb")
    return _ranged_stream(task.root, task.source_path)


def _ranged_stream(root: StorageRoot, path: str):
    """`path` opened to read byte ranges: on S3, a read fetches what it asks for and no more (s3fs would otherwise
    read 50 MiB ahead at every seek, once per chunk and once per chunk boundary); a local file ignores the options."""
    return root.fs.open(path, "rb", block_size=1 << 20, cache_type="none")


@contextmanager
def _no_cycle_collection():
    """Staging allocates millions of short-lived objects that form no reference cycles; the cycle collector's
    passes over them were about a sixth of its CPU time (bench/ingest_label.py --compare)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _lines(stream, task: StageTask, chunk: Chunk):
    if _is_parquet(task.source_path):
        return iter_parquet(stream)
    stream.seek(chunk.start)
    budget = None if chunk.end is None else chunk.end - chunk.start
    return iter_jsonl(stream, task.settings.max_record_bytes, chunk.first_line, budget)


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
    rows = {key: [pq.ParquetFile(path).metadata.num_rows for path in outputs[key]] for key in outputs}
    report.runs_written, report.subagent_calls_written, report.quarantined = (
        sum(rows[key]) for key in ("runs", "calls", "quarantine"))
    for key in ("runs", "calls"):  # a process that claimed no chunk (or only bad lines) leaves an empty part
        outputs[key] = [path for path, count in zip(outputs[key], rows[key]) if count] or outputs[key][:1]
    # runs last: a batch's runs appear only once its calls and quarantine are in place
    for table, key in (("subagent_calls", "calls"), ("quarantine", "quarantine"), ("runs", "runs")):
        root.replace_batch(table, batch_id, outputs[key])
