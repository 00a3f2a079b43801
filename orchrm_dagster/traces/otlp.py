"""The OTLP JSON format of traces (OpenTelemetry's protobuf JSON mapping, as a collector's file exporter and the
OTLP/HTTP JSON endpoint `POST /v1/traces` carry it: `{"resourceSpans": [{"resource", "scopeSpans": [{"scope",
"spans": [...]}]}]}`), read and written; the rules that place a trace's spans are `traces.mapping`'s.

In: `otlp_spans` reads a document's spans (ids as hex, or base64 as protobuf's JSON mapping writes bytes; attribute
values as plain values), `finish_otel_span` reads the GenAI conventions off a span's attributes (its kind, agent,
usage, model, messages). Out: `runs_to_otlp` writes run records as OTLP JSON lines that read back to the same
records (a user's runs as traces, and the importer's round-trip test); `otlp_attributes` / `otlp_value` write plain
values as OTLP attributes (`traces.score_export` writes scores with them).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import orjson

from orchrm_dagster.traces.mapping import (AGENT, AGENT_ID, AGENT_NAME, ERROR_TYPE, INPUT_MESSAGES, INPUT_TOKENS,
                                           LEGACY_COMPLETION, LEGACY_PROMPT, LLM, OPERATION,
                                           OTHER, OUTPUT_MESSAGES, OUTPUT_TOKENS, REQUEST_MODEL, RESPONSE_MODEL,
                                           SERVICE_NAME, STATUS_ERROR, TOOL, TOOL_ARGUMENTS, TOOL_CALL_ID, TOOL_NAME,
                                           TOOL_RESULT, Span)
from orchrm_dagster.traces.values import MAX_DEPTH, count, json_text, maybe_json, nanos, text_id
from orchrm_dagster.traces.settings import TraceSettings

# ---------------------------------------------------------------- OTLP JSON in

def any_value(value: Any, depth: int = 0) -> Any:
    """An OTLP JSON AnyValue (`{"stringValue": ...}`, `{"intValue": "3"}`, arrays, key-value lists) as a plain
    value; a value of no known shape is kept as it is."""
    if not isinstance(value, dict) or depth > MAX_DEPTH:
        return value
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "intValue" in value:
        number = count(value["intValue"])
        return number if number is not None else value["intValue"]
    if "doubleValue" in value:
        return value["doubleValue"]
    if "arrayValue" in value:
        items = (value["arrayValue"] or {}).get("values") if isinstance(value["arrayValue"], dict) else None
        return [any_value(v, depth + 1) for v in items] if isinstance(items, list) else []
    if "kvlistValue" in value:
        items = (value["kvlistValue"] or {}).get("values") if isinstance(value["kvlistValue"], dict) else None
        return attributes(items, depth + 1)
    if "bytesValue" in value:
        return value["bytesValue"]
    return None if not value else value


def attributes(items: Any, depth: int = 0) -> dict[str, Any]:
    """An OTLP attribute list (`[{"key": ..., "value": AnyValue}]`) as a dict; entries of another shape are
    skipped."""
    found: dict[str, Any] = {}
    if not isinstance(items, list):
        return found
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            found[item["key"]] = any_value(item.get("value"), depth)
    return found


def otlp_spans(document: Any) -> Iterator[tuple[str | None, Any, str | None, Any]]:
    """(trace id, Span or None, what is wrong, the span as read) for each span of one OTLP JSON document
    (`{"resourceSpans": [...]}`); a span too broken to tell its trace gives trace id None."""
    if not isinstance(document, dict):
        yield None, None, f"an OTLP document is a JSON object with resourceSpans, got {type(document).__name__}", document
        return
    resource_spans = document.get("resourceSpans", document.get("resource_spans"))
    if not isinstance(resource_spans, list):
        yield None, None, "no resourceSpans list (an OTLP JSON traces document holds one)", document
        return
    for resource_span in resource_spans:
        if not isinstance(resource_span, dict):
            yield None, None, "a resourceSpans entry is not an object", resource_span
            continue
        resource = resource_span.get("resource")
        resource_attributes = attributes(resource.get("attributes")) if isinstance(resource, dict) else {}
        scope_spans = resource_span.get("scopeSpans", resource_span.get("scope_spans", []))
        if not isinstance(scope_spans, list):
            yield None, None, "scopeSpans is not a list", scope_spans
            continue
        for scope_span in scope_spans:
            spans = scope_span.get("spans") if isinstance(scope_span, dict) else None
            if not isinstance(spans, list):
                yield None, None, "a scopeSpans entry has no spans list", scope_span
                continue
            for raw in spans:
                yield (*_otlp_span(raw, resource_attributes), raw)


def _otlp_span(raw: Any, resource: dict) -> tuple[str | None, Any, str | None]:
    if not isinstance(raw, dict):
        return None, None, "a span is not an object"
    trace_id = _hex_id(raw.get("traceId", raw.get("trace_id")))
    if trace_id is None:
        return None, None, f"a span has no valid traceId ({raw.get('traceId')!r})"
    span_id = _hex_id(raw.get("spanId", raw.get("span_id")))
    if span_id is None:
        return trace_id, None, f"a span has no valid spanId ({raw.get('spanId')!r})"
    parent = raw.get("parentSpanId", raw.get("parent_span_id"))
    parent_id = None if parent in (None, "") else _hex_id(parent)
    if parent not in (None, "") and parent_id is None:
        return trace_id, None, f"span {span_id} has an invalid parentSpanId ({parent!r})"
    attrs = attributes(raw.get("attributes"))
    name = raw.get("name") if isinstance(raw.get("name"), str) else ""
    status = raw.get("status") if isinstance(raw.get("status"), dict) else {}
    error = None
    if status.get("code") in (STATUS_ERROR, "STATUS_CODE_ERROR") or (ERROR_TYPE in attrs and status.get("code") != 1):
        message = status.get("message")
        error = message if isinstance(message, str) and message else text_id(attrs.get(ERROR_TYPE)) or "error"
    return trace_id, Span(
        span_id=span_id, parent_id=parent_id, name=name, kind=OTHER, order=0,
        start_ns=nanos(raw.get("startTimeUnixNano")), end_ns=nanos(raw.get("endTimeUnixNano")),
        attributes=attrs, resource=resource, error=error), None


def _hex_id(value: Any) -> str | None:
    """A trace or span id as lowercase hex (OTLP JSON writes hex; base64, as protobuf's JSON mapping writes bytes,
    is read too); None when it is neither."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    lowered = value.lower()
    if all(c in "0123456789abcdef" for c in lowered):
        return None if set(lowered) == {"0"} else lowered
    try:
        decoded = base64.b64decode(value, validate=True)
    except ValueError:
        return None
    return decoded.hex() if decoded and any(decoded) else None


def finish_otel_span(span: Span, settings: TraceSettings) -> Span:
    """The GenAI conventions read off a span's attributes: its kind, agent, usage, model, input and output."""
    attrs = span.attributes
    operation = attrs.get(OPERATION)
    if operation in settings.agent_operations:
        span.kind = AGENT
    elif operation in settings.inference_operations:
        span.kind = LLM
    elif operation in settings.tool_operations:
        span.kind = TOOL
    if span.kind == TOOL:
        span.agent_name = text_id(attrs.get(TOOL_NAME)) or text_id(attrs.get(AGENT_NAME))
        span.agent_id = text_id(attrs.get(TOOL_CALL_ID)) or text_id(attrs.get(AGENT_ID))
        # a tool's arguments and result are its input and output as given (JSON text stays text)
        span.input = _tool_text(attrs.get(TOOL_ARGUMENTS)) or maybe_json(attrs.get(INPUT_MESSAGES))
        span.output = _tool_text(attrs.get(TOOL_RESULT)) or maybe_json(attrs.get(OUTPUT_MESSAGES))
    else:
        span.agent_name = text_id(attrs.get(AGENT_NAME))
        span.agent_id = text_id(attrs.get(AGENT_ID))
        span.input = maybe_json(attrs.get(INPUT_MESSAGES, attrs.get(LEGACY_PROMPT)))
        span.output = maybe_json(attrs.get(OUTPUT_MESSAGES, attrs.get(LEGACY_COMPLETION)))
    span.input_tokens = _nonnegative(attrs.get(INPUT_TOKENS))
    span.output_tokens = _nonnegative(attrs.get(OUTPUT_TOKENS))
    span.model = text_id(attrs.get(REQUEST_MODEL)) or text_id(attrs.get(RESPONSE_MODEL))
    return span


def _tool_text(value: Any) -> str | None:
    return None if value is None else value if isinstance(value, str) else json_text(value)


def _nonnegative(value: Any) -> int | None:
    number = count(value)
    return number if number is not None and number >= 0 else None


# ---------------------------------------------------------------- OTLP JSON out

def runs_to_otlp(records: Iterable[dict], service_name: str = "orchrm", settings: TraceSettings = TraceSettings()
                 ) -> Iterator[bytes]:
    """Run records (contract v1 dicts) as OTLP JSON lines, one trace per record, as a collector's file exporter
    writes them: the orchestrator an `invoke_agent` span holding the question and the final answer, the plan a
    `chat` span under it, each sub-agent call an `invoke_agent` span with a `chat` span holding its tokens and model;
    the fields the conventions have no name for as `TraceSettings`' attributes. Importing them gives the records
    back, except `meta` (the importer's own), a total token count without its split (the conventions count input
    and output tokens only), a final answer of None on a run without an error (the importer takes the last call's
    output), and a call's unknown keys."""
    for record in records:
        yield orjson.dumps({"resourceSpans": [{
            "resource": {"attributes": otlp_attributes({SERVICE_NAME: service_name})},
            "scopeSpans": [{"scope": {"name": "orchrm_dagster.traces"}, "spans": list(_run_spans(record, settings))}],
        }]})


def _run_spans(record: dict, settings: TraceSettings) -> Iterator[dict]:
    run_id = record["run_id"]
    trace_id = hashlib.blake2b(f"trace:{run_id}".encode(), digest_size=16).hexdigest()
    start = _record_nanos(record.get("created_at"))
    policy = record.get("policy") or {}
    tokens = record.get("tokens") or {}
    calls = record.get("subagents") or []

    def span_id(index: int) -> str:
        return hashlib.blake2b(f"span:{run_id}:{index}".encode(), digest_size=8).hexdigest()

    root_attributes = {OPERATION: settings.agent_operations[0], AGENT_NAME: policy.get("name"),
                       settings.run_id_attribute: run_id, settings.problem_id_attribute: record.get("problem_id"),
                       settings.benchmark_attribute: record.get("benchmark"),
                       settings.policy_name_attribute: policy.get("name"),
                       settings.policy_kind_attribute: policy.get("kind"),
                       settings.policy_step_attribute: policy.get("step"),
                       settings.reference_answer_attribute: record.get("reference_answer"),
                       settings.is_correct_attribute: record.get("is_correct"),
                       settings.sample_index_attribute: record.get("sample_index"),
                       settings.plan_logprob_attribute: record.get("plan_logprob"),
                       settings.environment_attribute: record.get("environment"),
                       INPUT_MESSAGES: _messages("user", record.get("question")),
                       OUTPUT_MESSAGES: _messages("assistant", record.get("final_answer"))}
    end = start + (len(calls) + 2) * 1_000_000
    root = _span(trace_id, span_id(0), None, f"invoke_agent {policy.get('name')}", start, end, root_attributes)
    if record.get("error") is not None:
        root["status"] = {"code": STATUS_ERROR, "message": record["error"]}
    yield root
    yield _span(trace_id, span_id(1), span_id(0), settings.inference_operations[0], start, start + 1_000_000, {
        OPERATION: settings.inference_operations[0], INPUT_MESSAGES: _messages("user", record.get("question")),
        OUTPUT_MESSAGES: _messages("assistant", record.get("plan")),
        INPUT_TOKENS: tokens.get("orchestrator_prompt"), OUTPUT_TOKENS: tokens.get("orchestrator_completion")})
    for index, call in enumerate(calls):
        began = start + (index + 1) * 1_000_000
        agent = span_id(2 + 2 * index)
        yield _span(trace_id, agent, span_id(0), f"invoke_agent {call.get('agent_name') or ''}".rstrip(), began,
                    began + 1_000_000, {OPERATION: settings.agent_operations[0], AGENT_ID: call.get("agent_id"),
                                        AGENT_NAME: call.get("agent_name"),
                                        INPUT_MESSAGES: _messages("user", call.get("input")),
                                        OUTPUT_MESSAGES: _messages("assistant", call.get("output"))})
        yield _span(trace_id, span_id(3 + 2 * index), agent,
                    f"{settings.inference_operations[0]} {call.get('model') or ''}".rstrip(), began,
                    began + 1_000_000, {OPERATION: settings.inference_operations[0], REQUEST_MODEL: call.get("model"),
                                        INPUT_TOKENS: call.get("prompt_tokens"),
                                        OUTPUT_TOKENS: call.get("completion_tokens")})


def _span(trace_id: str, span_id: str, parent: str | None, name: str, start: int, end: int, attrs: dict) -> dict:
    return {"traceId": trace_id, "spanId": span_id, "parentSpanId": parent or "", "name": name,
            "kind": 1 if parent else 2,  # INTERNAL; the orchestrator's span: SERVER (it is called)
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end), "attributes": otlp_attributes(attrs),
            "status": {}}


def _messages(role: str, text: str | None) -> str | None:
    if text is None:
        return None
    message = {"role": role, "parts": [{"type": "text", "content": text}]}
    if role == "assistant":
        message["finish_reason"] = "stop"
    return orjson.dumps([message]).decode()


def otlp_attributes(values: dict) -> list[dict]:
    return [{"key": key, "value": otlp_value(value)} for key, value in values.items() if value is not None]


def otlp_value(value: Any) -> dict:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [otlp_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": otlp_attributes(value)}}
    return {"stringValue": str(value)}


def _record_nanos(value: Any) -> int:
    if isinstance(value, datetime):
        value = value.isoformat()
    return nanos(value)
