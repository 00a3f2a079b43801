"""Any record costs only its own line: property-based tests over the artifact contract (docs/artifact-format.md).

Generated batches mix good records with records holding any JSON value in any field, or a value at the edge of
its type's storable range (orchrm_dagster/contract/storable.py). Whatever the mix: the ingest succeeds, every good
record is stored equal to its input, every other line is either stored equal to its input or quarantined with
its line number and a reason, values with a known storable range land on the right side of it, and ingesting
the same file again changes nothing.
"""

from __future__ import annotations

import json
import math
import tempfile
from datetime import datetime, timedelta, timezone

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchrm_dagster.ingest.batch import ingest_batch
from orchrm_dagster.storage.root import StorageRoot

FAST = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
EDGE_INTS = [0, 1, -1, INT64_MAX, INT64_MAX + 1, INT64_MIN, INT64_MIN - 1, 2**64 - 1, 2**64, 10**30, -(10**30)]
EDGE_FLOATS = [math.nan, math.inf, -math.inf, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324, -0.0]
LONE_SURROGATES = ["\ud800", "ok \udfff", "\udbff\udc00\ud800"]
UTC = timezone.utc

ints = st.sampled_from(EDGE_INTS) | st.integers()
floats = st.sampled_from(EDGE_FLOATS) | st.floats()
texts = st.text(max_size=20) | st.sampled_from(LONE_SURROGATES)
offsets = st.timedeltas(min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59)
                        ).map(lambda d: timezone(timedelta(minutes=d // timedelta(minutes=1))))
moments = (
    st.datetimes(timezones=st.none() | offsets)
    | st.builds(lambda tz: datetime(1, 1, 1, tzinfo=tz), offsets)  # before year 1 in UTC when the offset is > 0
    | st.builds(lambda tz: datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=tz), offsets)  # past 9999 when < 0
)
scalars = st.none() | st.booleans() | ints | floats | texts
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)
deep = st.sampled_from([5, 100, 190, 201, 256, 400]).map(lambda depth: {"deep": [[]] if depth < 2 else
                                                                         json.loads("[" * depth + "]" * depth)})


def good_record(index: int) -> dict:
    return {
        "run_id": f"good-{index}", "problem_id": f"gsm8k-test-{index:04d}", "benchmark": "gsm8k",
        "question": "How many eggs? é ∑ 😀", "plan": f"<agent><agent_id>{index}</agent_id></agent>",
        "policy": {"name": "base-orchestrator", "kind": "base", "step": index},
        "sample_index": index, "plan_logprob": -0.25 * index, "is_correct": index % 2 == 0,
        "tokens": {"orchestrator_prompt": 10, "orchestrator_completion": 7, "subagents": 5},
        "subagents": [{"agent_id": "1", "prompt_tokens": 3, "completion_tokens": 4, "model": "m"}],
        "created_at": "2026-11-01T12:00:00+05:00", "meta": {"seed": index, "tags": ["a", None, 1.5]},
    }


# Fields whose storable range is known exactly: (path, values, in range?)
RANGED = {
    "sample_index": (ints, lambda v: INT64_MIN <= v <= INT64_MAX),
    "policy.step": (ints, lambda v: INT64_MIN <= v <= INT64_MAX),
    "tokens.orchestrator_prompt": (ints.filter(lambda v: v >= 0), lambda v: v + 7 <= INT64_MAX),  # + the completion (7)
    "subagents.0.prompt_tokens": (ints.filter(lambda v: v >= 0), lambda v: v <= INT64_MAX),
    "plan_logprob": (floats, math.isfinite),
    "question": (texts, lambda v: not any("\ud800" <= c <= "\udfff" for c in v)),
    "meta.x": (json_values, lambda v: _json_storable(v)),
    "created_at": (moments.map(datetime.isoformat), lambda v: _in_utc_range(datetime.fromisoformat(v))),
}
# Any JSON value, or any edge value, in any field (its outcome is only: kept equal to its input, or quarantined).
ANY_FIELD = ["run_id", "problem_id", "benchmark", "question", "plan", "reference_answer", "final_answer", "error",
             "sample_index", "plan_logprob", "is_correct", "created_at", "meta", "policy", "policy.name",
             "policy.kind", "policy.step", "policy.surprise", "tokens", "tokens.orchestrator", "tokens.subagent_prompt",
             "subagents", "subagents.0", "subagents.0.agent_id", "subagents.0.agent_name", "subagents.0.model",
             "subagents.0.completion_tokens", "subagents.0.surprise", "surprise", "meta.x"]
any_value = json_values | moments.map(datetime.isoformat) | deep


def _json_storable(value) -> bool:
    if isinstance(value, dict):
        return all(_json_storable(k) and _json_storable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_storable(v) for v in value)
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return INT64_MIN <= value <= INT64_MAX
    if isinstance(value, float):
        return math.isfinite(value)
    return not any("\ud800" <= c <= "\udfff" for c in value)


def _in_utc_range(moment: datetime) -> bool:
    try:
        moment.astimezone(UTC) if moment.tzinfo else moment
    except OverflowError:
        return False
    return True


def _set(record: dict, path: str, value) -> dict:
    record = json.loads(json.dumps(record))
    *parents, last = path.split(".")
    target = record
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
        if not isinstance(target, (dict, list)):
            return record
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return record


@st.composite
def batches(draw, edits):
    """(records in file order, {line: in range? (None: unknown)}, the lines of the good records)."""
    n_good = draw(st.integers(1, 4))
    good = [good_record(i) for i in range(n_good)]
    edited = []
    for i in range(draw(st.integers(1, 10))):
        path, value, in_range = draw(edits)
        record = _set(good_record(100 + i), path, value)
        if path != "run_id":
            record["run_id"] = f"edge-{i}"
        elif isinstance(value, str) and value.startswith(("good-", "edge-")):
            value = record["run_id"] = f"x{value}"
        edited.append((record, in_range))
    order = draw(st.permutations([(r, True) for r in good] + edited))
    records = [r for r, _ in order]
    good_lines = {line for line, r in enumerate(records, 1) if str(r["run_id"]).startswith("good-")}
    return records, {line: ok for line, (_, ok) in enumerate(order, 1)}, good_lines


ranged_edit = st.sampled_from(sorted(RANGED)).flatmap(
    lambda path: RANGED[path][0].map(lambda value: (path, value, RANGED[path][1](value))))
any_edit = st.tuples(st.sampled_from(ANY_FIELD), any_value, st.none())


def _jsonl(records: list[dict]) -> bytes:
    # json (not orjson) writes what a hostile producer might: NaN, Infinity, big integers, \ud800 escapes
    return b"".join(json.dumps(r, ensure_ascii=True, allow_nan=True).encode() + b"\n" for r in records)


def _expected_row(record: dict) -> dict:
    tokens = record.get("tokens") or {}
    created = record.get("created_at")
    if created is not None:
        created = datetime.fromisoformat(created)
        created = created.astimezone(UTC) if created.tzinfo else created.replace(tzinfo=UTC)
    known = {"run_id", "problem_id", "benchmark", "question", "plan", "policy", "reference_answer", "sample_index",
             "final_answer", "subagents", "tokens", "plan_logprob", "is_correct", "error", "created_at", "meta"}
    meta = dict(record.get("meta") or {})
    meta.update({k: v for k, v in record.items() if k not in known})
    meta.update({f"policy.{k}": v for k, v in record["policy"].items() if k not in ("name", "kind", "step")})
    orchestrator = tokens.get("orchestrator")
    if orchestrator is None and tokens.get("orchestrator_prompt") is not None:
        orchestrator = tokens["orchestrator_prompt"] + (tokens.get("orchestrator_completion") or 0)
    return {
        "run_id": record["run_id"], "question": record["question"], "plan": record["plan"],
        "policy_name": record["policy"]["name"], "policy_step": record["policy"].get("step"),
        "sample_index": record.get("sample_index"), "plan_logprob": record.get("plan_logprob"),
        "created_at": created, "orchestrator_tokens": orchestrator, "meta": meta or None,
    }


def _stored(root: StorageRoot, batch_id: str) -> tuple[dict[int, dict], dict[int, dict]]:
    def rows(table):
        return [row for path in root.batch_files(table, batch_id) for row in pq.read_table(path).to_pylist()]

    runs = {row["line_number"]: row for row in rows("runs")}
    calls: dict[int, list] = {}
    for call in sorted(rows("subagent_calls"), key=lambda c: (c["line_number"], c["call_index"])):
        calls.setdefault(call["line_number"], []).append(call["completion_tokens"])
    for line, row in runs.items():
        row["meta"] = orjson.loads(row["meta"]) if row["meta"] is not None else None
        row["call_completion_tokens"] = calls.get(line, [])  # what subagent_calls holds for the run
    return runs, {row["line_number"]: row for row in rows("quarantine")}


def _check(root, batch_id, source_path, name, records, in_range, good_lines, expected_row):
    report = ingest_batch(root, batch_id, source_path)  # never raises: the batch succeeds whatever it holds
    runs, quarantine = _stored(root, batch_id)
    assert report.runs_written == len(runs) and report.quarantined == len(quarantine)
    for line, record in enumerate(records, 1):
        ok = in_range[line]
        if line in runs:
            assert line not in quarantine
            stored = runs[line]
            assert {k: stored[k] for k in expected_row(record)} == expected_row(record), f"line {line} changed"
            assert ok is not False, f"line {line}: a value out of its storable range was kept"
        else:
            assert line in quarantine, f"line {line} was neither stored nor quarantined"
            row = quarantine[line]
            assert row["reason"].startswith(f"{name}:{line}: ") and len(row["reason"]) > len(f"{name}:{line}: ")
            assert line not in good_lines, f"good line {line} was lost: {row['reason']}"
            assert ok is not True, f"line {line}: an in-range value was quarantined: {row['reason']}"
    assert report.lines_read == len(records) == len(runs) + len(quarantine)
    again = ingest_batch(root, batch_id, source_path)
    assert (again.runs_written, again.quarantined) == (report.runs_written, report.quarantined)
    assert _stored(root, batch_id)[0].keys() == runs.keys()


def _ingest_jsonl(data):
    records, in_range, good_lines = data
    with tempfile.TemporaryDirectory() as tmp:
        root = StorageRoot(f"{tmp}/storage")
        path = f"{tmp}/edge.jsonl"
        with open(path, "wb") as out:
            out.write(_jsonl(records))
        _check(root, "edge.jsonl", path, "edge.jsonl", records, in_range, good_lines, _expected_row)


@FAST
@given(batches(ranged_edit))
def test_values_at_the_edge_of_their_range_cost_only_their_own_line(data):
    _ingest_jsonl(data)


@FAST
@given(batches(any_edit))
def test_any_json_value_in_any_field_costs_only_its_own_line(data):
    _ingest_jsonl(data)


# ---------------------------------------------------------------- Parquet batches

TIMESTAMP_TYPES = [pa.timestamp("us", tz="UTC"), pa.timestamp("us"), pa.timestamp("us", tz="-05:00"),
                   pa.timestamp("ms", tz="+09:30"), pa.timestamp("s")]
_LIMIT_US = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)
             ) // timedelta(microseconds=1)
_EPOCH_FIRST_US = (datetime(1, 1, 1, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
edge_micros = st.sampled_from([0, _LIMIT_US, _LIMIT_US + 1, _EPOCH_FIRST_US, _EPOCH_FIRST_US - 1, 2**62, -(2**62)]
                              ) | st.integers(-(2**62), 2**62)
_UNIT_US = {"s": 1_000_000, "ms": 1000, "us": 1}
_COMPLETION = 7  # tokens.orchestrator_completion of every Parquet row: the stored total is prompt + 7
PARQUET_FIELDS = ("sample", "logprob", "micros", "meta", "prompt", "call_tokens")
EDGE_PROMPTS = [0, INT64_MAX - _COMPLETION, INT64_MAX - _COMPLETION + 1, INT64_MAX, 2**64 - 1]


@st.composite
def parquet_batches(draw):
    n_good, n_edge = draw(st.integers(1, 3)), draw(st.integers(1, 8))
    index_type = draw(st.sampled_from([pa.int64(), pa.uint64(), pa.int32()]))
    time_type = draw(st.sampled_from(TIMESTAMP_TYPES))
    rows, in_range = [], []
    for i in range(n_good + n_edge):
        edge = i >= n_good
        # an edge row edits one or two fields, the others keep good values: what decides its fate is what it edited
        edited = draw(st.sets(st.sampled_from(PARQUET_FIELDS), min_size=1, max_size=2)) if edge else set()
        sample = draw(st.sampled_from(EDGE_INTS) | st.integers()) if "sample" in edited else i
        low, high = (0, 2**64 - 1) if index_type == pa.uint64() else ((-(2**31), 2**31 - 1) if index_type == pa.int32()
                                                                       else (INT64_MIN, INT64_MAX))
        sample = min(max(sample, low), high)  # what the column type holds at all
        logprob = draw(st.sampled_from(EDGE_FLOATS) | st.floats() | st.none()) if "logprob" in edited else -0.5
        micros = draw(edge_micros) if "micros" in edited else 1_700_000_000_000_000
        micros -= micros % _UNIT_US[time_type.unit]
        micros = max(min(micros, 2**62), -(2**62))
        meta = draw(st.none() | json_values.map(lambda v: json.dumps({"x": v}, allow_nan=True))) if "meta" in edited else '{"seed": 1}'
        # a struct column (tokens, its prompt count a uint64) and a list of structs (subagents)
        prompt = draw(st.sampled_from(EDGE_PROMPTS) | st.integers(0, 2**64 - 1)) if "prompt" in edited else 10
        call_tokens = draw(st.sampled_from(EDGE_INTS) | st.integers(INT64_MIN, INT64_MAX)) if "call_tokens" in edited else 3
        call_tokens = min(max(call_tokens, INT64_MIN), INT64_MAX)
        rows.append({"run_id": f"{'edge' if edge else 'good'}-{i}", "sample_index": sample, "plan_logprob": logprob,
                     "micros": micros, "meta": meta, "prompt": prompt, "call_tokens": call_tokens})
        ok = (sample <= INT64_MAX and (logprob is None or math.isfinite(logprob))
              and _EPOCH_FIRST_US <= micros <= _LIMIT_US
              and prompt + _COMPLETION <= INT64_MAX and call_tokens >= 0)  # counts are >= 0 by the contract
        in_range.append(ok if meta is None or meta == '{"seed": 1}' else (ok and None))
    order = draw(st.permutations(range(len(rows))))
    return [rows[i] for i in order], [in_range[i] for i in order], index_type, time_type


def _parquet_table(rows, index_type, time_type) -> pa.Table:
    n = len(rows)
    return pa.table({
        "run_id": [r["run_id"] for r in rows], "problem_id": ["p"] * n, "benchmark": ["gsm8k"] * n,
        "question": ["q"] * n, "plan": ["<agent></agent>"] * n,
        "policy": pa.array([{"name": "base", "kind": "base", "step": None}] * n),
        "sample_index": pa.array([r["sample_index"] for r in rows], index_type),
        "plan_logprob": pa.array([r["plan_logprob"] for r in rows], pa.float64()),
        "created_at": pa.array([r["micros"] // _UNIT_US[time_type.unit] for r in rows], pa.int64()).cast(time_type),
        "meta": pa.array([r["meta"] for r in rows], pa.string()),
        "tokens": pa.array([{"orchestrator_prompt": r.get("prompt", 10), "orchestrator_completion": _COMPLETION}
                            for r in rows],
                           pa.struct([("orchestrator_prompt", pa.uint64()), ("orchestrator_completion", pa.int64())])),
        "subagents": pa.array([[{"agent_id": "1", "completion_tokens": r.get("call_tokens", 3)}] for r in rows],
                              pa.list_(pa.struct([("agent_id", pa.string()), ("completion_tokens", pa.int64())]))),
    })


@FAST
@given(parquet_batches())
def test_parquet_values_at_the_edge_of_their_range_cost_only_their_own_row(data):
    rows, in_range, index_type, time_type = data

    def expected(row):
        created = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=row["micros"])
        return {"run_id": row["run_id"], "sample_index": row["sample_index"], "plan_logprob": row["plan_logprob"],
                "created_at": created, "orchestrator_tokens": row["prompt"] + _COMPLETION, "n_subagent_calls": 1,
                "call_completion_tokens": [row["call_tokens"]]}

    with tempfile.TemporaryDirectory() as tmp:
        root = StorageRoot(f"{tmp}/storage")
        path = f"{tmp}/edge.parquet"
        pq.write_table(_parquet_table(rows, index_type, time_type), path)
        records = [{**row, "meta": None} for row in rows]
        _check(root, "edge.parquet", path, "edge.parquet", records, dict(enumerate(in_range, 1)),
               {line for line, r in enumerate(rows, 1) if r["run_id"].startswith("good-")}, expected)


# ---------------------------------------------------------------- what Hypothesis found, kept as plain cases

FOUND_IN_JSONL = [  # (field edited, value, the quarantined field) of each minimal failing example
    ("created_at", "0001-01-01T00:00:00+00:01", "created_at"),  # year 0 in UTC: the whole file failed
    ("meta.x", math.nan, "meta.x"),  # stored as null: the value changed
    # the total (prompt + completion, 7) overflowed: named by the record's field, not the column it fills
    ("tokens.orchestrator_prompt", INT64_MAX, "tokens.orchestrator_prompt"),
    ("subagents.0.surprise", 2**64, "subagents[0].surprise"),  # an unknown sub-agent key past 64 bits
    ("tokens.orchestrator_completion", 2**64, "tokens.orchestrator_completion"),  # a part over: it is named itself
    ("surprise", 2**64, "surprise"),  # an unknown field: named as the record holds it, not as meta keeps it
    ("policy.surprise", math.inf, "policy.surprise"),
]


@pytest.mark.parametrize("path, value, field", FOUND_IN_JSONL)
def test_found_unstorable_values_cost_only_their_line(tmp_path, path, value, field):
    records = [good_record(0), _set(good_record(1) | {"run_id": "edge"}, path, value), good_record(2)]
    (tmp_path / "found.jsonl").write_bytes(_jsonl(records))
    root = StorageRoot(str(tmp_path / "storage"))
    report = ingest_batch(root, "found", str(tmp_path / "found.jsonl"))
    runs, quarantine = _stored(root, "found")
    assert sorted(runs) == [1, 3] and report.quarantined == 1
    assert (quarantine[2]["kind"], quarantine[2]["field"]) == ("unstorable_value", field)
    if field == "tokens.orchestrator_prompt":
        assert f"tokens.orchestrator_prompt + tokens.orchestrator_completion = {INT64_MAX + 7}" in quarantine[2]["reason"]


def test_found_parquet_values_cost_only_their_row(tmp_path):
    rows = [{"run_id": "good-0", "sample_index": 0, "plan_logprob": -0.5, "micros": 0, "meta": None},
            {"run_id": "nan", "sample_index": 0, "plan_logprob": math.nan, "micros": 0, "meta": None},  # was null
            {"run_id": "year-10000", "sample_index": 0, "plan_logprob": None, "micros": _LIMIT_US + 1, "meta": None},
            {"run_id": "year-1", "sample_index": 0, "plan_logprob": None, "micros": _EPOCH_FIRST_US, "meta": None}]
    # year 1 UTC is year 0 at -05:00: reading the column in its own zone failed the whole file
    pq.write_table(_parquet_table(rows, pa.int64(), pa.timestamp("us", tz="-05:00")), tmp_path / "found.parquet")
    root = StorageRoot(str(tmp_path / "storage"))
    ingest_batch(root, "found", str(tmp_path / "found.parquet"))
    runs, quarantine = _stored(root, "found")
    assert sorted(runs) == [1, 4] and runs[4]["created_at"] == datetime(1, 1, 1, tzinfo=UTC)
    assert {line: row["field"] for line, row in quarantine.items()} == {2: "plan_logprob", 3: "created_at"}
