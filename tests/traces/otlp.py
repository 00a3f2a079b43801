"""Hand-built OTLP JSON for the trace tests: spans with GenAI attributes, one document a line."""

from __future__ import annotations

import orjson

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
OTHER_TRACE = "a3ce929d0e0e47364bf92f3577b34da6"


def value(v) -> dict:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": v}


def messages(role: str, text: str) -> str:
    return orjson.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}]).decode()


def span(span_id: str, parent: str = "", name: str = "span", trace: str = TRACE, start: int = 1, status=None,
         **attributes) -> dict:
    found = {"traceId": trace, "spanId": span_id, "parentSpanId": parent, "name": name,
             "startTimeUnixNano": str(1_700_000_000_000_000_000 + start * 1_000_000),
             "endTimeUnixNano": str(1_700_000_000_000_000_000 + (start + 1) * 1_000_000),
             "attributes": [{"key": k.replace("__", "."), "value": value(v)} for k, v in attributes.items()]}
    if status is not None:
        found["status"] = status
    return found


def document(*spans: dict, resource: dict | None = None) -> dict:
    return {"resourceSpans": [{"resource": {"attributes": [{"key": k, "value": value(v)}
                                                            for k, v in (resource or {}).items()]},
                               "scopeSpans": [{"scope": {"name": "test"}, "spans": list(spans)}]}]}


def lines(*documents) -> bytes:
    return b"".join((d if isinstance(d, bytes) else orjson.dumps(d)) + b"\n" for d in documents)


def good_trace(trace: str = TRACE, prefix: str = "0000000000000a", **root_attributes) -> list[dict]:
    """An orchestrator, its plan, one sub-agent: a trace the mapping places."""
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "orchestrator",
                  "orchrm.problem_id": "p-1", "orchrm.benchmark": "gsm8k",
                  "gen_ai.input.messages": messages("user", "What is 2 + 2?"),
                  "gen_ai.output.messages": messages("assistant", "4"), **root_attributes}
    return [span(prefix + "01", name="invoke_agent orchestrator", trace=trace, start=0,
                 **{k.replace(".", "__"): v for k, v in attributes.items() if v is not None}),
            span(prefix + "02", prefix + "01", "chat m", trace=trace, start=1, gen_ai__operation__name="chat",
                 gen_ai__output__messages=messages("assistant", "<agent>plan</agent>")),
            span(prefix + "03", prefix + "01", "invoke_agent CoTAgent", trace=trace, start=2,
                 gen_ai__operation__name="invoke_agent", gen_ai__agent__name="CoTAgent", gen_ai__agent__id="1",
                 gen_ai__output__messages=messages("assistant", "2 + 2 = 4"))]
