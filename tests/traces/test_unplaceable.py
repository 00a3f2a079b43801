"""A trace the mapping cannot place is quarantined with the reason, like a bad line of a batch; the other traces of
its file are placed on their own."""

import pytest

from orchrm_dagster.contract import QuarantineKind
from orchrm_dagster.traces import ImportedRun, RejectedTrace, read_traces

from .otlp import OTHER_TRACE, TRACE, document, good_trace, lines, messages, span


def _outcomes(*spans) -> list:
    """The outcomes of a file holding the trace `spans` and, on a line of its own, a good trace."""
    return read_traces(lines(document(*spans), document(*good_trace(OTHER_TRACE, "0000000000000b"))), "otel")


def _root(**attributes):
    defaults = {"gen_ai__operation__name": "invoke_agent", "gen_ai__agent__name": "orchestrator",
                "orchrm__problem_id": "p-1", "orchrm__benchmark": "gsm8k",
                "gen_ai__input__messages": messages("user", "q")}
    return span("00000000000000a1", name="root", start=0, **{**defaults, **attributes})


def _plan(parent="00000000000000a1", span_id="00000000000000a2", **attributes):
    return span(span_id, parent, "chat", start=1, gen_ai__operation__name="chat",
                gen_ai__output__messages=messages("assistant", "<agent>plan</agent>"), **attributes)


@pytest.mark.parametrize("spans, field, reason", [
    ([_root(gen_ai__output__messages=messages("assistant", "4"))], "plan", "no plan span"),
    ([_root(), _plan()], "final_answer", "no final answer"),
    ([_root(orchrm__problem_id="", gen_ai__output__messages=messages("assistant", "4")), _plan()], "orchrm.problem_id",
     "not a non-empty string"),
    ([_root(gen_ai__output__messages=messages("assistant", "4"), orchrm__benchmark=None), _plan()], "benchmark",
     "no benchmark"),
    ([_root(gen_ai__output__messages=messages("assistant", "4"), gen_ai__input__messages=None), _plan()],
     "question", "no question"),
    ([_root(), _plan(), span("00000000000000a3", "00000000000000ff", "lost")], "spans", "orphan span"),
    ([_root(), _plan(parent="")], "spans", "2 root spans"),
    ([_root(), _plan(parent="00000000000000a3"), span("00000000000000a3", "00000000000000a2", "loop")], "spans",
     "cycle"),
    ([_root(), _plan(), _plan()], "spans", "appears twice"),
    ([_root(gen_ai__output__messages=messages("assistant", "4"), orchrm__is_correct="yes"), _plan()], "is_correct",
     "not a boolean"),
    ([_root(gen_ai__output__messages=messages("assistant", "4"), orchrm__policy__kind="finetuned"), _plan()],
     "policy.kind", "not one of base, specialized, checkpoint"),
    ([_root(gen_ai__output__messages=messages("assistant", "4")), _plan(orchrm__plan="a"),
      _plan(span_id="00000000000000a4", orchrm__plan="b")], "plan", "2 spans are carrying orchrm.plan"),
    ([_root(gen_ai__output__messages=messages("assistant", "4")),
      span("00000000000000a2", "00000000000000a1", "chat", start=1, gen_ai__operation__name="chat")], "plan",
     "has no output text"),
])
def test_an_unplaceable_trace_is_quarantined_with_its_reason_and_its_neighbour_kept(spans, field, reason):
    [rejected, kept] = _outcomes(*[s for s in spans])
    assert isinstance(rejected, RejectedTrace), rejected
    assert rejected.kind == QuarantineKind.UNPLACEABLE_TRACE and rejected.trace_id == TRACE
    assert rejected.field == field and reason in rejected.reason, rejected.reason
    assert rejected.reason.startswith(f"trace {TRACE} (line 1): ")
    assert isinstance(kept, ImportedRun) and kept.number == 2 and kept.record["run_id"] == OTHER_TRACE


def test_a_run_whose_orchestrator_failed_keeps_its_error_and_needs_no_final_answer():
    [failed, _] = _outcomes(_root(status={"code": 2, "message": "the sub-agent endpoint timed out"}), _plan())
    assert isinstance(failed, ImportedRun)
    assert failed.record["error"] == "the sub-agent endpoint timed out" and "final_answer" not in failed.record


def test_a_line_that_is_not_json_is_quarantined_and_so_are_the_traces_it_may_have_cut():
    cut_trace, whole_trace = TRACE, OTHER_TRACE
    [root, plan, agent] = good_trace(cut_trace)
    broken = b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + cut_trace.encode() + b'", "spanId": '
    data = lines(document(root, plan), broken, document(agent), document(*good_trace(whole_trace, "0000000000000b")))
    outcomes = read_traces(data, "otel")
    assert [type(o).__name__ for o in outcomes] == ["RejectedTrace", "RejectedTrace", "ImportedRun"]
    cut, line, whole = outcomes
    assert (cut.trace_id, cut.kind) == (cut_trace, QuarantineKind.UNPLACEABLE_TRACE)
    assert "line 2, which holds spans of this trace, is not valid JSON" in cut.reason
    assert (line.trace_id, line.kind) == (None, QuarantineKind.MALFORMED_JSON)
    assert line.reason == f"line 2 is not valid JSON (it names trace {cut_trace})"
    assert line.raw == broken.decode()
    assert whole.record["run_id"] == whole_trace and [o.number for o in outcomes] == [1, 2, 3]


def test_a_span_that_names_no_trace_quarantines_its_line_and_the_traces_read_on_it():
    headless = span("00000000000000c1", name="no trace")
    headless["traceId"] = "not hex!"
    data = lines(document(*good_trace(TRACE), headless), document(*good_trace(OTHER_TRACE, "0000000000000b")))
    line, first, other = read_traces(data, "otel")  # the line's rejection, then the traces read on it
    assert first.trace_id == TRACE and "line 1 also holds a span this importer cannot read" in first.reason
    assert line.trace_id is None and "no valid traceId" in line.reason
    assert isinstance(other, ImportedRun)


def test_documents_of_another_shape_are_quarantined_as_lines():
    outcomes = read_traces(lines([1, 2], {"spans": []}, document(*good_trace())) + b"\n\n", "otel")
    assert [o.kind for o in outcomes[:2]] == [QuarantineKind.UNPLACEABLE_TRACE] * 2
    assert "JSON object with resourceSpans" in outcomes[0].reason and "no resourceSpans" in outcomes[1].reason
    assert isinstance(outcomes[2], ImportedRun) and read_traces(b"\n \n", "otel") == []


def test_a_pretty_printed_document_is_read_whole():
    import orjson

    data = orjson.dumps(document(*good_trace()), option=orjson.OPT_INDENT_2)
    [run] = read_traces(data, "otel")
    assert isinstance(run, ImportedRun) and run.record["final_answer"] == "4"
    assert run.record["subagents"] == [{"agent_id": "1", "agent_name": "CoTAgent", "output": "2 + 2 = 4"}]
