"""Dagster's own CLIs, run from the project folder, use the instance orchrm uses: they read `.env` there, and orchrm
writes DAGSTER_HOME into it (deferring to one set in the environment)."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
from dotenv import dotenv_values

from orchrm_dagster.app import dagster_home
from orchrm_dagster.app.instance import cli_instance, write_dotenv


def test_the_dotenv_line_names_the_home_and_defers_to_an_exported_one(tmp_path, monkeypatch):
    (tmp_path / ".env").write_text("OTHER=1")

    assert write_dotenv(tmp_path, tmp_path / "home")
    assert write_dotenv(tmp_path, tmp_path / "home2")  # a new home replaces orchrm's line, keeps the user's

    monkeypatch.delenv("DAGSTER_HOME")
    assert dotenv_values(tmp_path / ".env") == {"OTHER": "1", "DAGSTER_HOME": str(tmp_path / "home2")}
    monkeypatch.setenv("DAGSTER_HOME", "/elsewhere")
    assert dotenv_values(tmp_path / ".env")["DAGSTER_HOME"] == "/elsewhere"


def test_a_dotenv_that_sets_its_own_dagster_home_is_left_alone(tmp_path):
    (tmp_path / ".env").write_text("DAGSTER_HOME=/mine\n")

    assert not write_dotenv(tmp_path, tmp_path / "home")
    assert (tmp_path / ".env").read_text() == "DAGSTER_HOME=/mine\n"


def test_orchrm_writes_the_dotenv_only_for_the_default_root_in_the_project_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(dagster_home, "PROJECT_DIR", tmp_path)
    monkeypatch.chdir(tmp_path)
    cli_instance()  # ORCHRM_STORAGE and DAGSTER_HOME are set by the test fixture: not the defaults
    assert not (tmp_path / ".env").exists()

    monkeypatch.delenv("ORCHRM_STORAGE")
    monkeypatch.delenv("DAGSTER_HOME")
    cli_instance()

    assert dotenv_values(tmp_path / ".env")["DAGSTER_HOME"] == str(tmp_path / "storage" / "dagster_home")


def test_dagster_asset_materialize_from_the_folder_records_its_run_in_orchrms_instance(tmp_path):
    home = Path(os.environ["DAGSTER_HOME"])
    cli_instance()
    project = tmp_path / "project"
    project.mkdir()
    write_dotenv(project, home)
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}  # as a shell without DAGSTER_HOME

    subprocess.run([str(Path(sys.executable).with_name("dagster")), "asset", "materialize", "-m",
                    "orchrm_dagster.definitions", "--select", "problems"],
                   cwd=project, env=env, check=True, capture_output=True, timeout=300)

    runs = dg.DagsterInstance.get().get_runs()
    assert [(run.status, run.asset_selection) for run in runs] == [
        (dg.DagsterRunStatus.SUCCESS, {dg.AssetKey("problems")})]
    assert not any(p.name.startswith(".tmp_dagster_home_") for p in project.iterdir())
