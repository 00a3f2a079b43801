"""The environments registry is the one list of environments; a run records its environment, and a run file from
before environments existed reads as executed by real agents."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchrm_dagster.environments import environment_names, environments, is_simulated
from orchrm_dagster.orchestration import ExecutionSettings
from orchrm_dagster.synthetic import generate_runs

from ..evaluation.test_evaluate import ingest


def test_the_registry_is_the_only_list_of_environments_and_truths():
    import click

    from orchrm_dagster.app.cli.loop import command as loop_command
    from orchrm_dagster.app.cli.orchestrate import command as orchestrate_command
    from orchrm_dagster.truths import truths

    assert set(environment_names()) >= {"agents", "simulated"} and ExecutionSettings().environment == "agents"
    assert all(ExecutionSettings(environment=name).environment == name for name in environment_names())
    sections = ExecutionSettings().environment_settings
    assert {name: type(getattr(sections, name)) for name in environment_names()} == {
        name: entry.config for name, entry in environments().items()}
    assert set(truths()) >= {"plan_success_rate", "debate_sink"}
    for command in (loop_command, orchestrate_command):
        [option] = [p for p in command.params if p.name == "environment"]
        assert tuple(option.type.names()) == environment_names()
        help_text = option.get_help_record(click.Context(command))[1]
        assert all(entry.description in help_text for entry in environments().values())
    assert is_simulated("simulated") and not is_simulated("agents") and not is_simulated(None)


def test_an_unknown_environment_or_truth_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError) as refused:
        ExecutionSettings(environment="mars")
    assert all(name in str(refused.value) for name in environment_names())
    with pytest.raises(ValueError, match="plan_success_rate"):
        ExecutionSettings().in_environment("simulated", "astrology")


def test_the_loop_never_executes_its_rollouts_and_its_rounds_in_different_environments():
    from orchrm_dagster.loop import LoopSettings

    simulated = ExecutionSettings().in_environment("simulated")
    with pytest.raises(ValueError, match="rollouts execute in 'agents' and its rounds in 'simulated'"):
        LoopSettings(round=LoopSettings().round.__class__(execution=simulated))
    both = LoopSettings().in_environment("simulated", "debate_sink")
    assert both.rollout_execution.environment == both.round.execution.environment == "simulated"
    assert both.round.execution.environment_settings.simulated.truth == "debate_sink"


def test_runs_record_their_environment_and_a_file_without_the_field_reads_as_agents(storage_root, tmp_path):
    from orchrm_dagster.storage import Warehouse, scan_table

    ingest(storage_root, tmp_path, "old.jsonl", list(generate_runs(4, seed=1)))
    ingest(storage_root, tmp_path, "sim.jsonl", list(generate_runs(4, seed=2, environment="simulated")))
    runs = scan_table(storage_root, "runs").collect()
    by_batch = dict(zip(runs["run_id"], runs["environment"]))
    assert sorted(set(by_batch.values())) == ["agents", "simulated"]
    assert {v for k, v in by_batch.items() if k.startswith("run-1-")} == {"agents"}

    # a runs file written before the column existed, as an older orchrm left it
    table = scan_table(storage_root, "runs").collect().to_arrow()
    legacy = table.drop_columns(["environment"]).slice(0, 1)
    legacy = legacy.set_column(legacy.schema.get_field_index("run_id"), "run_id", pa.array(["legacy-run"]))
    pq.write_table(legacy, tmp_path / "legacy.parquet")
    storage_root.replace_batch("runs", "legacy", [str(tmp_path / "legacy.parquet")])
    warehouse = Warehouse(storage_root)
    warehouse.refresh_views()
    rows = warehouse.query("select environment, count(*) AS n from runs group by all order by all").to_pylist()
    assert {r["environment"]: r["n"] for r in rows}.get("agents", 0) == 5  # 4 ingested + the legacy file
    polars_view = scan_table(storage_root, "runs").collect()
    assert polars_view.filter(polars_view["run_id"] == "legacy-run")["environment"].to_list() == ["agents"]


def test_every_label_of_a_simulated_environment_says_so():
    import polars as pl

    from orchrm_dagster.environments import environment_label
    from orchrm_dagster.evaluation.pools import policy_in_environment

    assert environment_label("simulated") == "simulated (SIMULATED)"
    assert environment_label(None) == environment_label("agents") == "agents"  # a run from before environments
    runs = pl.DataFrame({"policy_name": ["p", "p", "p"], "environment": ["agents", "simulated", "elsewhere"]})
    assert runs.select(policy_in_environment())["policy"].to_list() == [
        "p", "p [simulated (SIMULATED)]", "p [elsewhere]"]  # pools never mix environments
