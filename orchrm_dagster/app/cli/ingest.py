import sys
from pathlib import Path

import click

from orchrm_dagster.app.cli.common import console, definitions, ingest_callbacks, print_outcomes
from orchrm_dagster.reporting import step_progress


@click.command(name="ingest")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def command(files: tuple[Path, ...]) -> None:
    """Land FILES (.jsonl / .parquet) and ingest and label each as a run batch."""
    from orchrm_dagster.app.commands import ingest_files

    with step_progress(console, total=len(files)) as progress:
        outcomes = ingest_files(definitions(), list(files), **ingest_callbacks(progress))
    print_outcomes(outcomes)
    if not all(o.ok for o in outcomes):
        sys.exit(1)
