"""`dg` on the project (`[tool.dg]` in pyproject.toml: the code location `orchrm_dagster.definitions`, no `defs`
folder): the real `dg` commands, run as a user runs them from the project folder with the venv active, on the test's
own storage root and Dagster instance (the `isolated_env` fixture's ORCHRM_STORAGE and DAGSTER_HOME)."""

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import dagster as dg
import psutil
import pyarrow.parquet as pq
import pytest

from tests.conftest import free_port, gone, wait_until_serving

REPO = Path(__file__).resolve().parents[1]
DG = Path(sys.executable).with_name("dg")


@pytest.fixture(autouse=True)
def instance(isolated_env):
    """The instance as orchrm makes it (its dagster.yaml: the pools' limits, telemetry off), created before `dg`
    starts: `dg dev`'s daemon and code server would race on creating a bare one's storages."""
    from orchrm_dagster.app.instance import cli_instance

    cli_instance()


def dg_env() -> dict[str, str]:
    """The test's environment with the venv active (`. .venv/bin/activate`), as the guide says to run `dg`."""
    return {**os.environ, "VIRTUAL_ENV": sys.prefix, "PATH": f"{DG.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def run_dg(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    result = subprocess.run([str(DG), *args], cwd=REPO, env=dg_env(), capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"dg {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def test_dg_check_defs_passes():
    result = run_dg("check", "defs")
    assert "All definitions loaded successfully." in result.stdout + result.stderr


def test_dg_list_defs_lists_what_the_definitions_define():
    from orchrm_dagster.definitions import build_definitions

    listed = json.loads(run_dg("list", "defs", "--json").stdout)

    defs = build_definitions()
    repository = defs.get_repository_def()
    assert {dg.AssetKey(a["asset_key_parts"]) for a in listed["assets"]} == set(defs.resolve_all_asset_keys())
    assert {(c["asset_key"], c["name"]) for c in listed["asset_checks"]} == {
        (key.asset_key.to_user_string(), key.name) for key in defs.resolve_asset_graph().asset_check_keys}
    assert {j["name"] for j in listed["jobs"]} == {j.name for j in repository.get_all_jobs()
                                                   if not j.name.startswith("__")}
    assert {s["name"] for s in listed["sensors"]} == {s.name for s in repository.sensor_defs}
    assert {s["name"] for s in listed["schedules"]} == {s.name for s in repository.schedule_defs}
    assert {r["name"] for r in listed["resources"]} >= {"storage", "llm", "policy_registry", "loop", "training",
                                                        "run_defaults"}


@pytest.mark.slow  # 19-25 s on 2 busy cores: the code location's import, then the run
def test_dg_launch_materializes_problems_into_the_storage_root(storage_root):
    run_dg("launch", "--assets", "problems")

    with dg.DagsterInstance.get() as instance:  # the test's DAGSTER_HOME: dg ran on it, not on a temporary one
        runs = instance.get_runs()
        assert [(r.status, r.asset_selection) for r in runs] == [
            (dg.DagsterRunStatus.SUCCESS, {dg.AssetKey("problems")})]
        materialized = instance.get_latest_materialization_event(dg.AssetKey("problems")).asset_materialization
    table = pq.read_table(storage_root.table_file("problems"))
    assert table.num_rows == materialized.metadata["dagster/row_count"].value > 0
    assert {"problem_id", "benchmark", "answer_type"} <= set(table.column_names)
    assert set(table.column("benchmark").to_pylist()) >= {"gsm8k", "hotpotqa"}



def graphql(url: str, query: str) -> dict:
    request = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["data"]


def session_processes(sid: int) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == sid and not gone(process):
                found.append(process)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return found



@pytest.mark.slow  # about 35 s: the webserver, the daemon and the code server start, then stop
def test_dg_dev_serves_the_code_location_and_stops_with_all_its_processes(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "dg_dev.log", "w") as log:
        # Ctrl-C's SIGINT stops it; a shell's background job would inherit SIGINT ignored, so reset it
        server = subprocess.Popen([str(DG), "dev", "--host", "127.0.0.1", "--port", str(port)], cwd=REPO,
                                  env=dg_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_until_serving(url + "/server_info", server, "dg dev")
        with urllib.request.urlopen(f"{url}/server_info", timeout=10) as response:
            assert json.loads(response.read())["dagster_version"] == dg.__version__
        entries = graphql(url, """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
            locationOrLoadError { __typename ... on RepositoryLocation { repositories { assetNodes {
            assetKey { path } } } } ... on PythonError { message } } } } } }""")["workspaceOrError"]["locationEntries"]
        assert [(e["name"], e["loadStatus"]) for e in entries] == [("orchrm", "LOADED")], entries
        location = entries[0]["locationOrLoadError"]
        assert location["__typename"] == "RepositoryLocation", location
        keys = {tuple(n["assetKey"]["path"]) for r in location["repositories"] for n in r["assetNodes"]}
        assert {("problems",), ("rm_scores",), ("reward_model",)} <= keys
        started = session_processes(server.pid)  # dg, the webserver, the daemon, the code server and its child
        assert len(started) >= 4, [p.cmdline()[:3] for p in started]

        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=60) == 0, (tmp_path / "dg_dev.log").read_text()[-3000:]
        _, alive = psutil.wait_procs(started, timeout=30)
        assert not [p for p in alive if not gone(p)]
        assert session_processes(server.pid) == []
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
        for process in session_processes(server.pid):
            process.kill()
