"""The Dagster instance on a real PostgreSQL (Debian's server on loopback, `make postgres` installs it): two runs at
once plus the landing-zone sensor, then the runs, the event log and the warehouse."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from orchrm_dagster.synthetic import generate_runs, write_jsonl
from tests.conftest import free_port

pytestmark = pytest.mark.slow


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(candidates[-1]).parent if candidates else None



@pytest.fixture
def postgres():
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server here: `make postgres` installs Debian's")
    as_user = []
    folder = Path(tempfile.mkdtemp(prefix="orchrm-pg-"))
    if os.geteuid() == 0:  # the server refuses to run as root
        user = pwd.getpwnam("postgres")
        os.chmod(folder, 0o755)
        os.chown(folder, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    data = folder / "data"
    subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "orchrm"],
                   check=True, capture_output=True)
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1"
    subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"),
                    "-w", "start"], check=True, capture_output=True)
    try:
        subprocess.run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "orchrm", "dagster"],
                       check=True, capture_output=True)
        yield port
    finally:
        subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def storage_on(port: int) -> str:
    """The dagster.yaml lines that put an instance's storage on the test's server."""
    return f"""\
storage:
  postgres:
    postgres_db: {{hostname: 127.0.0.1, port: {port}, username: orchrm, password: "", db_name: dagster,
                  scheme: postgresql+psycopg2}}
"""


def test_two_runs_at_once_and_the_sensor_on_a_postgres_instance(postgres, tmp_path, monkeypatch):
    import dagster as dg

    home = tmp_path / "dagster_home_pg"
    home.mkdir()
    (home / "dagster.yaml").write_text(storage_on(postgres) + """\
concurrency:
  pools:
    default_limit: 1
run_monitoring:
  enabled: true
telemetry:
  enabled: false
""")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get():  # creates the schema once, as a deployment's `dagster instance migrate` does
        pass
    files = []
    for name, seed in (("one.jsonl", 1), ("two.jsonl", 2), ("three.jsonl", 3)):
        write_jsonl(generate_runs(600, seed=seed), tmp_path / name)
        files.append(tmp_path / name)
    command = [sys.executable, "-m", "orchrm_dagster.app.cli", "ingest"]
    both = [subprocess.Popen([*command, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=os.environ.copy())
            for path in files[:2]]
    outputs = [process.communicate(timeout=600) for process in both]
    assert [p.returncode for p in both] == [0, 0], "\n".join(out + err for out, err in outputs)

    from assets.sensors import loop_sensor
    from orchrm_dagster.definitions import build_definitions
    from orchrm_dagster.app.commands import ingest_landed
    from orchrm_dagster.storage import land

    defs = build_definitions()
    root = defs.resources["storage"].storage_root()
    land(root, files[2])
    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        context = dg.build_sensor_context(instance=instance, resources={"storage": defs.resources["storage"],
                                                                        "loop": defs.resources["loop"]})
        result = loop_sensor(context)
        # the other two are ingested: the third is, and the pairs are rebuilt from them meanwhile (the learning lane
        # asks each step as it falls due)
        assert [(r.job_name, r.partition_key) for r in result.run_requests] == [
            ("ingest_run_batch", "three.jsonl"), ("rebuild_pairs", None)]
        [outcome] = ingest_landed(defs, ["three.jsonl"])
        assert outcome.status == "SUCCESS" and outcome.runs == 600
        runs = instance.get_runs(dg.RunsFilter(job_name="ingest_run_batch"))
        assert len(runs) == 3 and {r.status for r in runs} == {dg.DagsterRunStatus.SUCCESS}
        events = instance.fetch_materializations(dg.AssetKey("runs"), limit=10).records
        assert {e.partition_key for e in events} == {"one.jsonl", "two.jsonl", "three.jsonl"}
    counts = defs.resources["storage"].warehouse().query(
        "select (select count(*) from runs) runs, (select count(*) from labels) labels").to_pylist()
    assert counts == [{"runs": 1800, "labels": 1800}]


def test_on_a_shared_instance_the_reaper_judges_only_the_runs_provably_of_its_own_host(postgres, tmp_path):
    """Runs on a Postgres instance may be any host's: one without a host tag (launched from the UI of another
    machine, say) is left alone even when no process here has its worker's pid; one tagged with this host whose worker
    is gone is failed, and so is a killed command's run of this host."""
    import socket

    import dagster as dg
    from dagster._core.events import EngineEventData

    from assets.runs import HOST_TAG, PID_TAG, fail_runs_whose_worker_died

    home = tmp_path / "shared"
    home.mkdir()
    (home / "dagster.yaml").write_text(storage_on(postgres) + "run_monitoring:\n  enabled: true\n")

    @dg.op
    def step():
        pass

    job = dg.GraphDefinition("g", node_defs=[step]).to_job()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        runs = {}
        for name, tags in (("untagged", {}), ("elsewhere", {HOST_TAG: "another-host"}),
                           ("mine", {HOST_TAG: socket.gethostname()}),
                           ("my command", {HOST_TAG: socket.gethostname(), PID_TAG: str(gone.pid)})):
            run = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED, tags=tags)
            if PID_TAG not in tags:
                instance.report_engine_event(f"Started process for run (pid: {gone.pid}).", run,
                                             EngineEventData.in_process(gone.pid))
            runs[name] = run
        failed = set(fail_runs_whose_worker_died(instance))
        assert failed == {runs["mine"].run_id, runs["my command"].run_id}
        for name in ("untagged", "elsewhere"):
            assert instance.get_run_by_id(runs[name].run_id).status == dg.DagsterRunStatus.STARTED
