import dagster as dg

from orchrm_dagster.definitions import build_definitions, defs


def test_definitions_load_with_the_whole_asset_graph():
    dg.Definitions.validate_loadable(defs)
    keys = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"problems", "runs", "subagent_calls", "quarantine", "labels"} <= keys
    assert defs.resolve_job_def("ingest_run_batch").partitions_def.name == "run_batches"
    assert defs.resolve_sensor_def("loop_sensor").default_status == dg.DefaultSensorStatus.RUNNING
    assert defs.resolve_sensor_def("grpo_loop_sensor").default_status == dg.DefaultSensorStatus.STOPPED


def test_asset_checks_are_attached():
    checks = {key.name for key in defs.resolve_asset_graph().asset_check_keys}
    assert {"run_ids_unique", "batch_ingested", "every_referenced_run_labeled", "quarantine_rate"} <= checks


def test_storage_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHRM_STORAGE", str(tmp_path / "elsewhere"))
    storage = build_definitions().resources["storage"]
    assert storage.storage_root().base == str(tmp_path / "elsewhere")
