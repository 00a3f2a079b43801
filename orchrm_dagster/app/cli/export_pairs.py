import click

from orchrm_dagster.app.cli.common import storage


@click.command(name="export-pairs")
@click.argument("path")
@click.option("--format", "fmt", default=None, metavar="jsonl|parquet", help="Default: from PATH's suffix.")
@click.option("--source", "sources", multiple=True, help="Only pairs of this source (repeatable), e.g. "
              "correct_over_incorrect: the pairs a from-scratch GRPO recipe's reward model trains on.")
@click.option("--split", "splits", multiple=True, metavar="train|validation", help="Only this split (repeatable).")
def command(path: str, fmt: str | None, sources: tuple[str, ...], splits: tuple[str, ...]) -> None:
    """Write the pairs reward-model training reads (built and imported) to PATH, a local file or s3:// URL, in the
    published OrchRM format (input, chosen, rejected, source), JSONL or Parquet; `import_files` reads it back."""
    from orchrm_dagster.pairs import export_pairs

    try:
        count = export_pairs(storage().storage_root(), path, fmt, sources, splits)
    except (ValueError, OSError) as err:
        raise click.ClickException(str(err)) from err
    click.echo(f"{count} pairs -> {path}")
