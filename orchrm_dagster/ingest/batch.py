"""Ingest one run batch, one landed file or many: validate every line, quarantine the bad ones, write the good ones
once.

A large JSONL file (alone in its batch) is split into line-aligned byte ranges staged by parallel worker
processes; each worker streams its range, so memory stays flat however large the file is. The files of a batch of
several are claimed by the same workers one file at a time. DuckDB then drops duplicate run_ids (within a file,
across the batch's files, and against the runs other batches already landed) working on ids only. A file that
cannot be opened fails alone: the rest of its batch is published, and the failure is recorded with its cause.
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
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
from orchrm_dagster.storage import BatchFile, StorageRoot, no_cycle_collection, record_ingest, root_lock

_PROGRESS_EVERY = 10_000
PARALLEL_MIN_BYTES = 64 << 20  # below this, starting worker processes costs more than it saves
CHUNK_BYTES = 16 << 20  # what a process claims at a time (and at least 16 chunks a process)


@dataclass
class FileReport:
    """One file of a batch: what its ingest read and kept, or why it could not read it at all."""

    name: str
    lines_read: int = 0
    runs: int = 0
    quarantined: int = 0
    failed: str | None = None


@dataclass
class IngestReport:
    batch_id: str
    source_file: str  # the batch's file, or "N files"
    lines_read: int = 0
    runs_written: int = 0
    subagent_calls_written: int = 0
    quarantined: int = 0
    workers: int = 1
    reasons: Counter = field(default_factory=Counter)  # "kind" or "kind: field" -> quarantined lines
    seconds: float = 0.0
    files: list[FileReport] = field(default_factory=list)

    @property
    def failed_files(self) -> dict[str, str]:
        return {f.name: f.failed for f in self.files if f.failed is not None}

    @property
    def quarantine_rate(self) -> float:
        return self.quarantined / self.lines_read if self.lines_read else 0.0

    @property
    def runs_per_second(self) -> float:
        return self.lines_read / self.seconds if self.seconds else 0.0


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


@dataclass(frozen=True)
class StagedPart:
    lines_read: int
    runs: str
    calls: str
    quarantine: str
    lines_by_source: dict[int, int] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)  # source index -> why it could not be opened


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
                runs = _deduplicate_and_publish(root, batch_id, parts, staging, settings, report, sorted(failed))
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
        if _is_parquet(source.path) or source.size < PARALLEL_MIN_BYTES:
            return 1
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
                               initializer=_start_worker, initargs=(next_chunk,))
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
                outcome = validate_line(line, task.settings)
                if isinstance(outcome, Rejection):
                    stager.reject(outcome)
                else:
                    stager.add(line, outcome)
                if progress and lines_read % _PROGRESS_EVERY == 0:
                    progress(lines_read)
        except (pa.ArrowException, OSError) as err:  # a corrupt or truncated file: keep what was read
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
    stream.seek(chunk.start)
    budget = None if chunk.end is None else chunk.end - chunk.start
    return iter_jsonl(stream, task.settings.max_record_bytes, chunk.first_line, budget)


def _existing_runs_relation(root: StorageRoot, batch_id: str) -> str:
    files = [root.to_uri(path) for b in root.batch_ids("runs") if b != batch_id for path in root.batch_files("runs", b)]
    if not files:
        return "(SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS batch_id WHERE false)"
    return f"(SELECT run_id, batch_id FROM read_parquet({sql.list_literal(files)}))"


def _deduplicate_and_publish(root, batch_id, parts: list[StagedPart], staging, settings, report,
                             failed: list[str]) -> str:
    """Publishes the batch's runs, calls and quarantine; returns the generation of its runs."""
    keyed = len(report.files) > 1
    # order is not needed, and keeping it costs memory on multi-GB batches
    config = {"memory_limit": "2GB", "temp_directory": staging, "threads": 2, "preserve_insertion_order": False}
    with duckdb.connect(config=config) as con:
        if not root.is_local:
            con.register_filesystem(root.fs)
        if failed and root.batch_files("runs", batch_id):
            parts = [*parts, _carry(con, root, batch_id, failed, staging)]
            report.files = [dataclasses.replace(f, failed=f"{f.failed}; the batch keeps the runs it had of it")
                            if f.failed else f for f in report.files]
        outputs = {"runs": [p.runs for p in parts], "calls": [p.calls for p in parts],
                   "quarantine": [str(Path(staging, "final-quarantine.parquet"))]}
        common = {"staged_runs": sql.list_literal(outputs["runs"])}
        con.execute(sql.load("ingest_classify_lines", existing_runs=_existing_runs_relation(root, batch_id), **common))
        (dropped,) = con.execute("SELECT count(*) FROM line_fate WHERE NOT keep").fetchone()
        # rewrite runs and calls without the duplicates (and, for several files, as one part each, the calls without
        # their staged source_file); otherwise the staged parts are final
        if dropped or keyed:
            final = {name: str(Path(staging, f"final-{name}.parquet")) for name in ("runs", "calls")}
            con.execute(sql.load("ingest_write_runs", out=sql.literal(final["runs"]), **common))
            con.execute(sql.load("ingest_write_calls", staged_calls=sql.list_literal(outputs["calls"]),
                                 out=sql.literal(final["calls"]), call_key=_call_key(keyed),
                                 drop_key="EXCLUDE (source_file)" if keyed else ""))
            outputs["runs"], outputs["calls"] = [final["runs"]], [final["calls"]]
        con.execute(sql.load("ingest_write_quarantine", staged_quarantine=sql.list_literal([p.quarantine for p in parts]),
                             out=sql.literal(outputs["quarantine"][0]), max_raw_chars=str(settings.max_raw_chars),
                             duplicate_in_file=sql.literal(QuarantineKind.DUPLICATE_IN_FILE.value),
                             already_ingested=sql.literal(QuarantineKind.ALREADY_INGESTED.value), **common))
        kinds = con.execute("SELECT kind, field FROM read_parquet(?)", [outputs["quarantine"][0]]).fetchall()
        report.reasons = Counter(kind if kind != QuarantineKind.INVALID_FIELD.value else f"{kind}: {field}"
                                 for kind, field in kinds)
        _count_by_file(con, report, outputs)
    rows = {key: [pq.ParquetFile(path).metadata.num_rows for path in outputs[key]] for key in outputs}
    report.runs_written, report.subagent_calls_written, report.quarantined = (
        sum(rows[key]) for key in ("runs", "calls", "quarantine"))
    for key in ("runs", "calls"):  # a process that claimed no chunk (or only bad lines) leaves an empty part
        outputs[key] = [path for path, count in zip(outputs[key], rows[key]) if count] or outputs[key][:1]
    # runs last: a batch's runs appear only once its calls and quarantine are in place
    for table, key in (("subagent_calls", "calls"), ("quarantine", "quarantine")):
        root.replace_batch(table, batch_id, outputs[key])
    return root.replace_batch("runs", batch_id, outputs["runs"])


def _call_key(keyed: bool) -> str:
    return "source_file, line_number" if keyed else "line_number"


def _carry(con, root: StorageRoot, batch_id: str, names: list[str], staging: str) -> StagedPart:
    """The batch's current rows of `names` (files its new ingest could not read) as a staged part of it."""
    out = StagedPart(0, *(str(Path(staging, f"carried-{key}.parquet")) for key in ("runs", "calls", "quarantine")))
    parts = {table: sql.list_literal([root.to_uri(path) for path in root.batch_files(table, batch_id)])
             for table in ("runs", "subagent_calls", "quarantine")}
    con.execute(sql.load("ingest_carry_files", runs=parts["runs"], calls=parts["subagent_calls"],
                         quarantine=parts["quarantine"], files="(" + ", ".join(map(sql.literal, names)) + ")",
                         out_runs=sql.literal(out.runs), out_calls=sql.literal(out.calls),
                         out_quarantine=sql.literal(out.quarantine)))
    return out


def _count_by_file(con, report: IngestReport, outputs: dict[str, list[str]]) -> None:
    """Each file's runs and quarantined lines, as published."""
    if len(report.files) == 1:
        return  # the batch's totals (set by the caller)
    counts = {}
    for key in ("runs", "quarantine"):
        rows = con.execute("SELECT source_file, count(*) FROM read_parquet(?) GROUP BY ALL", [outputs[key]]).fetchall()
        counts[key] = dict(rows)
    for file in report.files:
        file.runs, file.quarantined = counts["runs"].get(file.name, 0), counts["quarantine"].get(file.name, 0)
