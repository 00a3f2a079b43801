"""DAGSTER_HOME as orchrm sets it up: where it is by default, its dagster.yaml (assets/instance_settings.py), and the
`.env` that points Dagster's own CLIs at it. No Dagster import: `orchrm status` on a new root sets it up too."""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock

from assets.instance_settings import write_instance_settings
from orchrm_dagster.storage import default_storage_url, root_cache_dir

PROJECT_DIR = Path(__file__).resolve().parents[2]  # where workspace.yaml and pyproject.toml's [tool.dg] are
DOTENV_MARK = "# written by orchrm: the instance orchrm uses for ./storage"
_UNQUOTABLE_IN_DOTENV = '"\\$}\n'
_INSTANCE_LOCK_WAIT_S = 300.0


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
        write_instance_settings(home)
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
