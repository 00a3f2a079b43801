import sys

import click

from orchrm_dagster.app.cli.common import console, definitions, ingest_callbacks, print_outcomes
from orchrm_dagster.reporting import step_progress


@click.command(name="reingest")
@click.argument("batches", nargs=-1, required=True)
def command(batches: tuple[str, ...]) -> None:
    """Ingest and label BATCHES again: batch ids, or names of landed files (each file's batch, read whole again:
    what a failed file or batch needs once its cause is fixed). The loop's own ingest step, so the loop sees it
    done."""
    from orchrm_dagster.app.commands import ingest_batches, resolve_batches

    defs = definitions()
    root = defs.resources["storage"].storage_root()
    found, unknown = resolve_batches(root, list(batches))
    if unknown:
        raise click.BadParameter(f"no batch and no file in {root.uri('landing')} of that name: {', '.join(unknown)}",
                                 param_hint="BATCHES")
    with step_progress(console, total=len(set(found))) as progress:
        outcomes = ingest_batches(defs, found, **ingest_callbacks(progress))
    print_outcomes(outcomes)
    if not all(o.ok for o in outcomes):
        sys.exit(1)
