"""Small hand-built runs/labels relations for the pair tests."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract import plan_hash
from orchrm_dagster.pairs import PairRules, build_pairs

RUNS = pa.schema([("run_id", pa.string()), ("problem_id", pa.string()), ("question", pa.string()),
                  ("policy_name", pa.string()), ("policy_kind", pa.string()), ("plan", pa.string()),
                  ("plan_hash", pa.string()), ("environment", pa.string())])
LABELS = pa.schema([("run_id", pa.string()), ("is_correct", pa.bool_())])


def run(run_id: str, problem_id: str, kind: str, plan: str, correct: bool | None = None, *, policy: str | None = None,
        environment: str | None = None) -> dict:
    """A run of policy `policy` (default: one policy per kind, named after it); environment None reads as the
    default one, as in the warehouse view."""
    return {"run_id": run_id, "problem_id": problem_id, "question": f"question of {problem_id}",
            "policy_name": policy or f"{kind}-policy", "policy_kind": kind, "plan": plan, "plan_hash": plan_hash(plan),
            "environment": environment, "correct": correct}


def specialized_filler(problems: int, prefix: str = "filler-s") -> list[dict]:
    """12 specialized_over_base pairs per problem (one base plan, 12 specialized ones), no labels."""
    runs = []
    for p in range(problems):
        problem = f"{prefix}-{p}"
        runs.append(run(f"{problem}-base", problem, "base", f"base plan of {problem}"))
        runs += [run(f"{problem}-s{i:02d}", problem, "specialized", f"plan {i} of {problem}") for i in range(12)]
    return runs


def correct_filler(problems: int, prefix: str = "filler-c") -> list[dict]:
    """4 correct_over_incorrect pairs per problem (all base runs: no specialized pairs)."""
    runs = []
    for p in range(problems):
        problem = f"{prefix}-{p}"
        runs.append(run(f"{problem}-ok", problem, "base", f"right plan of {problem}", correct=True))
        runs += [run(f"{problem}-x{i}", problem, "base", f"wrong plan {i} of {problem}", correct=False)
                 for i in range(4)]
    return runs


def connect(runs: list[dict], extra_labels: list[dict] = ()) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register("runs", pa.Table.from_pylist(runs, schema=RUNS))
    labels = [{"run_id": r["run_id"], "is_correct": r["correct"]} for r in runs if r["correct"] is not None]
    con.register("labels", pa.Table.from_pylist(labels + list(extra_labels), schema=LABELS))
    return con


def build(runs: list[dict], tmp_path, rules: PairRules = PairRules(), name: str = "pairs.parquet",
          extra_labels: list[dict] = (), verified_checkpoints: tuple[str, ...] = ()):
    """Build pairs; returns (stats, rows as dicts sorted by pair_id and source: the file's row order is unspecified)."""
    out = str(tmp_path / name)
    stats = build_pairs(connect(runs, extra_labels), rules, out, verified_checkpoints=verified_checkpoints)
    return stats, sorted(pq.read_table(out).to_pylist(), key=lambda row: (row["pair_id"], row["source"]))


def pair_runs(rows: list[dict], problem_id: str, source: str) -> set[tuple[str, str]]:
    return {(r["chosen_run_id"], r["rejected_run_id"]) for r in rows
            if r["problem_id"] == problem_id and r["source"] == source}
