"""The evaluation with one reward-model champion per domain: a problem is held out when the champion of its domain
never saw it, its runs rank by that champion's scores, and each row names it."""

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import sql
from orchrm_dagster.contract import RM_SCORES
from orchrm_dagster.evaluation import EvaluationSettings, candidate_pool, evaluate
from orchrm_dagster.storage import Warehouse
from orchrm_dagster.synthetic import generate_runs

from .test_evaluate import ingest

CHAMPIONS = {"choice": 1, "math": 1, "qa": 2}


def write_scores(root, batch: str, scores: dict[str, tuple[int, float]]) -> None:
    table = pa.Table.from_pylist([{"batch_id": batch, "run_id": r, "rm_version": v, "score": s, "tokens": 100}
                                  for r, (v, s) in scores.items()], schema=RM_SCORES)
    with tempfile.TemporaryDirectory() as tmp:
        pq.write_table(table, str(Path(tmp, "scores.parquet")))
        root.replace_batch("rm_scores", batch, [str(Path(tmp, "scores.parquet"))])


def fake_versions(root, seen: dict[int, list[str]]) -> None:
    """Reward-model versions as training leaves them, without training: the problems of their pairs, and the
    per-domain champion pointer."""
    base = Path(root.path("checkpoints", "rm"))
    for version, problems in seen.items():
        folder = base / f"v{version:04d}"
        folder.mkdir(parents=True)
        (folder / "pair_problems.json").write_text(json.dumps(problems))
    (base / "champion.json").write_text(json.dumps({"champions": CHAMPIONS}))


def test_held_out_and_scores_follow_the_champion_of_each_problems_domain(storage_root, tmp_path):
    records = list(generate_runs(64, seed=4, benchmarks=("gsm8k_test", "hotpotqa_dev"), samples_per_problem=8,
                                 plans_decide=True, policies=(("gen", "base", None),)))
    ingest(storage_root, tmp_path, "held.jsonl", records)
    problems = {b: sorted({r["problem_id"] for r in records if r["benchmark"] == b}) for b in ("gsm8k", "hotpotqa")}
    math, qa = problems["gsm8k"], problems["hotpotqa"]
    # v1, a shared model, saw a math and a qa problem; v2, the qa champion, saw another qa problem only
    fake_versions(storage_root, {1: [math[0], qa[0]], 2: [qa[1]]})
    champion_of = {r["run_id"]: 1 if r["benchmark"] == "gsm8k" else 2 for r in records}
    write_scores(storage_root, "stale", {run: (1, -5.0) for run in champion_of})  # v1's scores of every run
    write_scores(storage_root, "current", {run: (v, float(v)) for run, v in champion_of.items()})

    seen = {"math": frozenset([math[0], qa[0]]), "qa": frozenset([qa[1]]), "choice": frozenset()}
    pool = candidate_pool(storage_root, EvaluationSettings(), CHAMPIONS, seen)
    entered = set(pool["problem_id"])
    assert entered == (set(math) - {math[0]}) | (set(qa) - {qa[1]})  # qa[0]: seen by v1, not by qa's champion
    scores = dict(zip(pool["run_id"], pool["score"]))
    assert all(scores[run] == champion_of[run] for run in scores)  # each run by its domain's champion

    outcome = evaluate(storage_root, EvaluationSettings(methods=("single", "orchrm_bon", "oracle")))
    assert outcome.rm_version == 2 and outcome.held_out_excluded == 3
    warehouse = Warehouse(storage_root)
    warehouse.refresh_views()
    rows = warehouse.query("select distinct benchmark, rm_version from evaluation").to_pylist()
    assert sorted((r["benchmark"], r["rm_version"]) for r in rows) == [("gsm8k", 1), ("hotpotqa", 2)]
    latest = warehouse.query(sql.load("evaluation_latest_problems")).to_pylist()
    assert {r["problem_id"]: r["rm_version"] for r in latest} == {p: 1 if p in math else 2 for p in entered}
