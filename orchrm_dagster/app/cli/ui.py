import os
import sys
from pathlib import Path

import click


@click.command(name="ui")
@click.option("--port", default=3000, show_default=True, help="Port the Dagster UI listens on.")
def command(port: int) -> None:
    """Serve the Dagster UI on the same instance the CLI uses."""
    from orchrm_dagster.app.instance import PROJECT_DIR, cli_instance

    cli_instance()  # created here, under its lock: dagster dev's daemon and code server would race on a bare one
    workspace = PROJECT_DIR / "workspace.yaml"
    target = ["-w", str(workspace)] if workspace.exists() else ["-m", "orchrm_dagster.definitions"]
    # the dagster beside this interpreter: `make ui` runs .venv/bin/orchrm without the venv on PATH
    dagster = Path(sys.executable).with_name("dagster")
    os.execv(str(dagster), [str(dagster), "dev", *target, "-p", str(port)])
