"""Traces in: a team's traces (OpenTelemetry GenAI spans as OTLP JSON, Langfuse's and LangSmith's exports) read into
run records of the artifact contract, each trace a record or a rejection with its reason; and run records written
back out as OTLP JSON. No Dagster here: ingest reads trace files landed under a format's suffix with it
(`FORMAT_SUFFIXES`), and `orchrm import-traces` lands them there."""

from orchrm_dagster.traces.mapping import Span, Trace, Unplaceable, place, runs_to_otlp, text_of
from orchrm_dagster.traces.reader import (FORMAT_SUFFIXES, INTERNAL_ERROR, TRACE_FORMATS, TRACE_SUFFIXES,
                                          ImportedRun, RejectedTrace, landing_name, read_trace_file, read_traces,
                                          too_large, trace_format)
from orchrm_dagster.traces.settings import TraceSettings

__all__ = ["FORMAT_SUFFIXES", "INTERNAL_ERROR", "ImportedRun", "RejectedTrace", "Span", "TRACE_FORMATS",
           "TRACE_SUFFIXES", "Trace", "TraceSettings", "Unplaceable", "landing_name", "place", "read_trace_file",
           "read_traces", "runs_to_otlp", "text_of", "too_large", "trace_format"]
