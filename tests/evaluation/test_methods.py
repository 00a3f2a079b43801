"""Each way of choosing among N runs, on hand-built pools, checked against brute-force enumeration."""

import itertools
import math

import numpy as np
import polars as pl
import pytest

from orchrm_dagster.contract import plan_hash
from orchrm_dagster.evaluation import (EvaluationSettings, VerifierSettings, VerifierWeights, any_correct_probability,
                                       index_pool, pick_probability)
from orchrm_dagster.evaluation.methods.collaborative_verifier_fixed import choose as collaborative_verifier_fixed
from orchrm_dagster.evaluation.methods.common import (candidate_set_members, judged, one_sample, ranked_choice,
                                                      sampling_costs, token_means)
from orchrm_dagster.evaluation.pools import GROUP
from orchrm_dagster.evaluation.methods.majority_vote import majority_vote
from orchrm_dagster.evaluation.methods.oracle import oracle as oracle_bound

BASE = {"benchmark": "b", "policy": "p", "question": "q", "plan": "plan", "final_answer": "a", "logprob": None,
        "exec_tokens": 100, "score": None, "rm_tokens": 10, "answer": None, "verifier_static": 0.0,
        "verifier_tokens": 0, "format": 0.0, "steps": 0.0, "length": 0.0, "repetition": 0.0, "similarity": 0.0,
        "fitted_static": 0.0, "fitted_agreement": 0.0, "fitted_rank": 0.0, "offshelf_score": None,
        "offshelf_tokens": 0, "parses": True}


def pool(*runs: dict) -> pl.DataFrame:
    """A pool from (problem_id, run_id, correct, ...) dicts; missing fields take BASE's values; `plan_hash` is the
    hash of the run's `plan`."""
    rows = [BASE | run for run in runs]
    schema = {"benchmark": pl.String, "policy": pl.String, "problem_id": pl.String, "run_id": pl.String,
              "question": pl.String, "plan": pl.String, "final_answer": pl.String, "logprob": pl.Float64,
              "exec_tokens": pl.Int64, "correct": pl.Boolean, "score": pl.Float64, "rm_tokens": pl.Int64,
              "answer": pl.String, "verifier_static": pl.Float64, "verifier_tokens": pl.Int64,
              **dict.fromkeys(("format", "steps", "length", "repetition", "similarity", "fitted_static",
                               "fitted_agreement", "fitted_rank", "offshelf_score"), pl.Float64),
              "offshelf_tokens": pl.Int64, "parses": pl.Boolean}
    frame = pl.DataFrame(rows, schema=schema)
    return index_pool(frame.with_columns(plan_hash=pl.Series([plan_hash(p) for p in frame["plan"]], dtype=pl.String)))


def runs(problem: str, correct: list[bool], **columns) -> list[dict]:
    return [{"problem_id": problem, "run_id": f"{problem}-r{i}", "correct": c,
             **{name: values[i] for name, values in columns.items()}} for i, c in enumerate(correct)]


def by_problem(frame: pl.DataFrame, column: str = "accuracy") -> dict[str, float]:
    return dict(zip(frame["problem_id"].to_list(), frame[column].to_list()))


# ---------------------------------------------------------------- brute force


def brute_force(rows: list[dict], n: int, choose) -> tuple[float, float]:
    """Mean correctness and execution tokens of `choose(subset)` over every subset of n runs (in run_id order)."""
    rows = sorted(rows, key=lambda r: r["run_id"])
    subsets = list(itertools.combinations(rows, n))
    chosen = [choose(list(s)) for s in subsets]
    return (sum(c["correct"] for c in chosen) / len(subsets),
            sum(c.get("exec_tokens", BASE["exec_tokens"]) for c in chosen) / len(subsets))


def best_by(key):
    def choose(subset):
        ranked = sorted(subset, key=lambda r: (r.get(key) is None, -(r.get(key) or 0.0), r["run_id"]))
        return ranked[0]
    return choose


@pytest.mark.parametrize("seed", range(20))
def test_the_exact_ranked_choice_formula_equals_enumeration(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 9))
    correct = [bool(x) for x in rng.random(m) < 0.5]
    scores = [None if rng.random() < 0.2 else float(rng.integers(0, 4)) for _ in range(m)]  # ties and missing
    exec_tokens = [int(x) for x in rng.integers(10, 500, m)]
    rows = runs("x", correct, score=scores, exec_tokens=exec_tokens)
    for n in range(1, m + 1):
        frame = ranked_choice(pool(*rows), "score", n, "rm_tokens")
        accuracy, execution = brute_force(rows, n, best_by("score"))
        assert frame["accuracy"][0] == pytest.approx(accuracy)
        assert frame["execution"][0] == pytest.approx(execution)
        assert frame["verification"][0] == pytest.approx(10 * n)  # every drawn plan is scored


def test_pick_probabilities_sum_to_one_and_favour_the_top():
    for m in range(1, 12):
        for n in range(1, m + 1):
            p = pick_probability(np.full(m, m), np.arange(m), n)
            assert p.sum() == pytest.approx(1.0) and all(np.diff(p) <= 1e-12)
    assert pick_probability(np.array([5]), np.array([0]), 6)[0] == 0.0  # fewer runs than N: not eligible


def test_the_oracle_is_one_minus_all_wrong():
    assert any_correct_probability(np.array([8]), np.array([6]), 2)[0] == pytest.approx(1 - math.comb(6, 2) / 28)
    assert any_correct_probability(np.array([4]), np.array([1]), 2)[0] == 1.0
    rows = runs("x", [True, False, False, False, True])
    oracle = oracle_bound(pool(*rows), 3)
    accuracy, _ = brute_force(rows, 3, lambda s: max(s, key=lambda r: r["correct"]))
    assert oracle["accuracy"][0] == pytest.approx(accuracy)
    assert oracle["execution"][0] == pytest.approx(300)  # the oracle executes all three


def test_ties_go_to_the_lower_run_id_and_missing_scores_rank_last():
    rows = runs("x", [False, True, False], score=[None, 1.0, 1.0])
    # r1 and r2 tie; r1 has the lower run_id, so it wins whenever both are drawn; r0 (no score) never wins
    frame = ranked_choice(pool(*rows), "score", 2, None)
    assert frame["accuracy"][0] == pytest.approx(2 / 3)  # sets {0,1}: r1; {0,2}: r2 (wrong); {1,2}: r1


def test_single_is_the_mean_and_problems_with_too_few_runs_are_left_out():
    frame = one_sample(pool(*runs("x", [True, False, False, True]), *runs("y", [False])))
    assert by_problem(frame) == {"x": 0.5, "y": 0.0}
    two = ranked_choice(pool(*runs("x", [True, False]), *runs("y", [False])), "score", 2, None)
    assert set(two["problem_id"]) == {"x"}


def majority(subset):
    answers = [r["answer"] for r in subset]
    votes = {}
    for a in answers:
        if a is not None:
            votes[a] = votes.get(a, 0) + 1
    if not votes:
        return subset[0]
    winner = max(votes, key=lambda a: (votes[a], -answers.index(a)))
    return subset[answers.index(winner)]


@pytest.mark.parametrize("seed", range(10))
def test_majority_vote_equals_enumeration_with_unparseable_answers(seed):
    rng = np.random.default_rng(100 + seed)
    m = int(rng.integers(3, 8))
    answers = [None if rng.random() < 0.25 else str(rng.integers(0, 3)) for _ in range(m)]
    correct = [a == "1" for a in answers]
    rows = runs("x", correct, answer=answers)
    settings = EvaluationSettings(max_enumerate=10_000)
    for n in range(2, m + 1):
        members = candidate_set_members(pool(*rows), n, settings)
        frame = majority_vote(members, n)
        accuracy, _ = brute_force(rows, n, majority)
        assert frame["accuracy"][0] == pytest.approx(accuracy), n
        assert frame["execution"][0] == pytest.approx(100 * n) and frame["verification"][0] == 0


def test_a_set_without_any_answer_takes_its_first_run():
    rows = runs("x", [True, False], answer=[None, None])
    members = candidate_set_members(pool(*rows), 2, EvaluationSettings())
    assert majority_vote(members, 2)["accuracy"][0] == 1.0


def verifier_choice(weight):
    def choose(subset):
        def total(r):
            same = sum(o["answer"] == r["answer"] for o in subset if o is not r) if r["answer"] else 0
            return r["verifier_static"] + weight * same / (len(subset) - 1)
        return max(subset, key=lambda r: (total(r), -int(r["run_id"].rsplit("r", 1)[1])))
    return choose


def test_the_collaborative_verifier_fuses_agreement_with_the_static_panel():
    rows = runs("x", [False, True, True, False, True], answer=["7", "5", "5", None, "5"],
                verifier_static=[0.9, 0.2, 0.1, 0.95, 0.3], verifier_tokens=[40, 40, 40, 40, 40])
    settings = EvaluationSettings(max_enumerate=10_000)
    for n in (2, 3, 4):
        members = candidate_set_members(pool(*rows), n, settings)
        weights = VerifierWeights(agreement=0.5)
        frame = collaborative_verifier_fixed(members, n, EvaluationSettings(verifier=VerifierSettings(weights=weights)))
        accuracy, _ = brute_force(rows, n, verifier_choice(0.5))
        assert frame["accuracy"][0] == pytest.approx(accuracy)
        assert frame["verification"][0] == pytest.approx(40 * n)


def test_draws_replace_enumeration_above_the_limit_and_are_seeded():
    rows = runs("x", [i % 3 == 0 for i in range(30)], answer=[str(i % 4) for i in range(30)])
    settings = EvaluationSettings(draws=50, max_enumerate=100, seed=3)
    first = candidate_set_members(pool(*rows), 8, settings)
    assert first.select("set_id").n_unique() == 50
    assert first.sort("set_id", "slot").equals(candidate_set_members(pool(*rows), 8, settings).sort(
        "set_id", "slot"))
    assert first.group_by("set_id").agg(pl.col("idx").n_unique())["idx"].min() == 8  # no run twice in a set


def test_judged_sets_pay_the_judge_tokens_and_execute_as_the_method_says():
    rows = runs("x", [True, False, False], exec_tokens=[100, 200, 400])
    inputs = pool(*rows).with_columns(plan_tokens=pl.lit(10, dtype=pl.Int64))
    members = candidate_set_members(inputs, 2, EvaluationSettings())
    verdicts = pl.DataFrame({"pkey": [0, 0, 0], "set_id": [0, 1, 2], "slot": [0, 1, 1], "tokens": [90, 110, 100]})
    picks = judged(members, verdicts).join(inputs.select("pkey", *GROUP).unique(), on="pkey")
    plan_judge = sampling_costs(picks, token_means(inputs), 2, executes_all=False)
    trajectory_judge = sampling_costs(picks, token_means(inputs), 2, executes_all=True)
    # sets {0,1}: slot 0 -> r0 right; {0,2}: slot 1 -> r2 wrong; {1,2}: slot 1 -> r2 wrong
    assert plan_judge["accuracy"][0] == pytest.approx(1 / 3)
    assert plan_judge["verification"][0] == pytest.approx(100)
    assert plan_judge["execution"][0] == pytest.approx((100 + 400 + 400) / 3)  # the named run only
    assert trajectory_judge["execution"][0] == pytest.approx(2 * 700 / 3)  # both of each set
    assert plan_judge["generation"][0] == trajectory_judge["generation"][0] == pytest.approx(20)  # both plans
