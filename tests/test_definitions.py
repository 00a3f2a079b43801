import dagster as dg
import pytest

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


def test_the_champion_check_is_blocking_and_runs_in_every_job_that_trains_a_reward_model():
    key = dg.AssetCheckKey(dg.AssetKey("reward_model"), "champion_beats_chance")
    assert defs.resolve_asset_graph().get(key).blocking
    for job in defs.resolve_all_job_defs():
        if job.is_asset_job and dg.AssetKey("reward_model") in job.asset_layer.selected_asset_keys:
            assert key in job.asset_layer.asset_graph.asset_check_keys, job.name


def test_storage_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHRM_STORAGE", str(tmp_path / "elsewhere"))
    storage = build_definitions().resources["storage"]
    assert storage.storage_root().base == str(tmp_path / "elsewhere")


def test_the_llm_resource_takes_one_backend_by_kind():
    from assets.resources import LLMBackendResource
    from orchrm_dagster.llm import TransformersSpec, build_backend
    from orchrm_dagster.llm.openai_backend import OpenAISpec

    served = OpenAISpec(base_url="http://vllm:8000/v1", model="served")
    assert LLMBackendResource().spec() == TransformersSpec()  # the embedded SmolLM2: the launchpad runs as it is
    assert LLMBackendResource().build() is build_backend(TransformersSpec())  # built lazily, once per spec
    assert LLMBackendResource(backend={"kind": "openai", "base_url": "http://vllm:8000/v1", "model": "served"}
                              ).spec() == served
    assert LLMBackendResource(backend=served).spec() == served
    launchpad = LLMBackendResource.to_config_schema().as_field().config_type.fields["backend"]
    assert launchpad.default_value == {"transformers": {"device": "auto", "dtype": "auto", "max_batch_size": 8,
                                                         "decoding_cache": "auto"}}
    with pytest.raises(ValueError, match=r"openai\.device"):
        LLMBackendResource(backend={"kind": "openai", "base_url": "http://vllm:8000/v1", "model": "m", "device": "cpu"})


def test_run_config_picks_the_backend_as_the_launchpad_shows_it():
    from assets.resources import LLMBackendResource
    from orchrm_dagster.llm.vllm_backend import VLLMSpec

    seen = []

    @dg.asset
    def probe(llm: LLMBackendResource) -> None:
        seen.append(llm.spec())

    run_config = {"resources": {"llm": {"config": {"backend": {"vllm": {"model": "m", "tensor_parallel_size": 2}}}}}}
    assert dg.materialize([probe], resources={"llm": LLMBackendResource()}, run_config=run_config).success
    assert seen == [VLLMSpec(model="m", tensor_parallel_size=2)]
    foreign_field = {"vllm": {"model": "m", "device": "cpu"}}
    with pytest.raises(dg.DagsterInvalidConfigError, match="device"):
        dg.materialize([probe], resources={"llm": LLMBackendResource()},
                       run_config={"resources": {"llm": {"config": {"backend": foreign_field}}}})
