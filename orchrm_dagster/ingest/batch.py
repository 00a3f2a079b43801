"""Ingest one run batch, one landed file or many: validate every line, quarantine the bad ones, write the good ones
once.

A large JSONL file (alone in its batch) is split into line-aligned byte ranges staged by parallel worker
processes; each worker streams its range, so memory stays flat however large the file is. The files of a batch of
several are claimed by the same workers one file at a time. DuckDB then drops duplicate run_ids (within a file,
across the batch's files, and against the runs other batches already landed) working on ids only, and the batch is
published (`ingest.publish`). A file that cannot be opened fails alone: the rest of its batch is published, and the
failure is recorded with its cause.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from orchrm_dagster.contract import QuarantineKind, safe_text
from orchrm_dagster.ingest.publish import deduplicate_and_publish
from orchrm_dagster.ingest.reader import count_newlines, iter_jsonl, iter_parquet, line_aligned_ranges
from orchrm_dagster.ingest.report import FileReport, IngestReport, StagedPart
from orchrm_dagster.ingest.settings import IngestSettings
from orchrm_dagster.ingest.staging import RecordStager
from orchrm_dagster.ingest.traces import is_trace_file, iter_trace_file
from orchrm_dagster.ingest.validate import Rejection, validate_line
from orchrm_dagster.processes import OWNERS_ENV, owners_of_a_child, watch_owners
from orchrm_dagster.storage import (BatchFile, StorageRoot, full_disk_errno, no_cycle_collection, record_ingest,
                                    root_lock, writing)

_PROGRESS_EVERY = 10_000
PARALLEL_MIN_BYTES = 64 << 20  # below this, starting worker processes costs more than it saves
CHUNK_BYTES = 16 << 20  # what a process claims at a time (and at least 16 chunks a process)


@dataclass(frozen=True)
class Chunk:
    """The lines starting in [start, end) of the batch's file `source` (an index into its files), the first being
    line `first_line` (end None: to the end)."""

    source: int
    start: int
    end: int | None
    first_line: int

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end is None


@dataclass(frozen=True)
class StageTask:
    """One process's part of a batch: it stages the chunks it claims (all of them when it works alone)."""

    root: StorageRoot
    sources: tuple[BatchFile, ...]
    batch_id: str
    chunks: tuple[Chunk, ...]
    out_prefix: str
    settings: IngestSettings

    @property
    def keyed(self) -> bool:
        return len(self.sources) > 1


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def ingest_batch(
    root: StorageRoot,
    batch_id: str,
    source_path: str,
    settings: IngestSettings = IngestSettings(),
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> IngestReport:
    """Ingests a batch of one file (any path the storage root reaches)."""
    try:
        size = root.fs.size(source_path)
    except OSError:  # it fails when it is read, alone
        size = 0
    source = BatchFile(source_path.rsplit("/", 1)[-1], source_path, None, size)
    return ingest_files(root, batch_id, [source], settings, workers, progress)


def ingest_files(root: StorageRoot, batch_id: str, files: list[BatchFile], settings: IngestSettings = IngestSettings(),
                 workers: int | None = None, progress: Callable[[int], None] | None = None) -> IngestReport:
    """Ingests a batch of landed files as one: every file read, its lines validated and quarantined by file and
    line, the batch's runs, calls and quarantine replaced whole. A file that cannot be opened fails alone (its
    cause in the report, and in the batch index): if the batch held runs of it already, those are kept. What the
    ingest read of each file (its fingerprint) is recorded in the batch index."""
    started = time.perf_counter()
    files = sorted(files, key=lambda f: f.name)  # a run_id's first copy is kept: the first by file name, then line
    report = IngestReport(batch_id, files[0].name if len(files) == 1 else f"{len(files)} files")
    with tempfile.TemporaryDirectory(prefix=f"orchrm-ingest-{batch_id}-") as staging:
        sources = tuple(files)
        workers = _worker_count(sources, workers or default_workers())
        with writing(f"run batch {batch_id} (its staged parts)", staging):
            if workers == 1:
                whole = tuple(Chunk(i, 0, None, 1) for i in range(len(sources)))
                parts = [stage_part(_task(root, batch_id, sources, staging, settings, 0, whole), itertools.count(),
                                    progress)]
            else:
                parts = _stage_in_parallel(root, batch_id, sources, staging, settings, workers, progress)
        report.workers = len(parts)
        report.lines_read = sum(p.lines_read for p in parts)
        report.files = _file_reports(sources, parts)
        failed = report.failed_files
        # run_ids are de-duplicated against every other batch: two ingests must not do it at once, whichever
        # Dagster instance or host they run on
        with root_lock(root, "runs"):
            runs = None  # the generation of the runs written (none when no file could be read: the batch stays)
            if len(failed) < len(sources):
                runs = deduplicate_and_publish(root, batch_id, parts, staging, settings, report, sorted(failed))
            elif root.batch_files("runs", batch_id):
                for file in report.files:
                    file.failed = f"{file.failed}; the batch keeps the runs it had"
            if len(report.files) == 1:
                report.files[0].runs, report.files[0].quarantined = report.runs_written, report.quarantined
            record_ingest(root, batch_id, {f.name: f.fingerprint or "" for f in sources}, report.failed_files, runs)
    report.seconds = time.perf_counter() - started
    return report


def _file_reports(sources: tuple[BatchFile, ...], parts: list[StagedPart]) -> list[FileReport]:
    reports = [FileReport(source.name) for source in sources]
    for part in parts:
        for index, lines in part.lines_by_source.items():
            reports[index].lines_read += lines
        for index, cause in part.failed.items():
            reports[index].failed = cause
    return reports


def _worker_count(sources: tuple[BatchFile, ...], workers: int) -> int:
    if len(sources) == 1:
        [source] = sources
        if _is_parquet(source.path) or is_trace_file(source.path) or source.size < PARALLEL_MIN_BYTES:
            return 1  # a trace file is read whole: a trace's spans may be anywhere in it
        return workers
    # several files: each is one chunk, claimed by the workers in turn
    total = sum(source.size for source in sources)
    return 1 if total < PARALLEL_MIN_BYTES else min(workers, len(sources))


def _task(root, batch_id, sources, staging, settings, index, chunks) -> StageTask:
    return StageTask(root, sources, batch_id, chunks, str(Path(staging, f"part{index:03d}")), settings)


def _stage_in_parallel(root, batch_id, sources, staging, settings, workers, progress) -> list[StagedPart]:
    """Every process, this one included, claims chunks until none is left: a worker that starts late (each
    imports the engine) or runs slow takes fewer, and all finish together."""
    next_chunk = multiprocessing.get_context("spawn").Value("q", 0)
    pool = ProcessPoolExecutor(workers - 1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(next_chunk, owners_of_a_child()))
    try:
        for _ in range(workers - 1):
            pool.submit(int)  # starts the workers now: each imports the engine while this process counts lines
        chunks = (_chunks(root, sources[0].path, workers) if len(sources) == 1 else
                  tuple(Chunk(i, 0, None, 1) for i in range(len(sources))))
        tasks = [_task(root, batch_id, sources, staging, settings, i, chunks) for i in range(workers)]
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


def _start_worker(next_chunk, owners: str) -> None:
    """A worker's start: the shared chunk counter, and a watch on its owners. A worker whose owner is killed (kill -9,
    the OOM killer) would otherwise stage what is left of the file and then wait for work for ever."""
    global _next_chunk
    _next_chunk = next_chunk
    os.environ[OWNERS_ENV] = owners
    watch_owners()
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
    return tuple(Chunk(0, start, end, first) for (start, end), first in zip(ranges, first_lines))


def stage_part(task: StageTask, claimed: Iterator[int], progress: Callable[[int], None] | None = None
               ) -> StagedPart:
    """Validate the chunks `claimed` yields (indexes into task.chunks, until one past the end) into staged Parquet
    files: a worker process's whole job."""
    out = StagedPart(0, f"{task.out_prefix}-runs.parquet", f"{task.out_prefix}-calls.parquet",
                     f"{task.out_prefix}-quarantine.parquet")
    stager = RecordStager(out.runs, out.calls, out.quarantine, task.batch_id, task.sources[0].name, task.settings,
                          keyed=task.keyed)
    lines_read = 0
    with no_cycle_collection():
        for index in claimed:
            if index >= len(task.chunks):
                break
            chunk = task.chunks[index]
            stager.begin_source(task.sources[chunk.source].name)
            before = lines_read
            try:
                lines_read = _stage_chunk(stager, task, chunk, lines_read, progress)
            except _CannotRead as failure:
                out.failed[chunk.source] = failure.cause
            out.lines_by_source[chunk.source] = out.lines_by_source.get(chunk.source, 0) + lines_read - before
        stager.close()
    if progress:
        progress(lines_read)
    return StagedPart(lines_read, out.runs, out.calls, out.quarantine, out.lines_by_source, out.failed)


class _CannotRead(Exception):
    """A whole file of a batch that cannot be opened or read from its first byte: it fails alone."""

    def __init__(self, cause: str):
        super().__init__(cause)
        self.cause = cause


def _stage_chunk(stager: RecordStager, task: StageTask, chunk: Chunk, lines_read: int, progress) -> int:
    source = task.sources[chunk.source]
    last_line = chunk.first_line - 1
    try:
        stream = _open(task.root, source.path)
    except OSError as err:  # missing, not permitted, an object store that refused: the file, not the batch
        if chunk.whole:
            raise _CannotRead(f"{type(err).__name__}: {safe_text(str(err))}") from err
        raise
    # a stream a chunk: the line reader's buffer closes the stream it wraps when it is done
    with stream:
        try:
            for line in _lines(stream, task, source.path, chunk):
                lines_read += 1
                last_line = line.line_number
                # a trace file's line is a trace; one the mapping could not place comes rejected already
                outcome = line if isinstance(line, Rejection) else validate_line(line, task.settings)
                if isinstance(outcome, Rejection):
                    stager.reject(outcome)
                else:
                    stager.add(line, outcome)
                if progress and lines_read % _PROGRESS_EVERY == 0:
                    progress(lines_read)
        except (pa.ArrowException, OSError) as err:  # a corrupt or truncated file: keep what was read
            if full_disk_errno(err, task.out_prefix) is not None:
                raise  # the staging folder's disk is full, not the file broken: the batch fails (`ingest_files`)
            if isinstance(err, OSError) and chunk.whole and last_line == 0:
                raise _CannotRead(f"{type(err).__name__}: {safe_text(str(err))}") from err
            unit = "row" if _is_parquet(source.path) else "line"
            stager.reject(Rejection(
                last_line + 1, QuarantineKind.UNREADABLE_FILE, None,
                f"the file cannot be read past {unit} {last_line}: {type(err).__name__}: {safe_text(str(err))}",
                "", False))
    return lines_read


def _is_parquet(path: str) -> bool:
    return path.endswith(".parquet")


def _open(root: StorageRoot, path: str):
    if _is_parquet(path):
        return root.fs.open(path, "rb")
    return _ranged_stream(root, path)


def _ranged_stream(root: StorageRoot, path: str):
    """`path` opened to read byte ranges: on S3, a read fetches what it asks for and no more (s3fs would otherwise
    read 50 MiB ahead at every seek, once per chunk and once per chunk boundary); a local file ignores the options."""
    return root.fs.open(path, "rb", block_size=1 << 20, cache_type="none")


def _lines(stream, task: StageTask, path: str, chunk: Chunk):
    if _is_parquet(path):
        return iter_parquet(stream)
    if is_trace_file(path):
        return iter_trace_file(stream, path, task.settings)
    stream.seek(chunk.start)
    budget = None if chunk.end is None else chunk.end - chunk.start
    return iter_jsonl(stream, task.settings.max_record_bytes, chunk.first_line, budget)

