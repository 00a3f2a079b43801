"""The evaluation step on real Parquet tables: held-out problems, tables appended per evaluation, plots, judge
cache. The reward model is stood in for by its outputs (a champion folder and rm_scores), so no model loads."""

import json
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchrm_dagster.contract import RM_SCORES
from orchrm_dagster.evaluation import (EvaluationSettings, JudgeSettings, VerifierSettings, VerifierWeights,
                                      evaluate)
from orchrm_dagster.ingest import ingest_batch
from orchrm_dagster.labels import label_batch
from orchrm_dagster.llm import Completion
from orchrm_dagster.problems import load_problems, problem_sources, reference_answers
from orchrm_dagster.storage import Warehouse, land
from orchrm_dagster.synthetic import generate_runs, write_jsonl

NO_SIMILARITY = VerifierSettings(weights=VerifierWeights(similarity=0.0))
WITHOUT_JUDGES = ("single", "orchrm_bon", "majority_vote", "logprob", "collaborative_verifier",
                  "collaborative_verifier_fixed", "oracle")


class CountingJudge:
    """Names the candidate whose text mentions the highest agent count; counts its calls."""

    name = "scripted"
    model_id = "scripted-judge"

    def __init__(self, answer="<choice>2</choice>"):
        self.answer = answer
        self.requests = []

    def generate(self, requests):
        self.requests += requests
        return [Completion(self.answer, 500, 5) for _ in requests]


def ingest(root, tmp_path, name, records):
    path = tmp_path / name
    write_jsonl(records, path)
    landed = land(root, path)
    ingest_batch(root, landed.batch_id, landed.path)
    label_batch(root, landed.batch_id, reference_answers(load_problems(problem_sources([])).table))
    return landed.batch_id


def fake_champion(root, version: int, seen_problems: list[str], scores: dict[str, float]):
    """What training a reward model leaves behind, without training one: the champion pointer, the problems of
    its pairs, and its scores of the runs (higher for plans that delegate to more verifying agents)."""
    folder = Path(root.path("checkpoints", "rm", f"v{version:04d}"))
    folder.mkdir(parents=True)
    (folder / "pair_problems.json").write_text(json.dumps(seen_problems))
    (folder.parent / "champion.json").write_text(json.dumps({"version": version, "path": str(folder)}))
    table = pa.Table.from_pylist([{"batch_id": "all", "run_id": r, "rm_version": version, "score": s, "tokens": 200}
                                  for r, s in scores.items()], schema=RM_SCORES)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp, "scores.parquet"))
        pq.write_table(table, path)
        root.replace_batch("rm_scores", "all", [path])


@pytest.fixture
def evaluated_root(storage_root, tmp_path):
    records = list(generate_runs(96, seed=4, benchmarks=("gsm8k_test",), samples_per_problem=8, plans_decide=True,
                                 policies=(("gen", "base", None),)))
    ingest(storage_root, tmp_path, "held.jsonl", records)
    from orchrm_dagster.truths.plan_success_rate import PlanSuccessRateSettings

    verifying = PlanSuccessRateSettings().verifying_agents  # what decides the generated runs' correctness
    scores = {r["run_id"]: float(sum(r["plan"].count(f"<agent_name>{a}") for a in verifying))
              for r in records}
    seen = sorted({r["problem_id"] for r in records})[:3]  # three problems the reward model "saw"
    fake_champion(storage_root, 1, seen, scores)
    return storage_root, records, seen


def test_held_out_problems_only_and_every_method_row(evaluated_root):
    root, records, seen = evaluated_root
    outcome = evaluate(root, EvaluationSettings(methods=WITHOUT_JUDGES, verifier=NO_SIMILARITY))
    problems = {r["problem_id"] for r in records}
    Warehouse(root).refresh_views()
    table = Warehouse(root).query("select * from evaluation").to_pylist()
    entered = {r["problem_id"] for r in Warehouse(root).query("select problem_id from evaluation_problems").to_pylist()}
    assert entered == problems - set(seen) and len(entered) == 9
    assert {(r["method"], r["n"]) for r in table} == {(m, n) for m in WITHOUT_JUDGES for n in (1, 2, 4, 8)
                                                      if m != "single" or n == 1}
    assert all(r["n_problems"] == 9 and r["rm_version"] == 1 and r["evaluation_id"] == outcome.evaluation_id
               for r in table)
    at = {(r["method"], r["n"]): r for r in table}
    assert len({at[(m, 1)]["accuracy"] for m in WITHOUT_JUDGES}) == 1  # N=1: every method is one sample
    assert at[("oracle", 8)]["accuracy"] >= max(at[(m, 8)]["accuracy"] for m in WITHOUT_JUDGES if m != "single")
    assert at[("orchrm_bon", 8)]["accuracy"] > at[("single", 1)]["accuracy"]  # the scores follow what decides
    assert all(r["ci_low"] <= r["accuracy"] <= r["ci_high"] for r in table)
    # tokens: the reward model reads 200 per plan; Best-of-N executes one run, the vote all eight
    assert at[("orchrm_bon", 8)]["verification_tokens"] == pytest.approx(1600)
    assert at[("majority_vote", 8)]["execution_tokens"] == pytest.approx(8 * at[("single", 1)]["execution_tokens"])
    assert set(outcome.plots) == {"accuracy_vs_n", "accuracy_vs_tokens"}
    assert all(root.fs.cat_file(outcome.plot_paths[name])[:4] == b"\x89PNG" for name in outcome.plots)
    assert all(outcome.evaluation_id in path for path in outcome.plot_paths.values())
    verifier = Warehouse(root).query("select * from verifier_scores").to_pylist()
    assert all(0 <= v["fused"] <= 1 and 0 <= v["rank"] <= 1 and v["similarity"] == 0 for v in verifier)
    # the evaluated runs, and the 24 runs of the three problems the reward model saw that fitted the fusion weights
    assert sum(not v["held_in"] for v in verifier) == 72 and sum(v["held_in"] for v in verifier) == 24
    assert {v["problem_id"] for v in verifier if v["held_in"]} == set(seen)
    assert outcome.method_reports["collaborative_verifier"]["runs"] == 24


def test_a_second_evaluation_appends_and_history_stays(evaluated_root):
    root, _, _ = evaluated_root
    settings = EvaluationSettings(methods=("single", "oracle"), ns=(1, 2))
    first = evaluate(root, settings, now=datetime(2026, 11, 1, tzinfo=timezone.utc))
    second = evaluate(root, settings, now=datetime(2026, 11, 2, tzinfo=timezone.utc))
    Warehouse(root).refresh_views()
    ids = Warehouse(root).query("select evaluation_id, count(*) n from evaluation group by 1 order by 1").to_pylist()
    assert [r["evaluation_id"] for r in ids] == [first.evaluation_id, second.evaluation_id]
    assert ids[0]["n"] == ids[1]["n"] == 3  # single at N=1, oracle at N=1 and 2


def test_judges_are_cached_by_problem_candidates_and_model(evaluated_root):
    root, _, _ = evaluated_root
    settings = EvaluationSettings(methods=("plan_judge", "trajectory_judge"), ns=(2, 4))
    judge = CountingJudge()
    first = evaluate(root, settings, judge)
    assert first.judge_calls == len(judge.requests) == 2 * 9 * 2 * 2 and first.judge_unparsed == 0
    assert "[Candidate 2]" in judge.requests[0].messages[0]["content"]
    assert judge.requests[0].grammar == 'root ::= "<choice>" ("1" | "2") "</choice>"'
    again = CountingJudge()
    second = evaluate(root, settings, again)
    assert again.requests == [] and second.judge_calls == 0 and second.judge_cached == first.judge_calls
    assert [(r["method"], r["n"], r["accuracy"]) for r in first.rows] == [
        (r["method"], r["n"], r["accuracy"]) for r in second.rows]
    other_model = CountingJudge()
    other_model.model_id = "another-judge"
    assert evaluate(root, settings, other_model).judge_calls == first.judge_calls


def test_judges_run_only_at_their_ns_while_the_other_methods_run_at_every_n(evaluated_root):
    root, _, _ = evaluated_root
    settings = EvaluationSettings(methods=("oracle", "plan_judge"), ns=(1, 2, 4), judge=JudgeSettings(ns=(4,)))
    judge = CountingJudge()
    outcome = evaluate(root, settings, judge)
    assert outcome.judge_calls == len(judge.requests) == 9 * 2  # 9 problems x 2 policies, at N=4 only
    assert {(r["method"], r["n"]) for r in outcome.rows} == {("oracle", 1), ("oracle", 2), ("oracle", 4),
                                                             ("plan_judge", 4)}
    assert set(outcome.method_seconds) == {"oracle", "plan_judge"}
    assert all(seconds > 0 for seconds in outcome.method_seconds.values())


def test_judge_ns_outside_the_evaluated_ns_is_refused():
    with pytest.raises(ValueError, match=r"judge.ns \[16\] must be among ns"):
        EvaluationSettings(ns=(1, 8), judge=JudgeSettings(ns=(16,)))


def test_an_unparseable_verdict_takes_the_first_candidate_and_is_counted(evaluated_root):
    root, _, _ = evaluated_root
    outcome = evaluate(root, EvaluationSettings(methods=("plan_judge",), ns=(2,)), CountingJudge("no idea"))
    assert outcome.judge_unparsed == outcome.judge_calls > 0
    Warehouse(root).refresh_views()
    assert Warehouse(root).query("select bool_or(parsed) p from judge_cache").to_pylist() == [{"p": False}]


def test_judges_without_a_backend_are_skipped_with_a_note(evaluated_root):
    root, _, _ = evaluated_root
    outcome = evaluate(root, EvaluationSettings(methods=("single", "plan_judge"), ns=(1, 2)))
    assert {r["method"] for r in outcome.rows} == {"single", "plan_judge"}  # N=1 rows need no judge
    assert {r["n"] for r in outcome.rows if r["method"] == "plan_judge"} == {1}
    assert any("plan_judge" in note for note in outcome.notes)


def test_evaluating_in_slices_of_problems_gives_the_same_table(evaluated_root, monkeypatch):
    from orchrm_dagster.evaluation import run

    root, _, _ = evaluated_root
    settings = EvaluationSettings(methods=("majority_vote", "collaborative_verifier"), ns=(2, 4),
                                  verifier=NO_SIMILARITY, max_enumerate=100)
    whole = evaluate(root, settings, now=datetime(2026, 11, 1, tzinfo=timezone.utc)).rows
    monkeypatch.setattr(run, "SET_ROWS", 2 * 4 * 100)  # one or two problems per slice
    sliced = evaluate(root, settings, now=datetime(2026, 11, 2, tzinfo=timezone.utc)).rows
    accuracy = [(r["method"], r["n"], r["accuracy"], r["execution_tokens"], r["n_problems"]) for r in whole]
    assert accuracy == [(r["method"], r["n"], r["accuracy"], r["execution_tokens"], r["n_problems"]) for r in sliced]
    assert all(r["n_problems"] == 9 for r in sliced)
