import sys
from pathlib import Path

import click

from orchrm_dagster.app.cli.common import console, definitions, ingest_callbacks, print_outcomes, print_rows
from orchrm_dagster.app.cli.options import apply_options, config_options
from orchrm_dagster.ingest import IngestSettings
from orchrm_dagster.reporting import step_progress
from orchrm_dagster.traces import TRACE_FORMATS, TraceSettings

# every field of the mapping is a flag (--problem-id-attribute, --default-benchmark, --orchestrator-agent, ...); the
# way back (export_scores) is `orchrm export-scores`'s
MAPPING_FLAGS = tuple(f"traces.{name}" for name in TraceSettings.__pydantic_fields__ if name != "export_scores")
_SHOWN_REJECTIONS = 20


@click.command(name="import-traces")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(TRACE_FORMATS), default=None,
              help="The files' format: otel (OTLP JSON, as an OpenTelemetry Collector's file exporter writes it), "
                   "langfuse or langsmith (their trace exports). Default: each file's suffix says it (x.otlp.json, "
                   "x.langfuse.json, x.langsmith.json, or .jsonl).")
@config_options(IngestSettings, *MAPPING_FLAGS)
@click.pass_context
def command(ctx: click.Context, files: tuple[Path, ...], fmt: str | None, **_) -> None:
    """Import traces (OpenTelemetry GenAI spans, Langfuse or LangSmith exports) as runs: land each file as a trace
    file and ingest and label it as a run batch. Each trace becomes a run record, or is quarantined with the reason
    the mapping could not place it (the files' other traces are kept). The mapping's settings are the settings
    file's ingest.traces, and these flags."""
    from orchrm_dagster.app.commands import ingest_landed
    from orchrm_dagster.settings import load_settings
    from orchrm_dagster.storage import land
    from orchrm_dagster.traces import landing_name, trace_format

    if not files:
        raise click.UsageError("give one trace file at least")
    formats = [fmt or trace_format(path.name) for path in files]
    unknown = [path.name for path, found in zip(files, formats) if found is None]
    if unknown:
        raise click.UsageError(f"{', '.join(unknown)}: say its format with --format {'|'.join(TRACE_FORMATS)} (or "
                               "name it x.otlp.json, x.langfuse.json or x.langsmith.json)")
    from_file = load_settings().ingest
    settings = apply_options(from_file, ctx)
    defs = definitions()
    root = defs.resources["storage"].storage_root()
    landed = [land(root, path, landing_name(path.name, found)).name for path, found in zip(files, formats)]
    with step_progress(console, total=len(files)) as progress:
        outcomes = ingest_landed(defs, landed, **ingest_callbacks(progress),
                                 run_config=None if settings == from_file else _run_config(settings))
    print_outcomes(outcomes)
    _print_rejected(defs, [o.batch_id for o in outcomes])
    if not all(o.ok for o in outcomes):
        sys.exit(1)


def _run_config(settings: IngestSettings):
    """The ingest step's run config holding `settings` (the file's, with the flags given)."""
    import dagster as dg

    from assets.config_bridge import from_engine
    from assets.run_configs import IngestConfig

    return dg.RunConfig(ops={"run_batch_ingestion": from_engine(IngestConfig, settings)})


def _print_rejected(defs, batch_ids: list[str]) -> None:
    warehouse = defs.resources["storage"].warehouse()
    if not warehouse.exists():
        return
    rows = warehouse.query(
        "select source_file, line_number, run_id, reason from quarantine where list_contains($ids, batch_id) "
        "order by source_file, line_number", {"ids": batch_ids}).to_pylist()
    if rows:
        print_rows(["file", "trace", "trace id", "why"],
                   [[r["source_file"], r["line_number"], r["run_id"], r["reason"]] for r in rows[:_SHOWN_REJECTIONS]],
                   caption=f"{len(rows)} trace(s) or line(s) quarantined"
                           + (f", the first {_SHOWN_REJECTIONS} shown" if len(rows) > _SHOWN_REJECTIONS else "")
                           + " (trace: its position in the file); all of them: orchrm query \"select * from "
                             "quarantine where kind = 'unplaceable_trace'\"")
