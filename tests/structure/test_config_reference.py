"""docs/configuration.md is generated from the config classes: regenerated here in memory, it must match the
committed file, and it must cover every config a user sets."""

from __future__ import annotations

from orchrm_dagster.app import config_reference


def test_the_configuration_reference_is_up_to_date():
    committed = config_reference.REFERENCE.read_text() if config_reference.REFERENCE.exists() else ""
    assert committed == config_reference.render(), (
        f"docs/configuration.md is stale: run `{config_reference.COMMAND}` and commit the result")


def test_every_config_class_and_field_is_in_the_reference():
    reference = config_reference.render()
    for cls in config_reference.config_classes() + config_reference.dagster_configs():
        assert f"\n## {cls.__name__}\n" in reference, cls
        for name in cls.__pydantic_fields__:
            assert f"| `{name}` |" in reference, f"{cls.__name__}.{name}"


def test_registries_settings_sections_and_cli_flags_are_included():
    reference = config_reference.render()
    for section in ("RewardSettings", "MethodSettings", "EnvironmentSettings", "TruthSettings"):
        assert f"\n## {section}\n" in reference
    assert "`orchrm loop --method`" in reference


def test_the_reference_holds_no_machine_path():
    reference = config_reference.render()
    root = str(config_reference.REFERENCE.parents[1])
    assert root not in reference and "/home/" not in reference and "/root/" not in reference
