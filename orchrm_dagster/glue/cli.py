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
    from orchrm_dagster.glue.commands import ingest_files

    with _progress() as progress:
        task = progress.add_task("ingesting", total=len(files))
        outcomes = ingest_files(_definitions(), list(files), on_done=lambda name: progress.advance(task))
    _print_outcomes(outcomes)
    if any(o.status != "SUCCESS" for o in outcomes):
        sys.exit(1)


@main.command()
@click.argument("selection", nargs=-1, required=True)
@click.option("--partition", "partition_key", default=None,
              help="Partition key: a run batch, or benchmark|policy for the orchestration assets (e.g. gsm8k|smollm2-base).")
@click.option("--config", "config_file", default=None, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Run config as YAML or JSON, as the UI's launchpad takes it (ops: {asset: {config: {...}}}).")
def materialize(selection: tuple[str, ...], partition_key: str | None, config_file: Path | None) -> None:
    """Materialize asset keys (e.g. `problems labels`) or a Dagster selection string (e.g. `group:labels`)."""
    from orchrm_dagster.glue.commands import materialize_selection, register_orchestration_partitions

    text = " or ".join(f'key:"{s}"' if _PLAIN_KEY.match(s) else f"({s})" for s in selection)
    defs = _definitions()
    if partition_key and "|" in partition_key:
        register_orchestration_partitions(defs)
    with console.status(f"materializing {text}"):
        result = materialize_selection(defs, text, partition_key, _run_config(config_file))
    console.print(f"run {result.run_id}: {'SUCCESS' if result.success else 'FAILURE'}")
    if not result.success:
        from orchrm_dagster.glue.commands import failure_messages

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


@main.command(name="orchestrate")
@click.option("--benchmark", default="gsm8k", show_default=True, help="A benchmark of the problems table.")
@click.option("--policy", "policy_names", multiple=True, help="Policy name(s); default: every registered policy.")
@click.option("--problems", "problem_limit", default=4, show_default=True, help="The first N problems.")
@click.option("--samples", "n_samples", default=2, show_default=True, help="Plans per problem.")
@click.option("--seed", default=0, show_default=True)
@click.option("--ingest/--no-ingest", default=True, show_default=True, help="Ingest and label the landed runs.")
def orchestrate_command(benchmark, policy_names, problem_limit, n_samples, seed, ingest) -> None:
    """Sample orchestration plans, execute them with sub-agents, land (and ingest) the runs."""
    from orchrm_dagster.glue.commands import ingest_landed
    from orchrm_dagster.glue.main_job import orchestrate_policies

    defs = _definitions()
    sampling = {"n_samples": n_samples, "problem_limit": problem_limit, "seed": seed}
    with _step_status() as show:
        executions = _or_exit(lambda: orchestrate_policies(
            defs, benchmark, list(policy_names), sampling, {},
            on_start=lambda name: show(f"{benchmark} x {name}: sampling {n_samples} plans for {problem_limit} "
                                       f"problems and executing them"),
            on_done=_print_execution))
    if ingest:
        _print_outcomes(ingest_landed(defs, [e.metadata["landed_batch"] for e in executions]))


def _run_config(config_file: Path | None) -> dict | None:
    if config_file is None:
        return None
    import yaml

    try:
        config = yaml.safe_load(config_file.read_text())
    except yaml.YAMLError as err:
        raise click.BadParameter(f"{config_file}: not YAML or JSON: {err}", param_hint="--config") from err
    if not isinstance(config, dict):
        raise click.BadParameter(f"{config_file}: run config must be a mapping (ops: ...)", param_hint="--config")
    return config


@main.command(name="main")
@click.option("--benchmark", default="gsm8k", show_default=True)
@click.option("--problems", "problem_limit", default=4, show_default=True)
@click.option("--samples", "n_samples", default=2, show_default=True)
@click.option("--history-runs", default=1200, show_default=True,
              help="Runs in the generated history batch the first reward model learns from.")
@click.option("--max-train-pairs", default=320, show_default=True)
def main_job(benchmark: str, problem_limit: int, n_samples: int, history_runs: int, max_train_pairs: int) -> None:
    """The main job on the embedded default: problems; real MAS runs from the embedded model for every policy;
    the example batch and a generated history batch; labels; pairs; a reward model; scores of every run."""
    from orchrm_dagster.glue.main_job import MainJobOptions, run_main_job

    options = MainJobOptions(benchmark, problem_limit, n_samples, history_runs, max_train_pairs)
    with _step_status() as show:
        outcomes = _or_exit(lambda: run_main_job(_definitions(), options, on_step=show, on_execution=_print_execution))
    _print_outcomes(outcomes)
    click.get_current_context().invoke(status)
    _print_reward_model_summary()


def _print_reward_model_summary() -> None:
    rows = _storage().warehouse().query(
        "select version, n_train_pairs, n_validation_pairs, round(val_accuracy, 3) val_accuracy, is_champion "
        "from rm_checkpoints order by version").to_pylist()
    _print_rows(["rm version", "train pairs", "validation pairs", "val accuracy", "champion"],
                [list(r.values()) for r in rows])


def _step_status():
    """A spinner whose text each step replaces; yields the function that sets it."""
    import contextlib

    @contextlib.contextmanager
    def shown():
        with console.status("starting") as spinner:
            yield lambda text: spinner.update(text)

    return shown()


def _or_exit(step):
    from orchrm_dagster.glue.main_job import StepFailed

    try:
        return step()
    except StepFailed as err:
        raise click.ClickException(str(err)) from err


def _print_execution(execution) -> None:
    metadata = execution.metadata
    console.print(f"{execution.benchmark} x {execution.policy}: {metadata.get('executed')} runs executed "
                  f"({metadata.get('failed_runs')} failed, {metadata.get('runs_per_minute')} runs/min) "
                  f"-> landed {metadata.get('landed_batch')}")


def _print_outcomes(outcomes) -> None:
    _print_rows(["batch", "runs", "quarantined", "labeled", "correct", "run"],
                [[o.batch_id, o.runs, o.quarantined, o.labeled, o.correct, o.status] for o in outcomes])


@main.command()
@click.option("--port", default=3000, show_default=True)
def ui(port: int) -> None:
    """Serve the Dagster UI on the same instance the CLI uses."""
    from orchrm_dagster.glue.instance import ensure_dagster_home

    ensure_dagster_home()
    workspace = Path(__file__).resolve().parents[2] / "workspace.yaml"
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
