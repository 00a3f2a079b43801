"""The fast decoder agrees with the contract: whatever line it accepts, pydantic's `RunRecord` accepts too, with the
same values, field for field and type for type; whatever it declines goes to pydantic (which words the error).

Lines are generated as a hostile producer might write them: any JSON value in any field, values at the edges of
each type, duplicate keys, timestamps in many spellings, escapes, control characters and invalid UTF-8.
"""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from orchrm_dagster.contract import RunRecord, fast_record
from tests.ingest.test_any_record import ANY_FIELD, _set, any_value, good_record

PROPERTY = settings(max_examples=400, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

MOMENTS = ["2026-11-01T12:00:00Z", "2026-11-01T12:00:00+05:00", "2026-11-01T12:00:00", "2026-11-01 12:00:00",
           "2026-11-01t12:00:00z", "2026-11-01T12:00:00.1234567Z", "2026-11-01T12:00:60Z", "2026-11-01T24:00:00Z",
           "2026-11-01", "2026-11-01T12:00Z", "20261101T120000Z", "0001-01-01T00:00:00+01:00", "1700000000",
           "2026-02-30T00:00:00Z", "2026-11-01T12:00:00-23:59", "2026-11-01T12:00:00+24:00", " 2026-11-01T12:00:00Z"]


def plain(value):
    """A record as nested builtins, whichever decoder made it; its repr tells 1 from 1.0 and equals NaN to NaN."""
    if isinstance(value, BaseModel):
        assert not value.model_extra  # the fast decoder declines unknown fields: it must never see one accepted
        return {name: plain(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, msgspec.Struct):
        return {name: plain(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def assert_agrees(line: bytes) -> None:
    try:
        _assert_agrees(line.decode())  # Parquet rows reach the decoders as text
    except UnicodeDecodeError:
        pass
    _assert_agrees(line)


def _assert_agrees(line: bytes | str) -> None:
    fast = fast_record(line)
    if fast is None:
        return
    try:
        exact = RunRecord.model_validate_json(line)
    except ValidationError as err:
        pytest.fail(f"the fast decoder accepted a line the contract refuses: {line!r}\n{err}")
    assert repr(plain(fast)) == repr(plain(exact)), line


def _dumps(record) -> bytes:
    return json.dumps(record, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")


edited_records = st.builds(lambda i, path, value: _set(good_record(i), path, value),
                           st.integers(0, 3), st.sampled_from(ANY_FIELD), any_value)


@PROPERTY
@given(edited_records, st.booleans())
def test_any_value_in_any_field(record, ascii_escapes):
    line = json.dumps(record, ensure_ascii=ascii_escapes, allow_nan=True).encode("utf-8", "surrogatepass")
    assert_agrees(line)


@PROPERTY
@given(st.integers(0, 3), st.sampled_from(ANY_FIELD), st.sampled_from(MOMENTS) | st.integers() | st.floats())
def test_timestamps_in_any_spelling(index, path, moment):
    assert_agrees(_dumps(_set(good_record(index), "created_at", moment)))
    assert_agrees(_dumps(_set(good_record(index), path, moment)))


@PROPERTY
@given(edited_records, st.data())
def test_duplicate_keys_take_the_same_value(record, data):
    key = data.draw(st.sampled_from(sorted(record)))
    second = data.draw(any_value)
    line = _dumps(record)
    assert_agrees(line[:-1] + b", " + _dumps(key) + b": " + _dumps(second) + b"}")
    assert_agrees(b'{' + _dumps(key) + b": " + _dumps(second) + b", " + line[1:])


@PROPERTY
@given(edited_records, st.data())
def test_any_byte_changed(record, data):
    line = bytearray(_dumps(record))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(line) - 1))
        line[at] = data.draw(st.sampled_from([0x00, 0x09, 0x0A, 0x1F, 0x22, 0x5C, 0x7F, 0x80, 0xC3, 0xED, 0xFF])
                             | st.integers(0, 255))
    assert_agrees(bytes(line))


@pytest.mark.parametrize("line", [
    b'{"run_id":"r","problem_id":"p","benchmark":"b","question":"q","policy":{"name":"n","kind":"base"},"plan":"x",'
    + tail for tail in [
        b'"sample_index":1.0}', b'"sample_index":1e2}', b'"sample_index":true}', b'"sample_index":"1"}',
        b'"sample_index":-0}', b'"plan_logprob":3}', b'"plan_logprob":1e400}', b'"plan_logprob":-0.0}',
        b'"sample_index":18446744073709551616}', b'"sample_index":9223372036854775808}', b'"is_correct":1}',
        b'"question":"\\ud800"}', b'"error":"\\u0000\\n\\t"}', b'"error":"\t"}', b'"meta":{"a":1,"a":2}}',
        b'"meta":[]}', b'"meta":{"x":NaN}}', b'"tokens":{"orchestrator":-1}}', b'"tokens":{"orchestrator":0}}',
        b'"subagents":[{"agent_id":"1","extra":1}]}', b'"subagents":[]}', b'"subagents":{}}',
        b'"created_at":"2026-11-01T12:00:00.000001+00:00"}', b'"created_at":null}', b'"reference_answer":null}',
        b'"policy":{"name":"","kind":"base"}}', b'"policy":{"name":"n","kind":"Base"}}', b'"x":1}',
    ]
] + [b"[]", b"null", b"{}", b"", b"{", b'{"run_id":"r"} trailing', "\ufeff{}".encode(),
      b'{"meta":' + b"[" * 100_000 + b"]" * 100_000 + b"}", b'{"run_id":' + b"[" * 100_000 + b"]" * 100_000 + b"}"])
def test_edge_lines(line):
    assert_agrees(line)


def test_the_common_record_takes_the_fast_path():
    line = _dumps(good_record(1) | {"meta": None})
    assert fast_record(line) is not None
    assert fast_record(_dumps(good_record(1) | {"surprise": 1})) is None  # unknown fields: pydantic keeps them
