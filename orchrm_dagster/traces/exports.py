"""Langfuse's and LangSmith's trace exports read into the spans `traces.mapping` places.

Langfuse (its public API's `TraceWithFullDetails`, `GET /api/public/traces/{traceId}`, as exported: a JSON array,
JSON lines, or a `{"data": [...]}` page): a trace object `{id, timestamp, name, input, output, metadata,
observations: [...], scores: [...]}` is the root; each observation `{id, traceId, type, name, parentObservationId,
startTime, endTime, input, output, metadata, model, usage | usageDetails, level, statusMessage}` a span below it.
Bare observations (`GET /api/public/observations`) are grouped by `traceId` under an empty root. Types: GENERATION is
an inference; AGENT an agent and TOOL a tool (Langfuse's typed observations); SPAN and CHAIN are agents in a trace
with no AGENT observation, else transparent; EVENT and the rest are transparent. Usage: `usageDetails.input` /
`.output`, else `usage.input` / `.output`, else `promptTokens` / `completionTokens`. Level ERROR is an error (its
`statusMessage`). A score named like `is_correct_attribute` (BOOLEAN, or NUMERIC 0/1) is the trusted verdict when
the metadata holds none.

LangSmith (its run data format, `Client.list_runs` / the runs API, as exported: a JSON array, JSON lines, a
`{"runs": [...]}` object, or runs nesting `child_runs`): each run `{id, trace_id, parent_run_id, name, run_type,
start_time, end_time, inputs, outputs, error, status, extra: {metadata, invocation_params}, prompt_tokens,
completion_tokens}` is a span; runs are grouped by `trace_id`. Types: `llm` is an inference, `chain` an agent,
`tool` a tool, the rest (retriever, embedding, prompt, parser) transparent. Tokens: `prompt_tokens` /
`completion_tokens`, else `outputs.usage_metadata` (`input_tokens` / `output_tokens`), else
`outputs.llm_output.token_usage`. Model: `extra.metadata.ls_model_name`, else `extra.invocation_params.model`.

In both, metadata keys are the attributes the settings name (`orchrm.problem_id`, or nested `{"orchrm":
{"problem_id": ...}}`), and a run's `name` is its agent name.
"""

from __future__ import annotations

from typing import Any

from orchrm_dagster.traces.mapping import AGENT, AGENT_ID, LLM, OTHER, TOOL, Span, Unplaceable
from orchrm_dagster.traces.values import count, flat, nanos, text_id
from orchrm_dagster.traces.settings import TraceSettings

_LANGFUSE_KINDS = {"GENERATION": LLM, "AGENT": AGENT, "TOOL": TOOL}
_LANGFUSE_CONTAINERS = ("SPAN", "CHAIN")  # agents where no AGENT observation is in the trace
_LANGSMITH_KINDS = {"llm": LLM, "chain": AGENT, "tool": TOOL}
_MAX_CHILD_DEPTH = 200
ROOT_PREFIX = "trace:"  # the span id of a Langfuse trace's root (observation ids are the API's own)


def _agent_id(attributes: dict) -> str | None:
    return text_id(attributes.get("agent_id")) or text_id(attributes.get(AGENT_ID))


# ---------------------------------------------------------------- Langfuse

def is_langfuse_trace(item: Any) -> bool:
    return isinstance(item, dict) and "observations" in item


def is_langfuse_observation(item: Any) -> bool:
    return isinstance(item, dict) and "traceId" in item and "type" in item and "observations" not in item


def langfuse_trace_id(item: dict) -> str | None:
    return text_id(item.get("id") if is_langfuse_trace(item) else item.get("traceId"))


def langfuse_root(trace: dict | None, trace_id: str, settings: TraceSettings) -> tuple[Span, str | None]:
    """The root span of a Langfuse trace (an empty one for bare observations), and what is wrong with the trace."""
    if trace is None:
        return Span(ROOT_PREFIX + trace_id, None, "", OTHER, 0), None
    attributes = flat(trace.get("metadata"))
    scores = trace.get("scores")
    verdict = _score_verdict(scores, settings.is_correct_attribute) if isinstance(scores, list) else None
    if verdict is not None:
        attributes.setdefault(settings.is_correct_attribute, verdict)
    name = trace.get("name") if isinstance(trace.get("name"), str) else ""
    root = Span(ROOT_PREFIX + trace_id, None, name, OTHER, 0, start_ns=nanos(trace.get("timestamp")),
                attributes=attributes, input=trace.get("input"), output=trace.get("output"))
    observations = trace.get("observations")
    if not isinstance(observations, list):
        return root, "observations is not a list"
    if any(not isinstance(o, dict) for o in observations):
        return root, ("observations are ids, not objects (the trace list's shape): export each trace with its "
                      "observations (GET /api/public/traces/{traceId})")
    return root, None


def _score_verdict(scores: list, name: str) -> bool | None:
    for score in scores:
        if not isinstance(score, dict) or score.get("name") != name:
            continue
        value, text = score.get("value"), score.get("stringValue")
        if isinstance(text, str) and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if not isinstance(value, bool) and value in (0, 1):
            return bool(value)
    return None


def langfuse_spans(trace_id: str, root: Span, observations: list[dict]) -> list[Span]:
    """The spans of a Langfuse trace: its root, then each observation."""
    typed_agents = any(o.get("type") == "AGENT" for o in observations)
    spans = [root]
    for order, observation in enumerate(observations, start=1):
        kind_name = observation.get("type") if isinstance(observation.get("type"), str) else None
        kind = _LANGFUSE_KINDS.get(kind_name, OTHER)
        if kind_name in _LANGFUSE_CONTAINERS and not typed_agents:
            kind = AGENT
        identifier = text_id(observation.get("id"))
        if identifier is None:
            raise Unplaceable(f"an observation has no id ({observation.get('id')!r})", "spans")
        parent = observation.get("parentObservationId")
        parent_id = root.span_id if parent in (None, "") else text_id(parent)
        if parent_id is None:
            raise Unplaceable(f"observation {identifier} has an invalid parentObservationId ({parent!r})", "spans")
        attributes = flat(observation.get("metadata"))
        details = observation.get("usageDetails") if isinstance(observation.get("usageDetails"), dict) else {}
        usage = observation.get("usage") if isinstance(observation.get("usage"), dict) else {}
        prompt = _first_count(details.get("input"), usage.get("input"), observation.get("promptTokens"))
        completion = _first_count(details.get("output"), usage.get("output"), observation.get("completionTokens"))
        error = None
        if observation.get("level") == "ERROR":
            message = observation.get("statusMessage")
            error = message if isinstance(message, str) and message else "error"
        name = observation.get("name") if isinstance(observation.get("name"), str) else ""
        spans.append(Span(
            identifier, parent_id, name, kind, order, start_ns=nanos(observation.get("startTime")),
            end_ns=nanos(observation.get("endTime")), attributes=attributes, input=observation.get("input"),
            output=observation.get("output"), input_tokens=prompt, output_tokens=completion,
            model=text_id(observation.get("model")) or text_id(observation.get("providedModelName")),
            agent_name=name or None, agent_id=_agent_id(attributes), error=error))
    return spans


def _first_count(*values: Any) -> int | None:
    for value in values:
        number = count(value)
        if number is not None and number >= 0:
            return number
    return None


# ---------------------------------------------------------------- LangSmith

def is_langsmith_run(item: Any) -> bool:
    return isinstance(item, dict) and ("run_type" in item or "trace_id" in item or "parent_run_id" in item)


def langsmith_runs(item: dict, depth: int = 0) -> list[dict]:
    """A run and the runs it nests (`child_runs`), each with `parent_run_id` and `trace_id` filled from its
    nesting where it has none."""
    runs = [item]
    children = item.get("child_runs")
    if isinstance(children, list) and depth < _MAX_CHILD_DEPTH:
        for child in children:
            if isinstance(child, dict):
                child = {**child}
                child.setdefault("parent_run_id", item.get("id"))
                if item.get("trace_id") is not None:
                    child.setdefault("trace_id", item.get("trace_id"))
                runs += langsmith_runs(child, depth + 1)
    return runs


def langsmith_trace_id(run: dict) -> str | None:
    trace_id = text_id(run.get("trace_id"))
    if trace_id is None and run.get("parent_run_id") in (None, ""):
        trace_id = text_id(run.get("id"))  # the root run: its id is its trace's
    return trace_id.lower() if trace_id else None


def langsmith_span(run: dict, order: int) -> Span:
    identifier = text_id(run.get("id"))
    if identifier is None:
        raise Unplaceable(f"a run has no id ({run.get('id')!r})", "spans")
    parent = run.get("parent_run_id")
    parent_id = None if parent in (None, "") else text_id(parent)
    if parent not in (None, "") and parent_id is None:
        raise Unplaceable(f"run {identifier} has an invalid parent_run_id ({parent!r})", "spans")
    extra = run.get("extra") if isinstance(run.get("extra"), dict) else {}
    attributes = flat(extra.get("metadata")) | {k: v for k, v in flat(run.get("metadata")).items()
                                                if k not in flat(extra.get("metadata"))}
    outputs = run.get("outputs") if isinstance(run.get("outputs"), dict) else {}
    usage = outputs.get("usage_metadata") if isinstance(outputs.get("usage_metadata"), dict) else {}
    llm_output = outputs.get("llm_output") if isinstance(outputs.get("llm_output"), dict) else {}
    token_usage = llm_output.get("token_usage") if isinstance(llm_output.get("token_usage"), dict) else {}
    invocation = extra.get("invocation_params") if isinstance(extra.get("invocation_params"), dict) else {}
    error = run.get("error") if isinstance(run.get("error"), str) and run.get("error") else None
    if error is None and run.get("status") == "error":
        error = "error"
    name = run.get("name") if isinstance(run.get("name"), str) else ""
    return Span(
        identifier.lower(), parent_id.lower() if parent_id else None, name,
        _LANGSMITH_KINDS.get(run.get("run_type") if isinstance(run.get("run_type"), str) else None, OTHER), order, start_ns=nanos(run.get("start_time")),
        end_ns=nanos(run.get("end_time")), attributes=attributes, input=run.get("inputs"),
        output=run.get("outputs"),
        input_tokens=_first_count(run.get("prompt_tokens"), usage.get("input_tokens"),
                                  token_usage.get("prompt_tokens")),
        output_tokens=_first_count(run.get("completion_tokens"), usage.get("output_tokens"),
                                   token_usage.get("completion_tokens")),
        model=text_id(attributes.get("ls_model_name")) or text_id(invocation.get("model"))
        or text_id(invocation.get("model_name")),
        agent_name=name or None, agent_id=_agent_id(attributes), error=error)


__all__ = ["ROOT_PREFIX", "is_langfuse_observation", "is_langfuse_trace", "is_langsmith_run", "langfuse_root",
           "langfuse_spans", "langfuse_trace_id", "langsmith_runs", "langsmith_span", "langsmith_trace_id"]
