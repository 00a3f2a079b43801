"""Pairs -> reward model -> scores through the Dagster assets, on real Parquet, DuckDB and MiniLM."""

import pytest

from orchrm_dagster.app.commands import ingest_files, materialize_selection
from orchrm_dagster.definitions import build_definitions
from orchrm_dagster.synthetic import generate_runs, write_jsonl
from tests.rm.toy import NO_FLOOR

SMALL_RM = {"max_length": 192, "max_train_pairs": 128, "batch_size": 16, "epochs": 2.0, "learning_rate": 1e-4}


def materialize(defs, selection, config=None):
    run_config = {"ops": {selection.split('"')[1]: {"config": config}}} if config else None
    result = materialize_selection(defs, selection, None, run_config)
    assert result.success, [str(e) for e in result.all_events if e.is_failure]
    return result


def warehouse_rows(defs, statement):
    return defs.resources["storage"].warehouse().query(statement).to_pylist()


@pytest.mark.slow
@pytest.mark.timeout(1200)  # 960 runs scored by MiniLM: more than 600 s on a loaded 2-core machine
def test_pairs_champion_and_scores_from_ingested_runs(tmp_path):
    defs = build_definitions()
    history = tmp_path / "history.jsonl"
    # 120 problems: about 25 validation pairs, more than the champion floor's minimum (20; 480 runs made 14)
    write_jsonl(generate_runs(960, seed=2, benchmarks=("gsm8k_test", "math500")), history)
    assert ingest_files(defs, [history])[0].status == "SUCCESS"

    materialize(defs, 'key:"pairs"')
    by_source = {r["source"]: r["n"] for r in warehouse_rows(defs, "select source, count(*) n from pairs group by 1")}
    assert by_source["specialized_over_base"] > by_source["correct_over_incorrect"] > 0
    assert warehouse_rows(defs, "select count(*) n from (select problem_id from pairs group by 1 "
                                "having count(distinct split) > 1)") == [{"n": 0}]

    first = materialize(defs, 'key:"reward_model"', SMALL_RM)
    checks = {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
              for e in first.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert checks == {"champion_beats_chance": True}
    v1 = warehouse_rows(defs, "select version, val_accuracy, is_champion from rm_checkpoints")
    assert v1 == [{"version": 1, "val_accuracy": v1[0]["val_accuracy"], "is_champion": True}]
    assert v1[0]["val_accuracy"] > 0.5

    # the same pairs, trained again: a second version that replaces the first only if it is as good
    materialize(defs, 'key:"reward_model"', {**SMALL_RM, "seed": 1})
    versions = warehouse_rows(defs, "select version, val_accuracy, champion_val_accuracy, is_champion "
                                    "from rm_checkpoints order by version")
    assert [v["version"] for v in versions] == [1, 2]
    second = versions[1]
    assert second["champion_val_accuracy"] == pytest.approx(v1[0]["val_accuracy"])
    assert second["is_champion"] == (second["val_accuracy"] >= second["champion_val_accuracy"])
    assert sum(v["is_champion"] for v in versions) == 1

    materialize(defs, 'key:"rm_scores"')
    champion = [v["version"] for v in versions if v["is_champion"]][0]
    scored = warehouse_rows(defs, "select count(*) n, min(rm_version) lo, max(rm_version) hi, "
                                  "count(*) filter (where tokens > 0) with_tokens from rm_scores")[0]
    assert scored == {"n": 960, "lo": champion, "hi": champion, "with_tokens": 960}
    again = materialize(defs, 'key:"rm_scores"')  # nothing new to score
    metadata = {k: v.value for e in again.get_asset_materialization_events()
                for k, v in e.event_specific_data.materialization.metadata.items()}
    assert metadata["runs_scored"] == 0 and metadata["batches_already_current"] == 1


def test_a_failed_champion_check_stops_what_follows_reward_model_in_its_run(tmp_path, tiny_backbone):
    from assets.runs import failure_cause

    defs = build_definitions()
    history = tmp_path / "history.jsonl"
    write_jsonl(generate_runs(96, seed=2, benchmarks=("gsm8k_test",), samples_per_problem=8), history)
    assert ingest_files(defs, [history])[0].status == "SUCCESS"
    materialize(defs, 'key:"pairs"', {"validation_fraction": 0.4})
    unreachable = {"backbone": tiny_backbone, "max_length": 64, "batch_size": 8, "device": "cpu",
                   "min_validation_pairs": 10_000}  # no version can be champion
    result = materialize_selection(defs, 'key:"reward_model" or key:"rm_scores"', None,
                                   {"ops": {"reward_model": {"config": unreachable}}})
    assert not result.success
    checks = {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
              for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert checks == {"champion_beats_chance": False}
    assert {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()} == {"reward_model"}
    assert "champion_beats_chance" in failure_cause(result.all_events)
    assert warehouse_rows(defs, "select version, is_champion from rm_checkpoints") == [
        {"version": 1, "is_champion": False}]


def materialized_metadata(result) -> dict:
    return {k: v.value for e in result.get_asset_materialization_events()
            for k, v in e.event_specific_data.materialization.metadata.items()}


@pytest.mark.slow
def test_a_version_s_training_pairs_are_in_the_metadata_and_the_run_config_retrains_it(tmp_path, tiny_backbone):
    from pathlib import Path

    defs = build_definitions()
    history = tmp_path / "history.jsonl"
    write_jsonl(generate_runs(96, seed=2, benchmarks=("gsm8k_test",), samples_per_problem=8), history)
    assert ingest_files(defs, [history])[0].status == "SUCCESS"
    materialize(defs, 'key:"pairs"', {"validation_fraction": 0.4})
    tiny = {"backbone": tiny_backbone, "max_length": 64, "batch_size": 8, "device": "cpu", "seed": 5,
            **NO_FLOOR}  # a tiny model is crowned: the blocking champion check lets the run succeed

    first = materialized_metadata(materialize(defs, 'key:"reward_model"', tiny))["training_pairs"]["1"]
    assert Path(first["path"]).name == "training_pairs.parquet" and Path(first["path"]).exists()
    assert first["train_rows"] > 0 and first["validation_rows"] > 0
    assert warehouse_rows(defs, "select split, count(*) n from rm_training_pairs where version = 1 group by 1 "
                                "order by 1") == [{"split": "train", "n": first["train_rows"]},
                                                  {"split": "validation", "n": first["validation_rows"]}]

    retrained = materialized_metadata(materialize(defs, 'key:"reward_model"', {**tiny, "retrain_from_version": 1}))
    assert retrained["retrained_from"] == 1
    second = retrained["training_pairs"]["2"]
    assert {k: v for k, v in second.items() if k != "path"} == {k: v for k, v in first.items() if k != "path"}
    accuracies = warehouse_rows(defs, "select val_accuracy, pair_set_fingerprint from rm_checkpoints order by version")
    assert accuracies[0] == accuracies[1]
