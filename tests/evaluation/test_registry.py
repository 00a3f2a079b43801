"""The registry of evaluation methods: what the settings, `evaluate` and the judges read. A method registered in a
test is evaluated end to end with no other file touched; every registered method keeps the promises its entry makes."""

import polars as pl
import pytest

from orchrm_dagster.evaluation import (EvaluationMethod, EvaluationSettings, MethodKind, evaluate, method_named,
                                       method_names, register_method, registered_methods)
from orchrm_dagster.evaluation import methods as registry
from orchrm_dagster.evaluation.methods.common import candidate_set_members, ranked_choice
from orchrm_dagster.evaluation.settings import OffShelfRMSettings
from orchrm_dagster.mas import load_prompt
from tests.evaluation.test_evaluate import NO_SIMILARITY, evaluated_root  # noqa: F401  (a fixture)
from tests.evaluation.test_methods import pool, runs


def lowest_run_id(pool: pl.DataFrame, n: int, settings: EvaluationSettings) -> pl.DataFrame:
    """No key at all: every run ties, and ties go to the lower run_id."""
    return ranked_choice(pool.with_columns(no_key=pl.lit(None, dtype=pl.Float64)), "no_key", n, None)


LOWEST_RUN_ID = EvaluationMethod(
    name="lowest_run_id", description="the run with the lowest run_id", kind=MethodKind.RANKED,
    choose=lowest_run_id, executes_all=False)


def first_run_accuracy(records: list[dict], seen: list[str]) -> float:
    """What `lowest_run_id` scores at N = 8 on `evaluated_root`: with all 8 runs of a problem drawn, the lowest
    run_id is always the problem's first run."""
    first_runs = {}
    for record in sorted(records, key=lambda r: r["run_id"]):
        if record["problem_id"] not in seen:
            first_runs.setdefault(record["problem_id"], record)
    return sum(r["is_correct"] for r in first_runs.values()) / len(first_runs)


@pytest.fixture
def with_lowest_run_id(monkeypatch):
    monkeypatch.setattr(registry.METHODS, "_entries", dict(registered_methods()))  # forgotten after the test
    register_method(LOWEST_RUN_ID)


def test_a_method_registered_in_a_test_is_evaluated_end_to_end(evaluated_root, with_lowest_run_id):
    root, records, seen = evaluated_root
    assert "lowest_run_id" in EvaluationSettings().methods  # the default is every registered method
    outcome = evaluate(root, EvaluationSettings(methods=("single", "lowest_run_id"), verifier=NO_SIMILARITY))
    at = {(r["method"], r["n"]): r for r in outcome.rows}
    assert {n for method, n in at if method == "lowest_run_id"} == {1, 2, 4, 8}
    assert at[("lowest_run_id", 8)]["accuracy"] == pytest.approx(first_run_accuracy(records, seen))
    assert at[("lowest_run_id", 8)]["verification_tokens"] == 0
    assert at[("lowest_run_id", 1)]["accuracy"] == at[("single", 1)]["accuracy"]


def test_an_unknown_method_is_refused_naming_it_and_the_known_ones():
    with pytest.raises(ValueError, match="unknown evaluation method 'best_guess'; known: .*orchrm_bon"):
        EvaluationSettings(methods=("single", "best_guess"))
    with pytest.raises(ValueError, match="best_guess"):
        method_named("best_guess")


def test_two_methods_cannot_share_a_name(with_lowest_run_id):
    with pytest.raises(ValueError, match="evaluation method 'lowest_run_id' is registered already"):
        register_method(EvaluationMethod(name="lowest_run_id", description="another", kind=MethodKind.RANKED,
                                         choose=lowest_run_id, executes_all=True))


def test_only_an_llm_judge_has_a_judge_prompt():
    with pytest.raises(ValueError, match="judge_prompt"):
        EvaluationMethod(name="mute_judge", description="x", kind=MethodKind.LLM_JUDGE, choose=dict,
                         executes_all=False)
    with pytest.raises(ValueError, match="judge_prompt"):
        EvaluationMethod(name="vote", description="x", kind=MethodKind.CANDIDATE_SET, choose=dict,
                         executes_all=True, judge_prompt="judge_plans")


def test_an_llm_backend_is_needed_exactly_when_a_chosen_method_is_an_llm_judge():
    judges = {name for name, method in registered_methods().items() if method.kind is MethodKind.LLM_JUDGE}
    assert judges == {"plan_judge", "trajectory_judge", "trajectory_judge_truncated"}
    assert EvaluationSettings().needs_llm_backend
    assert not EvaluationSettings(methods=tuple(set(method_names()) - judges)).needs_llm_backend
    for judge in judges:
        assert EvaluationSettings(methods=("single", judge)).needs_llm_backend


@pytest.mark.parametrize("name", method_names())
def test_every_method_describes_itself_and_its_judge_prompt_exists(name):
    method = method_named(name)
    assert method.name == name and method.description.strip() and isinstance(method.kind, MethodKind)
    if method.kind is MethodKind.LLM_JUDGE:
        assert "{candidates}" in load_prompt(method.judge_prompt)


@pytest.mark.parametrize("name", [name for name, method in registered_methods().items()
                                  if method.kind is not MethodKind.LLM_JUDGE])
def test_every_method_executes_what_its_entry_says(name):
    """Execution tokens at N: all N runs for a method that executes all, else the one chosen run's."""
    method = method_named(name)
    exec_tokens = [100, 200, 300, 400]
    rows = runs("x", [True, False, True, False], exec_tokens=exec_tokens, answer=["1", "2", "1", None],
                score=[0.1, 0.9, 0.5, None], logprob=[-1.0, -0.5, -2.0, -0.1])
    n = 3 if method.max_n is None else method.max_n
    inputs = pool(*rows)
    if method.kind is MethodKind.CANDIDATE_SET:
        inputs = candidate_set_members(inputs, n, EvaluationSettings())
    execution = method.choose(inputs, n, EvaluationSettings())["execution"][0]
    if method.executes_all:
        assert execution == pytest.approx(n * sum(exec_tokens) / len(exec_tokens))
    else:
        assert min(exec_tokens) <= execution <= max(exec_tokens)


def test_without_a_champion_a_method_that_needs_one_is_left_out_saying_why(storage_root, tmp_path):
    from orchrm_dagster.synthetic import generate_runs
    from tests.evaluation.test_evaluate import ingest

    ingest(storage_root, tmp_path, "runs.jsonl", generate_runs(16, seed=5, benchmarks=("gsm8k_test",),
                                                              samples_per_problem=4, policies=(("gen", "base", None),)))
    outcome = evaluate(storage_root, EvaluationSettings(methods=("orchrm_bon", "logprob"), ns=(1, 2)))
    assert outcome.rm_version is None
    [note] = outcome.notes
    assert note.startswith("orchrm_bon on gsm8k: not evaluated, no champion reward model for the math domain in ")
    assert "none trained yet" in note
    assert {row["method"] for row in outcome.rows} == {"logprob"}


def test_offshelf_rm_without_a_configured_model_is_left_out_saying_why(storage_root, tmp_path):
    from orchrm_dagster.synthetic import generate_runs
    from tests.evaluation.test_evaluate import ingest

    ingest(storage_root, tmp_path, "runs.jsonl", generate_runs(16, seed=5, benchmarks=("gsm8k_test",),
                                                              samples_per_problem=4, policies=(("gen", "base", None),)))
    outcome = evaluate(storage_root, EvaluationSettings(methods=("offshelf_rm", "logprob"), ns=(1, 2)))
    assert outcome.notes == ["offshelf_rm: left out, no off-the-shelf model is configured (offshelf_rm.model); the "
                             "untrained backbone with a randomly initialised head is no baseline"]
    assert {row["method"] for row in outcome.rows} == {"logprob"}
    assert method_named("offshelf_rm").left_out(EvaluationSettings(
        offshelf_rm=OffShelfRMSettings(model="/some/model"))) is None  # with one, it runs as before
