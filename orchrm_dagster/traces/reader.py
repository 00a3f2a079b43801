"""A trace file read whole: its traces, each a run record or a rejection with the reason, never one lost.

A file is JSON lines (one document a line: what a collector's file exporter writes) or one JSON document (an array,
a Langfuse `{"data": [...]}` page, a LangSmith `{"runs": [...]}` object). Its traces are numbered in the order their
first span was read: the number is the `line_number` ingest gives each (the tables key a run by file and number),
and each reason says the file line (or array item) the trace begins on. A line that is not JSON is rejected on its
own, and so are the traces whose ids it names (they may have lost a span there); a line holding a span this reader
cannot attribute to a trace rejects the traces read on that line as well. Every other trace of the file is placed
on its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from orchrm_dagster.contract import QuarantineKind, safe_text
from orchrm_dagster.traces.exports import (is_langfuse_observation, is_langfuse_trace, is_langsmith_run,
                                           langfuse_root, langfuse_spans, langfuse_trace_id, langsmith_runs,
                                           langsmith_span, langsmith_trace_id)
from orchrm_dagster.traces.mapping import Trace, Unplaceable, place
from orchrm_dagster.traces.otlp import finish_otel_span, otlp_spans
from orchrm_dagster.traces.settings import TraceSettings

TRACE_FORMATS = ("otel", "langfuse", "langsmith")
# file name endings the landing zone takes as trace files of each format (JSON lines or one JSON document)
FORMAT_SUFFIXES: dict[str, tuple[str, ...]] = {"otel": (".otlp.json", ".otlp.jsonl"),
                                               "langfuse": (".langfuse.json", ".langfuse.jsonl"),
                                               "langsmith": (".langsmith.json", ".langsmith.jsonl")}
TRACE_SUFFIXES = tuple(suffix for suffixes in FORMAT_SUFFIXES.values() for suffix in suffixes)
INTERNAL_ERROR = "the importer failed on this trace"  # a bug: said in the reason, the file's other traces go on
_UTF8_BOM = b"\xef\xbb\xbf"
_PAGE_KEYS = ("data", "traces", "runs")
_TRACE_ID_KEYS = re.compile(rb'"(?:traceId|trace_id)"\s*:\s*"([^"\\]{1,64})"')


def trace_format(file_name: str) -> str | None:
    """The trace format a landed file's name says (`x.otlp.json` -> otel), or None for a run batch."""
    for name, suffixes in FORMAT_SUFFIXES.items():
        if file_name.endswith(suffixes):
            return name
    return None


def landing_name(file_name: str, trace_format_name: str) -> str:
    """The name a trace file lands under so that the loop reads it as `trace_format_name`: its own when it says
    that format already, else its stem (less .json / .jsonl / .ndjson) with the format's suffix."""
    suffixes = FORMAT_SUFFIXES[trace_format_name]
    if file_name.endswith(suffixes):
        return file_name
    lines = file_name.endswith((".jsonl", ".ndjson"))
    stem = re.sub(r"\.(json|jsonl|ndjson)$", "", file_name)
    return stem + suffixes[1 if lines else 0]


@dataclass(frozen=True)
class ImportedRun:
    number: int  # the trace's position in its file (ingest's line_number)
    trace_id: str
    record: dict


@dataclass(frozen=True)
class RejectedTrace:
    number: int
    trace_id: str | None  # None: a line of the file, not a trace
    kind: QuarantineKind
    field: str | None
    reason: str
    raw: str


@dataclass
class _Document:
    seq: int
    where: str
    value: Any = None
    raw: bytes | None = None
    error: str | None = None


@dataclass
class _Group:
    trace: Trace
    seq: int
    head: Any = None  # a Langfuse trace object
    items: list = field(default_factory=list)  # Langfuse observations, LangSmith runs


def read_trace_file(path: str | Path, trace_format_name: str, settings: TraceSettings = TraceSettings()
                    ) -> list[ImportedRun | RejectedTrace]:
    """A local trace file's traces (see `read_traces`); a file over `max_file_bytes` is one rejection."""
    size = Path(path).stat().st_size
    if size > settings.max_file_bytes:
        return [too_large(size, settings)]
    return read_traces(Path(path).read_bytes(), trace_format_name, settings)


def too_large(size: int, settings: TraceSettings) -> RejectedTrace:
    return RejectedTrace(1, None, QuarantineKind.UNREADABLE_FILE, None,
                         f"the trace file is {size:,} bytes, over traces.max_file_bytes={settings.max_file_bytes:,} "
                         "(a trace file is read whole): split it", "")


def read_traces(data: bytes, trace_format_name: str, settings: TraceSettings = TraceSettings()
                ) -> list[ImportedRun | RejectedTrace]:
    """Each trace of a trace file's bytes as a run record (a dict for the contract to validate) or a rejection
    with its reason; the lines that are not JSON as rejections of their own. In file order, numbered from 1."""
    if trace_format_name not in TRACE_FORMATS:
        raise ValueError(f"unknown trace format {trace_format_name!r}: one of {', '.join(TRACE_FORMATS)}")
    documents = list(_documents(data, trace_format_name))
    groups: dict[str, _Group] = {}
    rejected: list[tuple[int, RejectedTrace]] = []
    read = {"otel": _read_otel, "langfuse": _read_langfuse, "langsmith": _read_langsmith}[trace_format_name]
    read(documents, groups, rejected, settings)
    outcomes: list[tuple[int, ImportedRun | RejectedTrace]] = list(rejected)
    for trace_id, group in groups.items():
        outcomes.append((group.seq, _placed(group.trace, settings, trace_format_name)))
    outcomes.sort(key=lambda item: item[0])
    return [_numbered(outcome, number) for number, (_, outcome) in enumerate(outcomes, start=1)]


def _numbered(outcome: ImportedRun | RejectedTrace, number: int) -> ImportedRun | RejectedTrace:
    if isinstance(outcome, ImportedRun):
        return ImportedRun(number, outcome.trace_id, outcome.record)
    return RejectedTrace(number, outcome.trace_id, outcome.kind, outcome.field, outcome.reason, outcome.raw)


def _placed(trace: Trace, settings: TraceSettings, trace_format_name: str) -> ImportedRun | RejectedTrace:
    try:
        return ImportedRun(0, trace.trace_id, place(trace, settings, trace_format_name))
    except Unplaceable as err:
        return _rejected(trace, err.reason, err.field)
    except Exception as err:  # noqa: BLE001 (a bug of this importer must not cost the file's other traces)
        return _rejected(trace, f"{INTERNAL_ERROR}: {type(err).__name__}: {safe_text(str(err))}", None)


def _rejected(trace: Trace, reason: str, field_name: str | None) -> RejectedTrace:
    return RejectedTrace(0, trace.trace_id, QuarantineKind.UNPLACEABLE_TRACE, field_name,
                         f"trace {trace.trace_id} ({trace.where}): {reason}", _raw_text(trace.raw))


def _raw_text(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return safe_text(repr(value))


# ---------------------------------------------------------------- documents

def _documents(data: bytes, trace_format_name: str) -> Iterator[_Document]:
    body = data.removeprefix(_UTF8_BOM)
    stripped = body.strip()
    if not stripped:
        return
    seq = 0
    whole = _loads(stripped)  # one JSON document (on one line, or pretty-printed); JSON lines do not parse whole
    if whole is not None:
        for where, value in _items(whole[0], "item", trace_format_name, single_where="line 1"):
            seq += 1
            yield _Document(seq, where, value, stripped if where == "line 1" else None)
        return
    for number, line in enumerate(body.split(b"\n"), start=1):
        if not line.strip():
            continue
        parsed = _loads(line)
        if parsed is None:
            seq += 1
            yield _Document(seq, f"line {number}", raw=line, error=f"line {number} is not valid JSON")
            continue
        for where, value in _items(parsed[0], f"line {number}, item", trace_format_name,
                                   single_where=f"line {number}"):
            seq += 1
            yield _Document(seq, where, value, line)


def _loads(data: bytes) -> tuple[Any] | None:
    try:
        return (orjson.loads(data),)
    except (orjson.JSONDecodeError, RecursionError):
        return None


def _items(value: Any, label: str, trace_format_name: str, single_where: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict) and trace_format_name != "otel" and "id" not in value:
        for key in _PAGE_KEYS:
            if isinstance(value.get(key), list):
                value = value[key]
                break
    if isinstance(value, list) and trace_format_name != "otel" or (
            isinstance(value, list) and all(isinstance(v, dict) and "resourceSpans" in v for v in value)):
        for index, item in enumerate(value, start=1):
            yield f"{label} {index}", item
        return
    yield single_where, value


def _taint(groups: dict[str, _Group], trace_ids: set[str], why: str) -> None:
    for trace_id in trace_ids:
        group = groups.get(trace_id)
        if group is not None and group.trace.problem is None:
            group.trace.problem = Unplaceable(why, "spans")


def _trace_ids_in(raw: bytes | None) -> set[str]:
    if not raw:
        return set()
    found = set()
    for match in _TRACE_ID_KEYS.finditer(raw):
        text = match.group(1).decode("utf-8", "replace").lower()
        found.add(text)
    return found


def _group(groups: dict[str, _Group], trace_id: str, document: _Document) -> _Group:
    if trace_id not in groups:
        groups[trace_id] = _Group(Trace(trace_id, [], document.seq, document.where), document.seq)
    return groups[trace_id]


def _line_rejection(document: _Document, kind: QuarantineKind, reason: str, raw: Any) -> tuple[int, RejectedTrace]:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else _raw_text(raw)
    return document.seq, RejectedTrace(0, None, kind, None, reason, text)


# ---------------------------------------------------------------- formats

def _read_otel(documents, groups, rejected, settings) -> None:
    order = 0
    pending: list[tuple[set[str], str]] = []  # (trace ids, why): traces a broken line may have cut
    for document in documents:
        if document.error is not None:
            named = _trace_ids_in(document.raw)
            shown = f" (it names trace {', '.join(sorted(named)[:5])})" if named else ""
            rejected.append(_line_rejection(document, QuarantineKind.MALFORMED_JSON, document.error + shown,
                                            document.raw))
            pending.append((named, f"{document.where}, which holds spans of this trace, is not valid JSON: the trace "
                                   "may be incomplete"))
            continue
        here, problems = set(), []
        for trace_id, span, problem, raw in otlp_spans(document.value):
            if trace_id is None:
                problems.append((problem, raw))
                continue
            group = _group(groups, trace_id, document)
            group.trace.raw.append(raw)
            here.add(trace_id)
            if span is None:
                if group.trace.problem is None:
                    group.trace.problem = Unplaceable(f"{document.where}: {problem}", "spans")
                continue
            order += 1
            span.order = order
            group.trace.spans.append(finish_otel_span(span, settings))
        if problems:
            reason, raw = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            rejected.append(_line_rejection(document, QuarantineKind.UNPLACEABLE_TRACE,
                                            f"{document.where}: {reason}{more}", document.value))
            cut = here | set().union(*(_trace_ids_in(_raw_text(r).encode()) for _, r in problems))
            pending.append((cut, f"{document.where} also holds a span this importer cannot read ({reason}): the "
                                 "trace may be incomplete"))
    for trace_ids, why in pending:
        _taint(groups, trace_ids, why)


def _read_langfuse(documents, groups, rejected, settings) -> None:
    for document in documents:
        if document.error is not None:
            rejected.append(_line_rejection(document, QuarantineKind.MALFORMED_JSON, document.error, document.raw))
            continue
        value = document.value
        if not (is_langfuse_trace(value) or is_langfuse_observation(value)):
            rejected.append(_line_rejection(
                document, QuarantineKind.UNPLACEABLE_TRACE,
                f"{document.where}: not a Langfuse trace (an object with observations) or observation (an object "
                "with traceId and type)", value))
            continue
        trace_id = langfuse_trace_id(value)
        if trace_id is None:
            rejected.append(_line_rejection(document, QuarantineKind.UNPLACEABLE_TRACE,
                                            f"{document.where}: a Langfuse trace or observation without a trace id",
                                            value))
            continue
        group = _group(groups, trace_id, document)
        group.trace.raw.append(value)
        if is_langfuse_trace(value):
            if group.head is not None and group.trace.problem is None:
                group.trace.problem = Unplaceable(f"the trace appears twice ({document.where} again)", "spans")
            group.head = value
        else:
            group.items.append(value)
    for trace_id, group in groups.items():
        if group.trace.problem is not None:
            continue
        root, problem = langfuse_root(group.head, trace_id, settings)
        if problem is not None:
            group.trace.problem = Unplaceable(problem, "spans")
            continue
        observations = list(group.head.get("observations") or []) if group.head is not None else []
        try:
            group.trace.spans = langfuse_spans(trace_id, root, observations + group.items)
        except Unplaceable as err:
            group.trace.problem = err
        except Exception as err:  # noqa: BLE001 (a bug here must not cost the file's other traces)
            group.trace.problem = Unplaceable(f"{INTERNAL_ERROR}: {type(err).__name__}: {safe_text(str(err))}")


def _read_langsmith(documents, groups, rejected, settings) -> None:
    order = 0
    for document in documents:
        if document.error is not None:
            rejected.append(_line_rejection(document, QuarantineKind.MALFORMED_JSON, document.error, document.raw))
            continue
        if not is_langsmith_run(document.value):
            rejected.append(_line_rejection(
                document, QuarantineKind.UNPLACEABLE_TRACE,
                f"{document.where}: not a LangSmith run (an object with run_type, trace_id or parent_run_id)",
                document.value))
            continue
        for run in langsmith_runs(document.value):
            trace_id = langsmith_trace_id(run)
            if trace_id is None:
                rejected.append(_line_rejection(
                    document, QuarantineKind.UNPLACEABLE_TRACE,
                    f"{document.where}: run {run.get('id')!r} names neither its trace_id nor is it a root run", run))
                continue
            group = _group(groups, trace_id, document)
            group.trace.raw.append(run)
            order += 1
            try:
                group.trace.spans.append(langsmith_span(run, order))
            except Unplaceable as err:
                if group.trace.problem is None:
                    group.trace.problem = err
            except Exception as err:  # noqa: BLE001 (a bug here must not cost the file's other traces)
                if group.trace.problem is None:
                    group.trace.problem = Unplaceable(f"{INTERNAL_ERROR}: {type(err).__name__}: "
                                                      f"{safe_text(str(err))}")
