"""Best-of-N end to end through the Dagster assets and the CLI: a reward model trained on a generated history where
plans decide correctness picks better plans than a single sample on held-out problems; the runner in Best-of-N mode
executes one plan per problem with the embedded model."""

import json

import orjson
import pytest
from click.testing import CliRunner

from orchrm_dagster.definitions import build_definitions
from orchrm_dagster.app.cli import main
from orchrm_dagster.app.commands import ingest_files, materialize_selection, orchestrate
from orchrm_dagster.synthetic import generate_runs, write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # a loaded CI machine needs more than 600 s

SMALL_RM = {"max_length": 192, "max_train_pairs": 320, "batch_size": 16, "epochs": 2.0, "learning_rate": 1e-4}
SMALL_EXECUTION = {"subagent_max_new_tokens": 48, "agents": {"sc_samples": 2, "debate_rounds": 1}}
HELD_OUT = (("held-out-orchestrator", "base", None),)


def materialize(defs, key, config=None):
    result = materialize_selection(defs, f'key:"{key}"', None, {"ops": {key: {"config": config}}} if config else None)
    assert result.success, [str(e) for e in result.all_events if e.is_failure]
    return result


def invoke(*args):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_best_of_n_beats_one_sample_on_held_out_problems_and_the_runner_executes_one_plan(tmp_path):
    defs = build_definitions()
    history, held_out = tmp_path / "history.jsonl", tmp_path / "held-out.jsonl"
    write_jsonl(generate_runs(960, seed=1, benchmarks=("gsm8k_test", "math500"), plans_decide=True), history)
    write_jsonl(generate_runs(40 * 8, seed=2, benchmarks=("gsm8k_test", "math500"), plans_decide=True,
                              policies=HELD_OUT, first_problem=120), held_out)
    assert ingest_files(defs, [history])[0].status == "SUCCESS"
    materialize(defs, "problems")
    materialize(defs, "pairs")
    materialize(defs, "reward_model", SMALL_RM)
    assert ingest_files(defs, [held_out])[0].status == "SUCCESS"
    materialize(defs, "rm_scores")

    output = invoke("evaluate", "--methods", "single,orchrm_bon,majority_vote,logprob,collaborative_verifier,oracle",
                    "--n", "1,2,4,8").output
    assert "accuracy" in output and "accuracy_vs_n.png" in output
    rows = json.loads(invoke("query", "--format", "json", "select benchmark, method, n, accuracy, n_problems, "
                             "verification_tokens from evaluation where policy = 'held-out-orchestrator'").output)
    at = {(r["benchmark"], r["method"], r["n"]): r for r in rows}
    for benchmark in ("gsm8k", "math500"):
        assert at[(benchmark, "orchrm_bon", 8)]["n_problems"] == 20
        assert at[(benchmark, "orchrm_bon", 8)]["accuracy"] > at[(benchmark, "single", 1)]["accuracy"] + 0.05
        assert at[(benchmark, "oracle", 8)]["accuracy"] >= at[(benchmark, "orchrm_bon", 8)]["accuracy"]
        assert at[(benchmark, "orchrm_bon", 8)]["verification_tokens"] > 0
    entered = {r["problem_id"] for r in json.loads(invoke("query", "--format", "json",
                                                           "select problem_id from evaluation_problems").output)}
    from orchrm_dagster.rm import pair_problems

    seen = pair_problems(defs.resources["storage"].storage_root(), 1)
    assert seen and entered and not entered & seen  # held out means held out

    # the runner in Best-of-N mode, on the embedded SmolLM2: one plan executed per problem, the pick recorded
    materialize(defs, "problems")
    from orchrm_dagster.orchestration import ExecutionSettings, PlanSamplingSettings

    result = orchestrate(defs, "gsm8k", "smollm2-base", PlanSamplingSettings(n_samples=2, problem_limit=2),
                         ExecutionSettings(**SMALL_EXECUTION, selection="orchrm_bon", best_of_n=2))
    assert result.success
    root = defs.resources["storage"].storage_root()
    lines = root.fs.cat_file(root.landing_path("mas-gsm8k_smollm2-base-best-of-2.jsonl")).splitlines()
    records = [orjson.loads(line) for line in lines]
    assert sorted(r["problem_id"] for r in records) == ["gsm8k-test-0000", "gsm8k-test-0001"]
    for record in records:
        selection = record["meta"]["selection"]
        scores = {c["run_id"]: c["score"] for c in selection["candidates"]}
        assert len(scores) == 2 and record["run_id"] == selection["chosen"] + "/best-of-2"
        assert selection["verification_tokens"] > 0
