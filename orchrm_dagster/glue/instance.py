"""The Dagster instance the CLI and `dagster dev` share, so CLI runs show up in the UI's history; and the reaper
that gives back pool slots a killed run still holds."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import dagster as dg
import psutil
import sqlalchemy.exc
from filelock import FileLock

from orchrm_dagster.glue.partitions import POOLS

from orchrm_dagster.storage import default_storage_url, root_cache_dir

OWNED_MARK = "# Written by orchrm."
PROJECT_DIR = Path(__file__).resolve().parents[2]  # where workspace.yaml and pyproject.toml's [tool.dg] are
DOTENV_MARK = "# written by orchrm: the instance orchrm uses for ./storage"
_UNQUOTABLE_IN_DOTENV = '"\\$}\n'
_INSTANCE_LOCK_WAIT_S = 300.0
_DAGSTER_YAML = f"""\
{OWNED_MARK} One writer at a time for steps in the 'warehouse' pool, one model at a time in the 'gpu' pool.
concurrency:
  pools:
    default_limit: 1
run_monitoring:
  enabled: true  # a run whose worker died is marked failed (and the reaper frees its pool slots)
nux:
  enabled: false  # no newsletter dialog on a fresh instance
telemetry:
  enabled: false
"""
PID_TAG, HOST_TAG = "orchrm/pid", "orchrm/host"


def default_dagster_home() -> Path:
    """Beside the data it describes: <root>/dagster_home for a local root (so one root has one instance wherever
    the command runs from), a per-root folder in the machine's cache (ORCHRM_CACHE) for an object-store root."""
    root = default_storage_url()
    if "://" not in root:
        return Path(root).expanduser().resolve() / "dagster_home"
    return root_cache_dir(root, "dagster_home")


def ensure_dagster_home() -> Path:
    chosen_by_default = not os.environ.get("DAGSTER_HOME") and not os.environ.get("ORCHRM_STORAGE")
    home = Path(os.environ.get("DAGSTER_HOME") or default_dagster_home()).expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    with _instance_lock(home):
        config = home / "dagster.yaml"
        if not config.exists() or (config.read_text().startswith(OWNED_MARK) and config.read_text() != _DAGSTER_YAML):
            config.write_text(_DAGSTER_YAML)
        if chosen_by_default and Path.cwd().resolve() == PROJECT_DIR:
            write_dotenv(PROJECT_DIR, home)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def write_dotenv(folder: Path, home: Path) -> bool:
    """Points Dagster's own CLIs run from `folder` at `home`. `dagster dev`, `dagster asset materialize` and `dg
    launch` read `.env` from the folder they run in, and without DAGSTER_HOME they run on a temporary instance whose
    runs no UI ever shows. The line defers to a DAGSTER_HOME set in the environment, as orchrm does. A `.env` that
    sets DAGSTER_HOME itself is left alone. Returns whether the file now holds orchrm's line."""
    if any(c in str(home) for c in _UNQUOTABLE_IN_DOTENV):
        return False
    dotenv = folder / ".env"
    before = dotenv.read_text() if dotenv.exists() else ""
    lines = before.splitlines(keepends=True)
    if any(DOTENV_MARK not in line and line.lstrip().startswith("DAGSTER_HOME") for line in lines):
        return False
    kept = "".join(line for line in lines if DOTENV_MARK not in line)
    after = (kept if not kept or kept.endswith("\n") else kept + "\n") + \
        f'DAGSTER_HOME="${{DAGSTER_HOME:-{home}}}"  {DOTENV_MARK}\n'
    if after != before:
        dotenv.write_text(after)
    return True


def _instance_lock(home: Path) -> FileLock:
    return FileLock(str(home / ".orchrm-instance.lock"), timeout=_INSTANCE_LOCK_WAIT_S)


def cli_instance() -> dg.DagsterInstance:
    """The shared instance, created once: on a fresh DAGSTER_HOME, commands started together would each create the
    SQLite storages and race on their schema (alembic's version table gets two heads; 6 of 16 processes failed in
    a probe), so creating it (its storages are built, schemas included, as it is) happens under a lock beside it."""
    home = ensure_dagster_home()
    with _instance_lock(home):
        instance = dg.DagsterInstance.get()
        ensure_pool_limits(instance)
    fail_runs_whose_worker_died(instance)
    free_slots_of_dead_runs(instance)
    return instance


def process_tags() -> dict[str, str]:
    """Tags of a run executed in this process, so a later process can tell whether its owner is still alive."""
    return {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}


def ensure_pool_limits(instance: dg.DagsterInstance, pools: tuple[str, ...] = POOLS, attempts: int = 5) -> None:
    """Creates each pool's limit row (the instance's default limit) before any run claims a slot. Dagster creates it
    on a step's first claim, and on PostgreSQL two runs doing that at once fail one of them with
    InFailedSqlTransaction (dagster-io/dagster#33552, open). Here a lost race is caught and the rows looked up again."""
    storage = instance.event_log_storage
    default = instance.global_op_concurrency_default_limit
    if not storage.supports_global_concurrency_limits or default is None:
        return
    for _ in range(attempts):
        limits = {pool.name: pool for pool in storage.get_pool_limits()}
        stale = [p for p in pools if p not in limits or (limits[p].from_default and limits[p].limit != default)]
        if not stale:
            return
        for pool in stale:
            try:
                storage.initialize_concurrency_limit_to_default(pool)
            except sqlalchemy.exc.DBAPIError:  # another process created the row meanwhile
                time.sleep(0.05)


def free_slots_of_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Frees the pool slots of every run that can no longer release them: finished runs (a run marked failed after
    its worker was killed keeps its slots otherwise), and runs of this host whose process is gone (a kill -9 or an
    OOM kill of an in-process CLI run), which are marked failed first. Returns the runs freed."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    freed = []
    for run_id in storage.get_concurrency_run_ids():
        run = instance.get_run_by_id(run_id)
        if run is not None and not run.is_finished:
            if not _owner_is_dead(run.tags):
                continue
            instance.report_run_failed(run, f"its process {run.tags[PID_TAG]} is gone (killed): its pool slots "
                                            "are freed")
        storage.free_concurrency_slots_for_run(run_id)
        freed.append(run_id)
    return freed


def fail_runs_whose_worker_died(instance: dg.DagsterInstance) -> list[str]:
    """Marks failed the started runs of this host whose run worker is gone. The code server that launched a run
    marks it failed when its worker dies, but when the daemon is killed its code server goes too, and a worker that
    died with them would leave its run STARTED for ever (and the loop waiting on it). The worker's pid is in the
    run's "Started process for run" event; a run of another host is not ours to judge."""
    from orchrm_dagster.glue.deployment import profile

    if profile() != "local":
        return []
    failed = []
    started = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]), limit=500)
    for run in started:
        if run.tags.get(HOST_TAG, socket.gethostname()) != socket.gethostname():
            continue
        pid = _worker_pid(instance, run.run_id)
        if pid is None or pid == os.getpid() or psutil.pid_exists(pid):
            continue
        instance.report_run_failed(run, f"its run worker (pid {pid}) is gone: it was killed, or died with the "
                                        "daemon and its code server")
        failed.append(run.run_id)
    return failed


def _worker_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=50).records
    for record in records:
        event = record.event_log_entry.dagster_event
        metadata = getattr(event.event_specific_data, "metadata", None) or {}
        if "pid" in metadata and (record.event_log_entry.message or "").startswith("Started process for run"):
            return int(metadata["pid"].value)
    return None


def _owner_is_dead(tags: dict) -> bool:
    if PID_TAG not in tags or tags.get(HOST_TAG) != socket.gethostname():
        return False  # not ours to judge: run monitoring marks a launched run's dead worker failed
    pid = int(tags[PID_TAG])
    return pid != os.getpid() and not psutil.pid_exists(pid)
