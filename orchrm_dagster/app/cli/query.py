import json
import sys

import click

from orchrm_dagster.app.cli.common import print_rows, storage


@click.command(name="query")
@click.argument("statement")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def command(statement: str, fmt: str) -> None:
    """Run one read-only statement (SELECT or EXPLAIN) against the warehouse: tables problems, runs, subagent_calls,
    labels, quarantine, pairs, rm_checkpoints, rm_scores, evaluation, grpo_rounds, ... It cannot write, attach,
    install or load extensions, copy to files, change settings, or read files outside the storage root."""
    import duckdb

    from orchrm_dagster.storage import NotAReadStatement, check_read_only

    try:
        check_read_only(statement)
        with storage().warehouse().connect_sandboxed() as con:
            cursor = con.execute(statement)
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchall()
    except (duckdb.Error, FileNotFoundError, NotAReadStatement) as err:
        raise click.ClickException(str(err)) from err
    if fmt == "json":
        click.echo(json.dumps([dict(zip(columns, r)) for r in rows], default=str, indent=2))
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")  # LF, as DuckDB's own CLI writes (csv's default: CRLF)
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        print_rows(columns, rows, rounded=False)  # a user's query shows its values as they are
