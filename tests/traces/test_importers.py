"""The fixtures (written by hand from the specifications: OTel GenAI semantic conventions v1.41.0, Langfuse's public
API trace, LangSmith's run data format) import to the records expected, and their broken traces are quarantined with
the reason, the good traces of the same file kept."""

from pathlib import Path

import orjson
import pytest

from orchrm_dagster.contract import QuarantineKind, RunRecord
from orchrm_dagster.traces import (FORMAT_SUFFIXES, ImportedRun, RejectedTrace, TraceSettings, landing_name,
                                   read_trace_file, read_traces, trace_format)

FIXTURES = Path(__file__).parent / "fixtures"

OTEL_RUN = {
    "run_id": "5b8aa5a2d2c872e8321cf37308d69df2", "problem_id": "gsm8k-test-0000", "benchmark": "gsm8k",
    "question": "Janet's ducks lay 16 eggs per day. How many dollars does she make?",
    "policy": {"name": "team-orchestrator-v2", "kind": "specialized"},
    "plan": "<agent><agent_id>1</agent_id><agent_name>CoTAgent</agent_name></agent>\n<agent><agent_id>2</agent_id>"
            "<agent_name>ReflexionAgent</agent_name></agent>\n<edge>1->2</edge>",
    "final_answer": "She makes $18 every day.", "reference_answer": "18", "sample_index": 3,
    "subagents": [
        # the agent's input is its own span's; its output the last of its chat spans'; its tokens theirs summed
        {"agent_id": "1", "agent_name": "CoTAgent", "input": "Compute 16 - 3 - 4 eggs, times $2.",
         "output": "9 x $2 = $18", "prompt_tokens": 400, "completion_tokens": 80, "model": "SmolLM2-135M-Instruct"},
        # a tool the orchestrator calls itself is a call too: its arguments and result as given
        {"agent_id": "call_7", "agent_name": "calculator", "input": '{"expression": "9*2"}', "output": "18"}],
    "tokens": {"orchestrator_prompt": 412, "orchestrator_completion": 118, "subagent_prompt": 400,
               "subagent_completion": 80},
    "created_at": "2026-11-01T00:00:00+00:00",
    "meta": {"trace_id": "5b8aa5a2d2c872e8321cf37308d69df2", "trace_format": "otel", "trace_spans": 6,
             "trace_span_id": "051581bf3cb55c13"},  # the orchestrator's span
}

LANGFUSE_RUN = {
    "run_id": "lf-trace-1", "problem_id": "hotpotqa-dev-0007", "benchmark": "hotpotqa",
    "question": "Which city is the capital of the country where the Eiffel Tower stands?",
    "policy": {"name": "lf-orchestrator", "kind": "base"},  # nested metadata, read dotted
    "plan": "<agent><agent_id>1</agent_id><agent_name>SearchAgent</agent_name></agent>\n<edge></edge>",
    "final_answer": "Paris", "reference_answer": "Paris", "is_correct": True,  # a BOOLEAN score of that name
    "subagents": [{"agent_id": "1", "agent_name": "SearchAgent",
                   "input": "Find the country of the Eiffel Tower, then its capital.",
                   "output": "The Eiffel Tower is in France; its capital is Paris.", "prompt_tokens": 200,
                   "completion_tokens": 30, "model": "llama-3-8b-instruct"}],
    "tokens": {"orchestrator_prompt": 500, "orchestrator_completion": 90, "subagent_prompt": 200,
               "subagent_completion": 30},
    "created_at": "2026-11-02T10:00:00+00:00",
    "meta": {"trace_id": "lf-trace-1", "trace_format": "langfuse", "trace_spans": 5,
             "trace_span_id": "trace:lf-trace-1"},  # the trace itself is the orchestrator
}

LANGSMITH_RUN = {
    "run_id": "7b1e0c2a-0000-4000-8000-000000000001", "problem_id": "math500-0042", "benchmark": "math500",
    "question": "Solve 2x + 1 = 7.", "policy": {"name": "orchestrator", "kind": "base"},  # the root run's name
    "plan": "<agent><agent_id>1</agent_id><agent_name>VerifierAgent</agent_name></agent>\n<edge></edge>",
    "final_answer": "x = 3", "reference_answer": "3", "is_correct": True,
    "subagents": [{"agent_id": "1", "agent_name": "VerifierAgent", "input": "Check x = 3 in 2x + 1 = 7.",
                   "output": "2*3 + 1 = 7: x = 3 holds.", "prompt_tokens": 700, "completion_tokens": 100,
                   "model": "gpt-4o-mini"},
                  {"agent_id": "2", "agent_name": "python_repl", "input": "print(2*3+1)", "output": "7"}],
    # the root chain's own counts (everything below it) are not the orchestrator's: its llm run's are
    "tokens": {"orchestrator_prompt": 1200, "orchestrator_completion": 300, "subagent_prompt": 700,
               "subagent_completion": 100},
    "created_at": "2026-11-03T09:00:00+00:00",
    "meta": {"trace_id": "7b1e0c2a-0000-4000-8000-000000000001", "trace_format": "langsmith", "trace_spans": 5,
             "trace_span_id": "7b1e0c2a-0000-4000-8000-000000000001"},  # the root run
}


@pytest.mark.parametrize("name, fmt, expected, rejected_id, field, reason", [
    ("team.otlp.jsonl", "otel", OTEL_RUN, "0af7651916cd43dd8448eb211c80319c", "problem_id",
     "(line 2): no problem: no orchrm.problem_id attribute"),
    ("team.langfuse.json", "langfuse", LANGFUSE_RUN, "lf-trace-2", "plan", "(item 2): no plan span"),
    ("team.langsmith.jsonl", "langsmith", LANGSMITH_RUN, "9c4f1d3e-0000-4000-8000-000000000010", "spans",
     "names parent 9c4f1d3e-0000-4000-8000-0000000000ff, which is not in the trace (an orphan span"),
])
def test_each_format_imports_to_the_expected_record_and_quarantines_its_broken_trace(name, fmt, expected,
                                                                                     rejected_id, field, reason):
    imported, rejected = read_trace_file(FIXTURES / name, fmt)
    assert isinstance(imported, ImportedRun) and imported.number == 1
    assert imported.record == expected
    RunRecord.model_validate_json(orjson.dumps(imported.record))  # the contract takes it
    assert isinstance(rejected, RejectedTrace) and rejected.number == 2
    assert (rejected.trace_id, rejected.kind, rejected.field) == (rejected_id, QuarantineKind.UNPLACEABLE_TRACE,
                                                                  field)
    assert rejected.reason.startswith(f"trace {rejected_id} ") and reason in rejected.reason
    assert rejected_id in rejected.raw  # what was read of it, for the quarantine's raw


def test_settings_name_the_attributes_and_fill_in_what_a_trace_lacks():
    settings = TraceSettings(problem_id_attribute="team.problem", default_benchmark="gsm8k",
                             default_policy_kind="specialized")
    data = (FIXTURES / "team.otlp.jsonl").read_bytes().replace(b'"orchrm.problem_id"', b'"team.problem"')
    [first, second] = read_traces(data, "otel", settings)
    assert first.record["problem_id"] == "gsm8k-test-0000"
    assert first.record["policy"] == {"name": "team-orchestrator-v2", "kind": "specialized"}  # its own kind wins
    # still no problem id in the second trace: quarantined whatever the defaults
    assert isinstance(second, RejectedTrace) and "team.problem" in second.reason


def test_the_orchestrator_and_its_plan_span_can_be_named():
    # the orchestrator named: the plan is its first chat span; a plan span named: that one
    data = (FIXTURES / "team.otlp.jsonl").read_bytes()
    [first, _] = read_traces(data, "otel", TraceSettings(orchestrator_agent="orchestrator"))
    assert first.record == OTEL_RUN
    [unknown, _] = read_traces(data, "otel", TraceSettings(orchestrator_agent="planner"))
    assert isinstance(unknown, RejectedTrace) and "no agent span named 'planner'" in unknown.reason
    [named, _] = read_traces(data, "otel", TraceSettings(plan_span="chat gpt-4o-mini"))
    assert named.record == OTEL_RUN


def test_trace_files_are_known_by_their_suffix_and_land_under_one():
    from orchrm_dagster.storage import LANDING_SUFFIXES

    assert all(suffix in LANDING_SUFFIXES for suffixes in FORMAT_SUFFIXES.values() for suffix in suffixes)
    # a trace suffix is found before .jsonl, which ends some of them (a name taken lands as name-hash + suffix)
    assert [s for s in LANDING_SUFFIXES if "a.otlp.jsonl".endswith(s)][0] == ".otlp.jsonl"
    assert trace_format("x.otlp.json") == "otel" and trace_format("x.langsmith.jsonl") == "langsmith"
    assert trace_format("runs.jsonl") is None and trace_format("x.parquet") is None
    assert landing_name("spans.jsonl", "otel") == "spans.otlp.jsonl"
    assert landing_name("export.json", "langfuse") == "export.langfuse.json"
    assert landing_name("a.otlp.json", "otel") == "a.otlp.json"
    assert landing_name("dump", "langsmith") == "dump.langsmith.json"
