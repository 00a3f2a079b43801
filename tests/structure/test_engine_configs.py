"""One config per engine unit: every Dagster run config and resource is generated from an engine config, and
shows the launchpad every engine field with its default and description."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import pytest

import assets.run_configs as run_configs
import orchrm_dagster
from assets import resources  # noqa: F401  (generates the resources' fields)
from assets.config_bridge import EngineConfig, dagster_config, defaults_of, engine_class_of, generated_classes


def _engine_config_classes() -> set[type]:
    """Every pydantic dataclass of the engine (each is made by `engine_config`)."""
    found = set()
    for module in pkgutil.walk_packages(orchrm_dagster.__path__, "orchrm_dagster."):
        if module.name.split(".")[1] in ("app", "definitions"):  # above the engine: the application, the location
            continue
        for value in vars(importlib.import_module(module.name)).values():
            if isinstance(value, type) and hasattr(value, "__pydantic_fields__") and dataclasses.is_dataclass(value):
                found.add(value)
    return found


GENERATED = sorted(generated_classes().items(), key=lambda item: item[0].__name__)


def _launchpad_fields(generated: type) -> dict:
    return generated.to_config_schema().as_field().config_type.fields


def test_every_engine_config_reaches_dagster():
    from orchrm_dagster.serving.settings import ServeSettings
    from orchrm_dagster.settings import DeploymentSettings, MainJobOptions, OrchrmSettings

    # `orchrm serve` and `orchrm main` start from the CLI (their flags are generated from the fields), never from a
    # Dagster run; the deployment profile chooses the executor; the settings file's schema is the sections', each of
    # which reaches Dagster
    above_runs = {ServeSettings, MainJobOptions, DeploymentSettings, OrchrmSettings}
    assert _engine_config_classes() - above_runs == {engine for _, engine in GENERATED}


@pytest.mark.parametrize("generated, engine", GENERATED, ids=lambda c: c.__name__)
def test_the_launchpad_shows_each_engine_field_with_its_default_and_description(generated, engine):
    launchpad = _launchpad_fields(generated)
    assert set(launchpad) == set(engine.__pydantic_fields__), "a field exists on one side only"
    instance = defaults_of(generated)
    for name, info in engine.__pydantic_fields__.items():
        field = launchpad[name]
        assert info.description and field.description == info.description, name
        if info.is_required():
            assert field.is_required, name
            continue
        default = info.default_factory() if info.default_factory is not None else info.default
        default = getattr(instance, name) if instance is not None else default
        shown = field.default_value if field.default_provided else None
        expected = dataclasses.asdict(default) if dataclasses.is_dataclass(default) else default
        if info.discriminator:  # a selector: {kind: the member's fields that are set}
            tag = expected.pop(info.discriminator)
            expected = {tag: {k: v for k, v in expected.items() if v is not None}}
        assert _plain(shown) == _plain(expected), name


def _plain(value):
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("generated, engine", [(g, e) for g, e in GENERATED if issubclass(g, EngineConfig)],
                         ids=lambda c: c.__name__)
def test_defaults_round_trip_to_the_engine(generated, engine):
    required = {name: "x" for name, info in engine.__pydantic_fields__.items() if info.is_required()}
    assert generated(**required).to_engine() == (defaults_of(generated) or engine(**required))


def test_a_value_set_in_run_config_reaches_the_engine_nested_and_as_a_tuple():
    from orchrm_dagster.orchestration import ExecutionSettings

    config = run_configs.ExecutionConfig(agents={"sc_samples": 3, "debate_roles": ["A", "B", "C"]})
    engine = config.to_engine()
    assert isinstance(engine, ExecutionSettings)
    assert engine.agents.sc_samples == 3 and engine.agents.debate_roles == ("A", "B", "C")


def test_the_engine_validates_what_the_launchpad_passes():
    with pytest.raises(ValueError, match="sc_samples"):
        run_configs.ExecutionConfig(agents={"sc_samples": 0}).to_engine()


def test_a_field_added_to_an_engine_config_appears_in_dagster():
    from orchrm_dagster.engine_config import Field, engine_config

    @engine_config
    class Probe:
        rate: float = Field(default=0.5, description="a new knob")

    assert _launchpad_fields(dagster_config(Probe, "ProbeConfig"))["rate"].description == "a new knob"
    assert engine_class_of(dagster_config(Probe, "ProbeConfig2")) is Probe


def test_a_nested_config_whose_parent_sets_other_defaults_shows_and_passes_them():
    from orchrm_dagster.grpo import GRPOSettings

    launchpad = _launchpad_fields(run_configs.GRPORoundConfig)["execution"].default_value
    assert launchpad["subagent_max_new_tokens"] == 96 and launchpad["agents"]["sc_samples"] == 3
    assert run_configs.GRPORoundConfig().to_engine() == GRPOSettings()


def test_a_discriminated_union_field_reaches_dagster_as_a_selector_and_comes_back():
    from assets.config_bridge import from_engine
    from orchrm_dagster.llm import LLMSettings, backend_kinds
    from orchrm_dagster.llm.vllm_backend import VLLMSpec

    selector = _launchpad_fields(resources.LLMBackendResource)["backend"].config_type
    assert set(selector.fields) == set(backend_kinds())
    assert "kind" not in selector.fields["vllm"].config_type.fields  # the selector's key is the kind
    settings = LLMSettings(backend=VLLMSpec(model="m", tensor_parallel_size=2))
    assert from_engine(resources.LLMBackendResource, settings).to_engine() == settings
