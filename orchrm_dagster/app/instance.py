"""The Dagster instance the CLI and `dagster dev` share, so CLI runs show up in the UI's history; the reaper that
gives back pool slots a killed run still holds (assets/runs.py, which the loop's sensor runs too) runs on it."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from filelock import FileLock

from assets.runs import ensure_pool_limits, fail_runs_whose_worker_died, free_slots_of_dead_runs
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
