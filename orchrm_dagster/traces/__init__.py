"""Traces in: a team's traces (OpenTelemetry GenAI spans as OTLP JSON, Langfuse's and LangSmith's exports) read into
run records of the artifact contract, each trace a record or a rejection with its reason; and run records written
back out as OTLP JSON; and the imported runs' labels and champion scores sent back to the tool each came from
(`export_scores`). No Dagster here: ingest reads trace files landed under a format's suffix with it
(`FORMAT_SUFFIXES`), `orchrm import-traces` lands them there, and `orchrm export-scores` sends the scores back."""

from orchrm_dagster.traces.mapping import Span, Trace, Unplaceable, place
from orchrm_dagster.traces.values import text_of
from orchrm_dagster.traces.otlp import runs_to_otlp
from orchrm_dagster.traces.reader import (FORMAT_SUFFIXES, INTERNAL_ERROR, TRACE_FORMATS, TRACE_SUFFIXES,
                                          ImportedRun, RejectedTrace, landing_name, read_trace_file, read_traces,
                                          too_large, trace_format)
from orchrm_dagster.traces.settings import EXPORT_TOOLS, ScoreExportSettings, TraceSettings

# the way back reads the storage root (Polars, httpx): imported on first use, so reading a trace file does not
_LAZY = {name: "score_export" for name in ("ExportReport", "RunScore", "ScoreExportFailed", "ToolExport",
                                           "destination", "export_scores", "imported_scores", "langfuse_scores",
                                           "langsmith_feedback", "otlp_scores", "score_span_id")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"orchrm_dagster.traces.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EXPORT_TOOLS", "ExportReport", "FORMAT_SUFFIXES", "INTERNAL_ERROR", "ImportedRun", "RejectedTrace",
           "RunScore", "ScoreExportFailed", "ScoreExportSettings", "Span", "TRACE_FORMATS", "TRACE_SUFFIXES",
           "ToolExport", "Trace", "TraceSettings", "Unplaceable", "destination", "export_scores", "imported_scores",
           "landing_name", "langfuse_scores", "langsmith_feedback", "otlp_scores", "place", "read_trace_file",
           "read_traces", "runs_to_otlp", "score_span_id", "text_of", "too_large", "trace_format"]
