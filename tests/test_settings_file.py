"""The settings file (orchrm.yaml / ORCHRM_CONFIG): one function reads it for every entry point; its values sit
between the defaults and the environment, flags and run config; a mistake is named by file, line and key."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchrm_dagster.settings import OrchrmSettings, load_settings, setting_sources
from orchrm_dagster.settings_file import SettingsError, read_settings_file

DAGSTER = str(Path(sys.executable).with_name("dagster"))


def write(folder: Path, text: str, name: str = "orchrm.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def settings_file(tmp_path, monkeypatch):
    """A settings file named by ORCHRM_CONFIG, its storage root its own (ORCHRM_STORAGE unset)."""
    monkeypatch.delenv("ORCHRM_STORAGE")
    path = write(tmp_path, """\
        storage:
          root: team-storage
        loop:
          rounds: 7
          round:
            learning_rate: 0.0005
        serving:
          port: 8123
        main:
          history_runs: 321
        """)
    monkeypatch.setenv("ORCHRM_CONFIG", str(path))
    return path


# --- precedence ----------------------------------------------------------------------------------------------


def test_the_file_sets_what_it_names_and_leaves_every_other_setting_at_its_default(settings_file, tmp_path):
    settings = load_settings()
    assert settings.loop.rounds == 7 and settings.loop.round.learning_rate == 0.0005
    assert settings.storage.root == str(tmp_path / "team-storage")  # relative to the file's folder
    assert settings.loop.round.steps == OrchrmSettings().loop.round.steps
    sources = {key: source for key, _, source in setting_sources(settings, read_settings_file())}
    assert sources["loop.round.learning_rate"] == "orchrm.yaml:6"
    assert sources["loop.round.steps"] == "default"


def test_an_environment_variable_wins_over_the_file(settings_file, monkeypatch, tmp_path):
    monkeypatch.setenv("ORCHRM_STORAGE", str(tmp_path / "elsewhere"))
    settings = load_settings()
    assert settings.storage.root == str(tmp_path / "elsewhere")
    sources = {key: source for key, _, source in setting_sources(settings, read_settings_file())}
    assert sources["storage.root"] == "$ORCHRM_STORAGE"
    write(tmp_path, "storage: {root: team-storage, warehouse_path: wh.duckdb}\n")
    assert load_settings().storage.warehouse_path is None  # the file's warehouse belongs to the file's root

    monkeypatch.setenv("ORCHRM_DEPLOYMENT", "nowhere")
    with pytest.raises(SettingsError, match="ORCHRM_DEPLOYMENT"):
        load_settings()


def test_without_a_file_every_setting_is_its_default(tmp_path, monkeypatch):
    monkeypatch.delenv("ORCHRM_CONFIG")  # as a user's shell: the working directory decides
    monkeypatch.chdir(tmp_path)
    assert load_settings() == OrchrmSettings(storage=load_settings().storage)
    assert read_settings_file().path is None


def test_orchrm_yaml_in_the_working_directory_is_read_and_orchrm_config_names_another(tmp_path, monkeypatch):
    monkeypatch.delenv("ORCHRM_CONFIG")  # as a user's shell: the working directory decides
    write(tmp_path, "loop: {rounds: 3}\n")
    monkeypatch.chdir(tmp_path)
    assert load_settings().loop.rounds == 3
    other = write(tmp_path, "loop: {rounds: 4}\n", "other.yaml")
    monkeypatch.setenv("ORCHRM_CONFIG", str(other))
    assert load_settings().loop.rounds == 4
    monkeypatch.setenv("ORCHRM_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(SettingsError, match="missing.yaml: no such settings file"):
        load_settings()


def test_a_flag_wins_over_the_file_and_the_file_over_the_default_in_orchrm_loop(settings_file, monkeypatch):
    from orchrm_dagster.app import loop as app_loop
    from orchrm_dagster.app.cli import main

    seen = []

    def drive(defs, loop, **_):
        seen.append((defs.resources["storage"].root, loop))
        raise app_loop.LoopFailed("stopped by the test")

    monkeypatch.setattr(app_loop, "drive", drive)
    result = CliRunner().invoke(main, ["loop", "--rounds", "1"])
    assert "stopped by the test" in result.output
    result = CliRunner().invoke(main, ["loop", "--rounds", "1", "--learning-rate", "0.002"])
    (root, from_file), (_, from_flag) = seen
    assert root.endswith("team-storage")
    assert from_file.round.learning_rate == 0.0005 and from_flag.round.learning_rate == 0.002
    assert from_file.round.steps == from_flag.round.steps == OrchrmSettings().loop.round.steps


def test_a_runs_own_config_wins_over_the_file_field_by_field(tmp_path, monkeypatch):
    """The `problems` asset reads the file's extra_files; a run config giving its own replaces them."""
    import dagster as dg

    from orchrm_dagster.app.instance import cli_instance
    from orchrm_dagster.definitions import build_definitions
    from orchrm_dagster.storage import default_storage_url

    def problem_file(name: str) -> str:
        path = tmp_path / f"{name}.jsonl"
        path.write_text(f'{{"problem_id": "{name}-1", "benchmark": "{name}", "question": "1+1?", "answer": "2"}}\n')
        return str(path)

    write(tmp_path, f"problems: {{extra_files: [{problem_file('from_file')}]}}\n")
    monkeypatch.setenv("ORCHRM_CONFIG", str(tmp_path / "orchrm.yaml"))
    defs = build_definitions()

    def benchmarks(run_config=None) -> set[str]:
        defs.resolve_implicit_global_asset_job_def().get_subset(
            asset_selection={dg.AssetKey("problems")}).execute_in_process(
            instance=cli_instance(), run_config=run_config or {})
        from orchrm_dagster.problems import problem_table
        from orchrm_dagster.storage import StorageRoot

        return set(problem_table(StorageRoot(default_storage_url()), ["benchmark"]).column("benchmark").to_pylist())

    assert "from_file" in benchmarks()
    chosen = benchmarks({"ops": {"problems": {"config": {"extra_files": [problem_file("from_run")]}}}})
    assert "from_run" in chosen and "from_file" not in chosen


# --- mistakes --------------------------------------------------------------------------------------------------


def test_an_empty_section_keeps_its_defaults_and_paths_are_the_files_folders(tmp_path):
    (tmp_path / "corpus.jsonl").write_text("")
    path = write(tmp_path, """\
        loop:
          # rounds: 3
        execution: {corpus: corpus.jsonl}
        sampling: {}
        llm:
          backend:
            transformers: {model: ./models/mine}
        """)
    settings = load_settings(path)
    assert settings.loop == OrchrmSettings().loop
    assert settings.execution.corpus == str(tmp_path / "corpus.jsonl")
    assert settings.llm.backend.model == str(tmp_path / "models" / "mine")
    assert load_settings(write(tmp_path, "execution: {corpus: hotpotqa}\n")).execution.corpus == "hotpotqa"


@pytest.mark.parametrize("text, said", [
    ("loop:\n  round:\n    learnig_rate: 0.1\n", ":3: loop.round.learnig_rate: unknown key (did you mean learning_rate?)"),
    ("loop:\n  rounds: many\n", ":2: loop.rounds: Input should be a valid integer"),
    ("loop:\n  round:\n    steps: 0\n", ":3: loop.round.steps: Input should be greater than or equal to 1 (got 0)"),
    ("storage:\n  root: s\nstorag: {}\n", ":3: storag: unknown key (did you mean storage?)"),
    ("llm:\n  backend:\n    openia: {model: x}\n", ":3: llm.backend.openia: unknown kind 'openia' (did you mean openai?)"),
    ("loop: [1, 2]\n", ":1: loop:"),
    ("loop:\n  rounds: 1\n  rounds: 2\n", ":3: loop.rounds is given twice"),
    ("loop: {rounds: 1\n", "not valid YAML"),
    ("policies:\n  - name: mine\n    prompt: prompts/absent.txt\n", ":3: policies.0.prompt: no prompt file"),
])
def test_a_mistake_is_named_by_file_line_and_key(tmp_path, text, said):
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as raised:
        load_settings(path)
    assert str(path) in str(raised.value) and said in str(raised.value), str(raised.value)


_FIELDS = sorted(OrchrmSettings.__pydantic_fields__["loop"].annotation.__pydantic_fields__)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=20).filter(
    lambda key: key not in _FIELDS), line=st.integers(min_value=0, max_value=5))
def test_any_unknown_key_is_named_with_its_line_and_valid_keys_are_not_lost(tmp_path_factory, key, line):
    folder = tmp_path_factory.mktemp("settings")
    padding = "".join(f"  # comment {i}\n" for i in range(line))
    path = write(folder, f"loop:\n  rounds: 3\n{padding}  \"{key}\": 1\n")  # quoted: `y`, `null` are keys too
    with pytest.raises(SettingsError) as raised:
        load_settings(path)
    assert f"orchrm.yaml:{3 + line}: loop.{key}: unknown key" in str(raised.value)
    assert "loop.rounds" not in str(raised.value)  # the valid key beside it is not blamed


def test_the_code_location_refuses_to_load_a_bad_file_and_loads_a_good_one_from_any_folder(tmp_path):
    Path(os.environ["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    bad = write(tmp_path, "loop:\n  round:\n    learnig_rate: 0.1\n", "bad.yaml")
    env = {**os.environ, "ORCHRM_CONFIG": str(bad)}
    command = [DAGSTER, "definitions", "validate", "-m", "orchrm_dagster.definitions"]
    refused = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0
    assert f"{bad}:3: loop.round.learnig_rate: unknown key (did you mean learning_rate?)" in (
        refused.stdout + refused.stderr)
    good = write(tmp_path, "loop: {rounds: 3}\n", "good.yaml")
    loaded = subprocess.run(command, cwd=tmp_path, env={**env, "ORCHRM_CONFIG": str(good)}, capture_output=True,
                            text=True, timeout=300)
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr


# --- every entry point ---------------------------------------------------------------------------------------


def test_the_daemons_sensor_reads_the_storage_root_the_file_names(settings_file, tmp_path):
    """`dagster sensor preview` evaluates the loop's sensor in a code-location process of its own, as the daemon
    does: it finds the file landed in the root only the settings file names."""
    Path(os.environ["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    landing = tmp_path / "team-storage" / "landing"
    landing.mkdir(parents=True)
    (landing / "team-runs.jsonl").write_text("{}\n")
    os.utime(landing / "team-runs.jsonl", (1e9, 1e9))  # landed long ago: settled
    env = {k: v for k, v in os.environ.items() if k != "ORCHRM_STORAGE"}
    preview = subprocess.run([DAGSTER, "sensor", "preview", "loop_sensor", "-m", "orchrm_dagster.definitions"],
                             cwd=tmp_path.parent, env=env, capture_output=True, text=True, timeout=300)
    assert preview.returncode == 0, preview.stdout + preview.stderr
    said = preview.stdout + preview.stderr
    assert "team-runs.jsonl landed" in said and "run requests for 1 run" in said, said


def test_orchrm_main_reads_its_section_and_the_storage_root(settings_file, monkeypatch):
    from orchrm_dagster.app import main_job
    from orchrm_dagster.app.cli import main

    seen = []
    monkeypatch.setattr(main_job, "run_main_job",
                        lambda defs, options, **_: seen.append((defs, options)) or (_ for _ in ()).throw(
                            ValueError("stopped by the test")))
    CliRunner().invoke(main, ["main"])
    (defs, options), = seen
    assert options.history_runs == 321 and defs.resources["storage"].root.endswith("team-storage")
    assert defs.resources["loop"].to_engine().round.learning_rate == 0.0005


def test_orchrm_serve_reads_its_section_and_a_flag_wins(settings_file, monkeypatch):
    import orchrm_dagster.serving as serving
    from orchrm_dagster.app.cli import main

    seen = []
    monkeypatch.setattr(serving, "serve", lambda root, settings: seen.append((root, settings)))
    CliRunner().invoke(main, ["serve"])
    CliRunner().invoke(main, ["serve", "--port", "8124"])
    (root, from_file), (_, from_flag) = seen
    assert str(root.url).endswith("team-storage") and from_file.port == 8123 and from_flag.port == 8124


def test_the_ui_and_its_code_server_are_pointed_at_the_same_file(tmp_path, monkeypatch):
    monkeypatch.delenv("ORCHRM_CONFIG")  # as a user's shell: the working directory decides
    from orchrm_dagster.app.cli import main

    write(tmp_path, "loop: {rounds: 3}\n")
    monkeypatch.chdir(tmp_path)
    launched = []
    monkeypatch.setattr(os, "execv", lambda program, argv: launched.append((argv, os.environ["ORCHRM_CONFIG"])))
    CliRunner().invoke(main, ["ui", "--port", "3999"])
    (argv, named), = launched
    assert "dev" in argv and named == str(tmp_path / "orchrm.yaml")  # by its full path: any folder finds it


def test_config_show_says_where_each_value_came_from_and_check_names_mistakes(settings_file, tmp_path):
    from orchrm_dagster.app.cli import main

    shown = CliRunner().invoke(main, ["config", "show", "loop"])
    assert shown.exit_code == 0, shown.output
    assert 'loop.round.learning_rate: 0.0005  # orchrm.yaml:6' in shown.output
    assert "loop.round.steps" not in shown.output  # defaults only with --all
    assert "loop.round.steps: " in CliRunner().invoke(main, ["config", "show", "--all", "loop.round"]).output
    assert "valid" in CliRunner().invoke(main, ["config", "check"]).output
    bad = write(tmp_path, "serving: {prot: 1}\n", "bad.yaml")
    checked = CliRunner().invoke(main, ["config", "check", str(bad)])
    assert checked.exit_code == 1 and "bad.yaml:1: serving.prot: unknown key (did you mean port?)" in checked.output


def test_the_references_example_file_is_valid_and_sets_every_default(tmp_path, monkeypatch):
    from orchrm_dagster.app.config_reference import REFERENCE, example_settings

    monkeypatch.delenv("ORCHRM_STORAGE")
    example = example_settings()
    assert example in REFERENCE.read_text()
    path = write(tmp_path, example)
    assert load_settings(path) == OrchrmSettings(storage=load_settings(path).storage)
    assert set(yaml.safe_load(example)) == set(OrchrmSettings.__pydantic_fields__)  # every section


def test_the_files_sub_agents_server_and_policies_become_the_code_locations_resources(tmp_path, monkeypatch):
    """The `agents` environment's sub-agents on an OpenAI-compatible server, and a team's policy, named in the file
    alone: the `llm` and `policy_registry` resources the assets build backends from are the file's."""
    from orchrm_dagster.definitions import build_definitions

    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "orchestrator.txt").write_text("Plan: {question} ({max_agents} agents)\n")
    monkeypatch.setenv("ORCHRM_CONFIG", str(write(tmp_path, """\
        llm:
          backend:
            openai: {base_url: "http://127.0.0.1:9/v1", model: team-model, max_concurrency: 3}
        policies:
          - {name: team-orchestrator, kind: specialized, prompt: prompts/orchestrator.txt}
        """)))
    defs = build_definitions()
    spec = defs.resources["llm"].spec()
    assert (spec.kind, spec.base_url, spec.model, spec.max_concurrency) == ("openai", "http://127.0.0.1:9/v1",
                                                                           "team-model", 3)
    policy = defs.resources["policy_registry"].spec("team-orchestrator")
    assert policy.prompt == str(tmp_path / "prompts" / "orchestrator.txt")
    assert policy.backend_spec(spec).base_url == "http://127.0.0.1:9/v1"  # a policy starts from the sub-agents'
