"""The Dagster instance the CLI and `dagster dev` share, so CLI runs show up in the UI's history."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

_DAGSTER_YAML = """\
# Written by orchrm. One writer at a time for steps in the 'warehouse' pool.
concurrency:
  pools:
    default_limit: 1
telemetry:
  enabled: false
"""


def ensure_dagster_home() -> Path:
    home = Path(os.environ.get("DAGSTER_HOME") or "storage/dagster_home").expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(_DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def cli_instance() -> dg.DagsterInstance:
    ensure_dagster_home()
    return dg.DagsterInstance.get()
