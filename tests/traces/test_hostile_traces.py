"""Hostile trace files (broken JSON, wrong types where ids, times, counts and messages go, parents that do not exist
or loop, attributes of every JSON shape): the importer never crashes, and every trace read is either a record or a
rejection with its reason, each once, numbered in file order. The records go on to the contract's own check, which
takes them or rejects them as it would any line."""

from __future__ import annotations

import json

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchrm_dagster.ingest import IngestSettings, validate_line
from orchrm_dagster.ingest.reader import SourceLine
from orchrm_dagster.traces import INTERNAL_ERROR, ImportedRun, RejectedTrace, read_traces

QUICK = settings(max_examples=120, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_text = st.text(max_size=12)
_json = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | _text,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                     max_leaves=8)
_hex_ids = st.sampled_from(["4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c",
                            "00000000000000000000000000000000"])
_span_ids = st.sampled_from(["00f067aa0ba902b7", "53995c3f42cd8ad8", "b7ad6b7169203331", "a1a1a1a1a1a1a1a1"])
_keys = st.sampled_from(["gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.agent.id", "gen_ai.usage.input_tokens",
                         "gen_ai.usage.output_tokens", "gen_ai.request.model", "gen_ai.input.messages",
                         "gen_ai.output.messages", "gen_ai.tool.name", "gen_ai.tool.call.arguments", "orchrm.plan",
                         "orchrm.problem_id", "orchrm.benchmark", "orchrm.is_correct", "orchrm.policy.kind",
                         "orchrm.policy.step", "orchrm.sample_index", "orchrm.plan_logprob", "orchrm.role",
                         "orchrm.reference_answer", "orchrm.final_answer", "orchrm.run_id", "error.type"])
_operations = st.sampled_from(["invoke_agent", "chat", "execute_tool", "text_completion", "other"])
_messages = st.builds(lambda role, text: orjson.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}]
                                                      ).decode(), st.sampled_from(["user", "assistant"]), _text)
_any_value = st.one_of(
    st.builds(lambda v: {"stringValue": v}, _text | _messages | _operations),
    st.builds(lambda v: {"intValue": v}, st.integers(-(2**66), 2**66).map(str) | _text),
    st.builds(lambda v: {"boolValue": v}, st.booleans() | _json),
    st.builds(lambda v: {"doubleValue": v}, st.floats(allow_nan=False) | _json),
    st.builds(lambda v: {"arrayValue": {"values": v}}, st.lists(st.builds(lambda s: {"stringValue": s}, _text),
                                                                   max_size=2)),
    st.builds(lambda v: {"kvlistValue": {"values": v}}, _json),
    _json)


def _maybe(strategy, other=_json):
    """Mostly `strategy`, sometimes any JSON at all."""
    return st.one_of(strategy, strategy, strategy, other)


_attribute = st.builds(lambda k, v: {"key": k, "value": v}, _maybe(_keys, _text), _any_value)
_otel_span = st.fixed_dictionaries({
    "traceId": _maybe(_hex_ids), "spanId": _maybe(_span_ids),
    "parentSpanId": _maybe(st.sampled_from(["", "00f067aa0ba902b7", "53995c3f42cd8ad8", "ffffffffffffffff"])),
    "name": _maybe(_text), "startTimeUnixNano": _maybe(st.integers(0, 2**64).map(str)),
    "endTimeUnixNano": _maybe(st.integers(0, 2**64).map(str)),
    "attributes": _maybe(st.lists(_attribute, max_size=8)),
    "status": _maybe(st.fixed_dictionaries({"code": st.integers(0, 3), "message": _text})),
})
_otel_document = st.builds(
    lambda resource, spans: {"resourceSpans": [{"resource": {"attributes": resource},
                                                "scopeSpans": [{"spans": spans}]}]},
    st.lists(_attribute, max_size=3), st.lists(_maybe(_otel_span), max_size=6))

_ids = st.sampled_from(["t-1", "t-2", "o-1", "o-2", "o-3", "r-1"])
_langfuse_observation = st.fixed_dictionaries({
    "id": _maybe(_ids), "traceId": _maybe(_ids),
    "type": _maybe(st.sampled_from(["GENERATION", "SPAN", "EVENT", "AGENT", "TOOL", "CHAIN"])),
    "parentObservationId": _maybe(st.none() | _ids), "name": _maybe(_text), "startTime": _json, "input": _json,
    "output": _json, "metadata": _json, "model": _json, "usageDetails": _json, "usage": _json, "level": _json})
_langfuse_trace = st.fixed_dictionaries({
    "id": _maybe(_ids), "timestamp": _json, "input": _json, "output": _json, "metadata": _json, "scores": _json,
    "observations": _maybe(st.lists(_maybe(_langfuse_observation), max_size=5))})
_langsmith_run = st.fixed_dictionaries({
    "id": _maybe(_ids), "trace_id": _maybe(_ids | st.none()), "parent_run_id": _maybe(st.none() | _ids),
    "run_type": _maybe(st.sampled_from(["chain", "llm", "tool", "retriever"])), "name": _maybe(_text),
    "start_time": _json, "inputs": _json, "outputs": _json, "extra": _json, "prompt_tokens": _json,
    "completion_tokens": _json, "error": _json, "child_runs": _json})


def _file(documents: list, garbage: list[bytes]) -> bytes:
    lines = [json.dumps(d).encode() for d in documents] + garbage  # json: integers past 64 bits too
    return b"\n".join(lines)


_garbage = st.lists(st.binary(max_size=40) | st.just(b'{"resourceSpans": [{"traceId": "4bf92f35'), max_size=2)


def _check(data: bytes, fmt: str) -> None:
    outcomes = read_traces(data, fmt)
    assert [o.number for o in outcomes] == list(range(1, len(outcomes) + 1))
    traces = [o.trace_id for o in outcomes if o.trace_id is not None]
    assert len(traces) == len(set(traces)), "a trace appears twice"
    limits = IngestSettings()
    for outcome in outcomes:
        if isinstance(outcome, RejectedTrace):
            assert outcome.reason and INTERNAL_ERROR not in outcome.reason, outcome.reason
            assert isinstance(outcome.raw, str)
        else:
            assert isinstance(outcome, ImportedRun) and outcome.record["meta"]["trace_id"] == outcome.trace_id
            validate_line(SourceLine(outcome.number, record=outcome.record), limits)  # a record or a Rejection
    return outcomes


def _parses(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


@QUICK
@given(st.lists(_maybe(_otel_document), max_size=4), _garbage)
def test_hostile_otlp_files(documents, garbage):
    outcomes = _check(_file(documents, garbage), "otel")
    # every trace a span of a JSON line named (with a readable id) is accounted for (a line that is not JSON is
    # quarantined whole, naming the traces it holds)
    readable = [d for d in documents if _parses(json.dumps(d))]
    named = {s["traceId"] for d in readable if isinstance(d, dict) for rs in d.get("resourceSpans", [])
             for ss in rs["scopeSpans"] for s in ss["spans"] if isinstance(s, dict)
             and s.get("traceId") in ("4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c")
             and isinstance(rs, dict)}
    assert named <= {o.trace_id for o in outcomes}


@QUICK
@given(st.lists(_maybe(_langfuse_trace | _langfuse_observation), max_size=5), _garbage, st.booleans())
def test_hostile_langfuse_exports(items, garbage, as_array):
    data = json.dumps(items).encode() if as_array else _file(items, garbage)
    _check(data, "langfuse")


@QUICK
@given(st.lists(_maybe(_langsmith_run), max_size=6), _garbage)
def test_hostile_langsmith_exports(runs, garbage):
    _check(_file(runs, garbage), "langsmith")
