import orjson
import pytest

from orchrm_dagster.contract.record import RunRecord
from orchrm_dagster.ingest.reader import SourceLine
from orchrm_dagster.contract import FastRunRecord, QuarantineKind
from orchrm_dagster.ingest import IngestSettings, Rejection, validate_line

LIMITS = IngestSettings(max_record_bytes=10_000, max_field_chars=500, max_raw_chars=200)


def record(**changes):
    base = {"run_id": "r1", "problem_id": "p1", "benchmark": "gsm8k", "question": "1+1?",
            "policy": {"name": "orch", "kind": "base", "step": None}, "plan": "<answer>2</answer>"}
    return {k: v for k, v in (base | changes).items() if v is not ...}


def check(data: bytes) -> RunRecord | FastRunRecord | Rejection:
    return validate_line(SourceLine(7, data=data), LIMITS)


def test_valid_minimal_record():
    outcome = check(orjson.dumps(record()))
    assert not isinstance(outcome, Rejection)  # the fast decoder's record: the same fields as a RunRecord's
    assert (outcome.run_id, outcome.policy.kind, outcome.subagents) == ("r1", "base", None)


@pytest.mark.parametrize("changes, field, words", [
    ({"plan": ...}, "plan", "required field is missing"),
    ({"run_id": 17}, "run_id", "valid string"),
    ({"run_id": ""}, "run_id", "at least 1 character"),
    ({"policy": {"name": "o", "kind": "finetuned"}}, "policy.kind", "'base', 'specialized' or 'checkpoint'"),
    ({"policy": {"name": "o", "kind": "base", "step": "3"}}, "policy.step", "valid integer"),
    ({"policy": "orch"}, "policy", "should be an object"),
    ({"sample_index": 1.5}, "sample_index", "valid integer"),
    ({"is_correct": "yes"}, "is_correct", "valid boolean"),
    ({"subagents": [{"agent_id": "1", "prompt_tokens": -3}]}, "subagents[0].prompt_tokens", "greater than or equal"),
    ({"created_at": "last tuesday"}, "created_at", "datetime"),
])
def test_mistyped_or_missing_fields_name_the_field(changes, field, words):
    outcome = check(orjson.dumps(record(**changes)))
    assert isinstance(outcome, Rejection)
    assert outcome.field == field and outcome.kind == QuarantineKind.INVALID_FIELD
    assert words in outcome.reason
    assert outcome.line_number == 7


def test_malformed_json_keeps_the_raw_text():
    outcome = check(b'{"run_id": "r1", "plan": "<agent>')
    assert isinstance(outcome, Rejection)
    assert outcome.reason.startswith("malformed JSON") and outcome.kind == QuarantineKind.MALFORMED_JSON
    assert outcome.raw == '{"run_id": "r1", "plan": "<agent>'


def test_non_object_line():
    outcome = check(b"[1, 2, 3]")
    assert isinstance(outcome, Rejection) and "JSON object" in outcome.reason
    assert outcome.kind == QuarantineKind.NOT_AN_OBJECT


def test_invalid_utf8_is_rejected_not_crashing():
    outcome = check(b'{"run_id": "\xff\xfe"}')
    assert isinstance(outcome, Rejection)


def test_oversize_field_is_named():
    outcome = check(orjson.dumps(record(plan="x" * 501)))
    assert isinstance(outcome, Rejection)
    assert outcome.field == "plan" and "501" in outcome.reason and outcome.run_id == "r1"
    assert outcome.kind == QuarantineKind.OVERSIZE_FIELD


def test_oversize_subagent_output_is_named():
    outcome = check(orjson.dumps(record(subagents=[{"agent_id": "1"}, {"agent_id": "2", "output": "y" * 600}])))
    assert isinstance(outcome, Rejection) and outcome.field == "subagents[1].output"


def test_oversize_line_is_truncated_in_quarantine():
    line = SourceLine(3, data=b"z" * LIMITS.max_record_bytes, oversize_bytes=50_000)
    outcome = validate_line(line, LIMITS)
    assert isinstance(outcome, Rejection)
    assert "50,000 bytes" in outcome.reason and outcome.raw_truncated and len(outcome.raw) == 200
    assert outcome.kind == QuarantineKind.OVERSIZE_RECORD


def test_unknown_fields_are_kept_not_rejected():
    outcome = check(orjson.dumps(record(surprise=1, policy={"name": "o", "kind": "base", "temperature": 0.7})))
    assert isinstance(outcome, RunRecord)
    assert outcome.model_extra == {"surprise": 1}
    assert outcome.policy.model_extra == {"temperature": 0.7}


def test_parquet_row_with_meta_as_json_text():
    outcome = validate_line(SourceLine(1, record=record(meta='{"seed": 3}')), LIMITS)
    assert not isinstance(outcome, Rejection) and outcome.meta == {"seed": 3}
