"""A landed trace file (`x.otlp.json`, `x.langfuse.json`, `x.langsmith.json`, or `.jsonl`) read as a run batch's
lines: each trace a record the contract then validates, or its rejection; the number ingest gives a trace (its
`line_number`) is its position in the file (orchrm_dagster.traces)."""

from __future__ import annotations

from collections.abc import Iterator

from orchrm_dagster.ingest.reader import SourceLine
from orchrm_dagster.ingest.settings import IngestSettings
from orchrm_dagster.ingest.validate import Rejection
from orchrm_dagster.traces import ImportedRun, read_traces, too_large, trace_format


def is_trace_file(path: str) -> bool:
    return trace_format(path.rsplit("/", 1)[-1]) is not None


def iter_trace_file(stream, path: str, settings: IngestSettings) -> Iterator[SourceLine | Rejection]:
    """The traces of a trace file's stream, read whole (a trace's spans may be anywhere in the file)."""
    limit = settings.traces.max_file_bytes
    data = stream.read(limit + 1)
    if len(data) > limit:
        outcomes = [too_large(len(data) + len(stream.read()), settings.traces)]
    else:
        outcomes = read_traces(data, trace_format(path.rsplit("/", 1)[-1]), settings.traces)
    for outcome in outcomes:
        if isinstance(outcome, ImportedRun):
            yield SourceLine(outcome.number, record=outcome.record)
            continue
        raw, truncated = outcome.raw, len(outcome.raw) > settings.max_raw_chars
        yield Rejection(outcome.number, outcome.kind, outcome.field, outcome.reason,
                        raw[:settings.max_raw_chars] if truncated else raw, truncated, outcome.trace_id)
