"""Runs the embedded generator made, written as OpenTelemetry traces (`runs_to_otlp`) and imported again, give the
same records and the same pairs as the runs themselves."""

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract import RunRecord, plan_hash
from orchrm_dagster.pairs import CORRECT_OVER_INCORRECT, SPECIALIZED_OVER_BASE, PairRules, build_pairs
from orchrm_dagster.synthetic import generate_runs
from orchrm_dagster.traces import ImportedRun, read_traces, runs_to_otlp

RUNS = pa.schema([("run_id", pa.string()), ("problem_id", pa.string()), ("question", pa.string()),
                  ("policy_name", pa.string()), ("policy_kind", pa.string()), ("plan", pa.string()),
                  ("plan_hash", pa.string()), ("environment", pa.string())])
LABELS = pa.schema([("run_id", pa.string()), ("is_correct", pa.bool_())])


def _runs() -> list[dict]:
    runs = list(generate_runs(96, seed=11, samples_per_problem=8))
    runs += list(generate_runs(16, seed=12, samples_per_problem=8, first_problem=30, environment="simulated"))
    failed = runs[5]
    runs[5] = {**failed, "final_answer": None, "error": "the sub-agent endpoint timed out", "is_correct": False}
    return runs


def _pairs(records: list[dict], tmp_path, name: str) -> list[dict]:
    con = duckdb.connect()
    con.register("runs", pa.Table.from_pylist([
        {"run_id": r["run_id"], "problem_id": r["problem_id"], "question": r["question"],
         "policy_name": r["policy"]["name"], "policy_kind": r["policy"]["kind"], "plan": r["plan"],
         "plan_hash": plan_hash(r["plan"]), "environment": r.get("environment")} for r in records], schema=RUNS))
    con.register("labels", pa.Table.from_pylist([{"run_id": r["run_id"], "is_correct": r["is_correct"]}
                                                 for r in records if r.get("is_correct") is not None], schema=LABELS))
    stats = build_pairs(con, PairRules(), str(tmp_path / name))
    assert stats.total > 0
    rows = pq.read_table(tmp_path / name).to_pylist()
    return sorted(rows, key=lambda row: (row["pair_id"], row["source"]))


def _validated(record: dict) -> dict:
    return RunRecord.model_validate_json(orjson.dumps(record)).model_dump()


def test_runs_as_traces_import_to_the_same_records_and_the_same_pairs(tmp_path):
    runs = _runs()
    traces = b"\n".join(runs_to_otlp(runs)) + b"\n"
    outcomes = read_traces(traces, "otel")
    assert all(isinstance(o, ImportedRun) for o in outcomes) and len(outcomes) == len(runs)
    imported = {o.record["run_id"]: o.record for o in outcomes}
    for run in runs:
        before, after = _validated(run), _validated(imported[run["run_id"]])
        # the record's own meta and a total without its split (the conventions count input and output) stay behind
        assert {k: v for k, v in after.items() if k not in ("meta", "tokens")} == \
               {k: v for k, v in before.items() if k not in ("meta", "tokens")}
        split = after["tokens"]
        assert split["subagent_prompt"] + split["subagent_completion"] == before["tokens"]["subagents"]
    assert imported[runs[5]["run_id"]]["error"] == "the sub-agent endpoint timed out"

    pairs, from_traces = _pairs(runs, tmp_path, "runs.parquet"), _pairs(list(imported.values()), tmp_path,
                                                                          "traces.parquet")
    assert {row["source"] for row in pairs} == {CORRECT_OVER_INCORRECT, SPECIALIZED_OVER_BASE}
    assert from_traces == pairs
