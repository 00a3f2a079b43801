"""docs/configuration.md is generated from the config classes: regenerated, it must match the committed file, and it
must cover every config a user sets."""

from __future__ import annotations

import os
import subprocess
import sys

from orchrm_dagster.app import config_reference

ROOT = config_reference.REFERENCE.parents[1]


def test_the_configuration_reference_is_up_to_date():
    # in a process of its own: other tests register toy entries (a reward, a method) that the registries then list
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    checked = subprocess.run([sys.executable, "-m", "orchrm_dagster.app.config_reference", "--check"], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr


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
    assert "`orchrm loop --method`" in reference and "`orchrm serve --port`" in reference


def test_the_reference_holds_no_machine_path():
    reference = config_reference.render()
    assert str(ROOT) not in reference and "/home/" not in reference and "/root/" not in reference


def test_a_file_that_differs_is_stale(tmp_path):
    old = tmp_path / "configuration.md"
    old.write_text("# an old reference\n")
    assert config_reference.is_stale(old) and config_reference.is_stale(tmp_path / "missing.md")
