"""The Dagster instance the CLI and `dagster dev` share, so CLI runs show up in the UI's history; the reaper that
gives back pool slots a killed run still holds (assets/runs.py, which the loop's sensor runs too) runs on it."""

from __future__ import annotations

import dagster as dg

from assets.instance_settings import settings_problem
from assets.runs import ensure_pool_limits, fail_runs_whose_worker_died, free_slots_of_dead_runs
from orchrm_dagster.app.dagster_home import (  # noqa: F401 (where the CLI's commands and tests look for them)
    PROJECT_DIR, _instance_lock, default_dagster_home, ensure_dagster_home, write_dotenv)


def cli_instance() -> dg.DagsterInstance:
    """The shared instance, created once: on a fresh DAGSTER_HOME, commands started together would each create the
    SQLite storages and race on their schema (alembic's version table gets two heads; 6 of 16 processes failed in
    a probe), so creating it (its storages are built, schemas included, as it is) happens under a lock beside it."""
    home = ensure_dagster_home()
    with _instance_lock(home):
        instance = dg.DagsterInstance.get()
        ensure_pool_limits(instance)
    if settings_problem(instance) is None:  # an instance whose settings the loop refuses is not reaped either
        fail_runs_whose_worker_died(instance)
        free_slots_of_dead_runs(instance)
    return instance
