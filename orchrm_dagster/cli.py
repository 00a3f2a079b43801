"""`orchrm`: what people do without the UI. It runs the same Definitions in-process, on the same
Dagster instance as `dagster dev`, so every run it makes shows up in the UI's history."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console()
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_]+(/[A-Za-z0-9_]+)*$")


def _definitions():
    from orchrm_dagster.definitions import build_definitions

    return build_definitions()  # built now, so --storage / ORCHRM_STORAGE given to this command apply


def _storage():
    return _definitions().resources["storage"]


@click.group()
@click.option("--storage", "storage_url", envvar="ORCHRM_STORAGE", default=None,
              help="Storage root: a folder or s3://bucket/prefix (default: ./storage, or $ORCHRM_STORAGE).")
def main(storage_url: str | None) -> None:
    """orchrm: multi-agent run logs -> labels -> pairs -> orchestration reward model."""
    if storage_url:
        os.environ["ORCHRM_STORAGE"] = storage_url


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def ingest(files: tuple[Path, ...]) -> None:
    """Land FILES (.jsonl / .parquet) and ingest and label each as a run batch."""
    from orchrm_dagster.commands import ingest_files

    with _progress() as progress:
        task = progress.add_task("ingesting", total=len(files))
        outcomes = ingest_files(_definitions(), list(files), on_done=lambda name: progress.advance(task))
    _print_rows(["batch", "runs", "quarantined", "labeled", "correct", "run"],
                [[o.batch_id, o.runs, o.quarantined, o.labeled, o.correct, o.status] for o in outcomes])
    if any(o.status != "SUCCESS" for o in outcomes):
        sys.exit(1)


@main.command()
@click.argument("selection", nargs=-1, required=True)
@click.option("--partition", "partition_key", default=None, help="Partition key (a run batch) for partitioned assets.")
def materialize(selection: tuple[str, ...], partition_key: str | None) -> None:
    """Materialize asset keys (e.g. `problems labels`) or a Dagster selection string (e.g. `group:labels`)."""
    from orchrm_dagster.commands import materialize_selection

    text = " or ".join(f'key:"{s}"' if _PLAIN_KEY.match(s) else f"({s})" for s in selection)
    with console.status(f"materializing {text}"):
        result = materialize_selection(_definitions(), text, partition_key)
    console.print(f"run {result.run_id}: {'SUCCESS' if result.success else 'FAILURE'}")
    if not result.success:
        from orchrm_dagster.commands import failure_messages

        for message in failure_messages(result):
            console.print(f"[red]{message}[/red]")
        sys.exit(1)


@main.command()
@click.argument("statement")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
def query(statement: str, fmt: str) -> None:
    """Run read-only SQL against the warehouse (tables: problems, runs, subagent_calls, labels, quarantine)."""
    import duckdb

    try:
        with _storage().warehouse().connect(read_only=True) as con:
            cursor = con.execute(statement)
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchall()
    except (duckdb.Error, FileNotFoundError) as err:
        raise click.ClickException(str(err)) from err
    if fmt == "json":
        click.echo(json.dumps([dict(zip(columns, r)) for r in rows], default=str, indent=2))
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        _print_rows(columns, rows)


@main.command()
def status() -> None:
    """Batches, runs, quarantined lines and labels, per batch and in total."""
    import sql

    try:
        rows = _storage().warehouse().query(sql.load("batch_status")).to_pylist()
    except FileNotFoundError as err:
        raise click.ClickException(str(err)) from err
    columns = ["batch_id", "runs", "quarantined", "labeled", "correct"]
    totals = ["total"] + [sum(r[c] for r in rows) for c in columns[1:]]
    _print_rows(columns, [[r[c] for c in columns] for r in rows] + [totals])


@main.command(name="main")
def main_job() -> None:
    """The main job on the embedded default: problems, then the example batch ingested and labeled."""
    from orchrm_dagster.commands import EXAMPLE_BATCH, materialize_selection

    with console.status("materializing problems"):
        result = materialize_selection(_definitions(), 'key:"problems"', None)
    if not result.success:
        raise click.ClickException(f"problems failed (run {result.run_id})")
    ctx = click.get_current_context()
    ctx.invoke(ingest, files=(EXAMPLE_BATCH,))
    ctx.invoke(status)


@main.command()
@click.option("--port", default=3000, show_default=True)
def ui(port: int) -> None:
    """Serve the Dagster UI on the same instance the CLI uses."""
    from orchrm_dagster.instance import ensure_dagster_home

    ensure_dagster_home()
    workspace = Path(__file__).resolve().parents[1] / "workspace.yaml"
    target = ["-w", str(workspace)] if workspace.exists() else ["-m", "orchrm_dagster.definitions"]
    os.execvp("dagster", ["dagster", "dev", *target, "-p", str(port)])


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


def _print_rows(columns, rows) -> None:
    table = Table(*columns)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    console.print(table)
