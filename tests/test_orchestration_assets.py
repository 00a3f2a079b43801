"""orchestration_samples -> execution_artifacts -> landing zone -> runs and labels, with the embedded SmolLM2."""

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner

from assets.resources import PolicyConfig, PolicyRegistry
from orchrm_dagster.app.cli import main
from orchrm_dagster.app.commands import ingest_landed, orchestrate
from orchrm_dagster.definitions import build_definitions
from orchrm_dagster.orchestration import ExecutionSettings, PlanSamplingSettings
from orchrm_dagster.plans import parse_plan

pytestmark = pytest.mark.slow

SMALL_EXECUTION = {"subagent_max_new_tokens": 48, "agents": {"sc_samples": 2, "debate_rounds": 1, "reflexion_rounds": 1}}


def invoke(*args):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def warehouse_rows(defs, statement):
    return defs.resources["storage"].warehouse().query(statement).to_pylist()


def test_materialize_orchestration_assets_from_the_cli_then_ingest(tmp_path):
    invoke("materialize", "problems")
    config = tmp_path / "run_config.yaml"
    config.write_text(yaml.safe_dump({"ops": {
        "orchestration_samples": {"config": {"n_samples": 2, "problem_limit": 1}},
        "execution_artifacts": {"config": SMALL_EXECUTION}}}))
    invoke("materialize", "orchestration_samples", "execution_artifacts", "--partition", "gsm8k|smollm2-fewshot",
           "--config", str(config))

    defs = build_definitions()
    [outcome] = ingest_landed(defs, ["mas-gsm8k_smollm2-fewshot.jsonl"])
    assert outcome.status == "SUCCESS" and outcome.runs == 2 and outcome.labeled == 2 and outcome.quarantined == 0

    runs = warehouse_rows(defs, "select * from runs order by sample_index")
    assert [r["problem_id"] for r in runs] == ["gsm8k-test-0000"] * 2
    for run in runs:
        assert run["policy_name"] == "smollm2-fewshot" and run["policy_kind"] == "specialized"
        assert run["error"] is None, run["plan"]  # the grammar makes every plan valid and fit its token budget
        assert run["plan_logprob"] < 0
        assert run["orchestrator_prompt_tokens"] > 0 and run["orchestrator_completion_tokens"] > 0
        plan = parse_plan(run["plan"])
        assert (run["n_subagent_calls"] >= len(plan.agents)) and (run["n_subagent_calls"] == 0) == plan.is_direct
        assert run["subagent_tokens"] == run["subagent_prompt_tokens"] + run["subagent_completion_tokens"]
        assert (run["subagent_tokens"] > 0) == (not plan.is_direct)
    calls = warehouse_rows(defs, "select run_id, count(*) n, sum(prompt_tokens + completion_tokens) tokens "
                                 "from subagent_calls group by run_id")
    assert {c["run_id"]: (c["n"], c["tokens"]) for c in calls} == {
        r["run_id"]: (r["n_subagent_calls"], r["subagent_tokens"]) for r in runs if r["n_subagent_calls"]}
    labels = warehouse_rows(defs, "select labeler, is_correct from labels")
    assert len(labels) == 2 and {label["labeler"] for label in labels} == {"math_verify"}

    # re-materializing the same partition redoes nothing: the landed runs count as finished
    invoke("materialize", "orchestration_samples", "execution_artifacts", "--partition", "gsm8k|smollm2-fewshot",
           "--config", str(config))
    with dg.DagsterInstance.get() as instance:
        [latest] = [r for r in instance.get_runs(limit=1)]
        executions = instance.get_latest_materialization_event(dg.AssetKey("execution_artifacts"))
        assert latest.status == dg.DagsterRunStatus.SUCCESS
        metadata = executions.asset_materialization.metadata
        assert metadata["executed"].value == 0 and metadata["resumed"].value == 2


def test_malformed_plans_land_as_failed_runs_with_reasons():
    # 8 new tokens cannot hold even a direct-answer plan, and without the grammar nothing closes the tags
    registry = PolicyRegistry(policies=[PolicyConfig(name="free-text", kind="base", grammar=False, max_new_tokens=8)])
    defs = build_definitions(policy_registry=registry)
    from orchrm_dagster.app.commands import materialize_selection

    assert materialize_selection(defs, 'key:"problems"', None).success
    result = orchestrate(defs, "hotpotqa", "free-text", PlanSamplingSettings(n_samples=2, problem_limit=2),
                         ExecutionSettings(**SMALL_EXECUTION))
    assert result.success
    [outcome] = ingest_landed(defs, ["mas-hotpotqa_free-text.jsonl"])
    assert outcome.runs == 4 and outcome.labeled == 4 and outcome.correct == 0

    runs = warehouse_rows(defs, "select r.error, r.final_answer, r.n_subagent_calls, l.is_correct, l.reason "
                                "from runs r join labels l using (run_id)")
    for run in runs:
        assert run["error"].startswith("plan does not parse: ")
        assert run["final_answer"] is None and run["n_subagent_calls"] == 0
        assert run["is_correct"] is False and "plan does not parse" in run["reason"]
