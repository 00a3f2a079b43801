"""One Best-of-N rule (`rm.best_of_n_order`): production selection, the evaluation's `orchrm_bon` and `orchrm serve`
pick the same plan on the same scores, ties and plans that do not parse included."""

import itertools
import math
import random

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

from orchrm_dagster.contract import plan_hash
from orchrm_dagster.evaluation.methods.orchrm_bon import choose as evaluation_choose
from orchrm_dagster.evaluation.settings import EvaluationSettings
from orchrm_dagster.orchestration import PlanScore, ScoredSamples, best_of_n
from orchrm_dagster.orchestration.sampling import PlanSample
from orchrm_dagster.rm import best_of_n_order, best_of_n_pick, plan_parses
from orchrm_dagster.synthetic import random_plan_text

_rng = random.Random(3)
VALID = [random_plan_text(_rng, n) for n in (1, 2, 3, 4)]
# a valid plan with other whitespace (the same plan hash), and texts that are no plan
PLANS = VALID + [VALID[0].replace("\n", "\n\n"), "just some text", "<agent_name>CoTAgent</agent_name>", " "]
SCORES = st.sampled_from([-1.0, 0.0, 0.5, 2.0])  # few values: ties are common


def production_pick(plans: list[str], scores: list[float | None]) -> int:
    samples = [PlanSample(f"p/q/seed0/{i}", "q", "gsm8k", "question", "1", "math", "p", "base", None, "m", i, i,
                          plan, -1.0, plan_parses(plan), None, None, None, True, 10, 20)
               for i, plan in enumerate(plans)]
    scored = ScoredSamples(1, {s.run_id: PlanScore(score, 5) for s, score in zip(samples, scores)}, 0)
    [selection] = best_of_n(samples, scored, len(plans))
    return selection.chosen.sample_index


def evaluation_pool(plans: list[str], scores: list[float | None], correct: list[bool]) -> pl.DataFrame:
    m = len(plans)
    return pl.DataFrame({
        "benchmark": ["gsm8k"] * m, "policy": ["p"] * m, "problem_id": ["q"] * m, "pkey": [0] * m,
        "idx": list(range(m)), "m": [m] * m, "run_id": [f"r{i:02d}" for i in range(m)],
        "plan_hash": [plan_hash(p) for p in plans], "parses": [plan_parses(p) for p in plans],
        "score": pl.Series(scores, dtype=pl.Float64), "rm_tokens": [5] * m, "correct": correct,
        "exec_tokens": [10 ** i for i in range(m)]})


def evaluation_pick(plans: list[str], scores: list[float | None]) -> int:
    """With N = M the evaluation's choice is one run for certain: its execution tokens (10^index) name it."""
    frame = evaluation_choose(evaluation_pool(plans, scores, [True] * len(plans)), len(plans), EvaluationSettings())
    return round(math.log10(frame["execution"][0]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PLANS), SCORES), min_size=1, max_size=7))
def test_production_evaluation_and_serve_pick_the_same_plan(candidates):
    plans = [plan for plan, _ in candidates]
    scores = [score for _, score in candidates]
    serve = best_of_n_pick(plans, scores)
    assert production_pick(plans, scores) == evaluation_pick(plans, scores) == serve.chosen
    # the rule itself: a plan that parses whenever one does, then the best score among those, then the lowest hash
    parsing = [i for i, plan in enumerate(plans) if plan_parses(plan)] or list(range(len(plans)))
    tied = [i for i in parsing if scores[i] == max(scores[j] for j in parsing)]
    assert plan_hash(plans[serve.chosen]) == min(plan_hash(plans[i]) for i in tied)
    assert serve.chosen == min(i for i in tied if plan_hash(plans[i]) == plan_hash(plans[serve.chosen]))
    assert set(serve.unparseable) == {i for i, plan in enumerate(plans) if not plan_parses(plan)}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PLANS), st.sampled_from([0.0, 1.0, 1.0, 3.0]), st.booleans()),
                min_size=2, max_size=6), st.data())
def test_the_evaluation_s_expectation_is_production_s_pick_over_every_candidate_set(candidates, data):
    plans, scores, correct = (list(column) for column in zip(*candidates))
    n = data.draw(st.integers(1, len(plans)))
    frame = evaluation_choose(evaluation_pool(plans, scores, correct), n, EvaluationSettings())
    sets = list(itertools.combinations(range(len(plans)), n))
    picked = [subset[production_pick([plans[i] for i in subset], [scores[i] for i in subset])] for subset in sets]
    assert frame["accuracy"][0] == pytest.approx(sum(correct[i] for i in picked) / len(sets), rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PLANS), st.one_of(SCORES, st.none())), min_size=1, max_size=7))
def test_the_evaluation_and_serve_put_a_run_without_a_score_last_among_those_that_parse(candidates):
    plans = [plan for plan, _ in candidates]
    scores = [score for _, score in candidates]
    chosen = best_of_n_pick(plans, scores).chosen
    assert evaluation_pick(plans, scores) == chosen
    if scores[chosen] is None:
        assert all(scores[i] is None for i, plan in enumerate(plans) if plan_parses(plan) == plan_parses(plans[chosen]))


def test_the_order_ranks_within_groups_and_puts_unscored_plans_last():
    order = best_of_n_order([True, True, False, True], [None, 1.0, 9.0, float("nan")], ["a", "b", "c", "d"],
                            groups=[1, 1, 0, 1])
    assert order.tolist() == [2, 1, 0, 3]  # group 0 first; in group 1 the scored plan, then the unscored by hash
