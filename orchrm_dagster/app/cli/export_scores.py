import click

from orchrm_dagster.app.cli.common import console, print_rows, storage
from orchrm_dagster.app.cli.options import apply_options, config_options
from orchrm_dagster.ingest import IngestSettings

EXPORT = "traces.export_scores"
# every field of the way back but after_scoring (the scoring step's, set in the settings file) is a flag
EXPORT_FLAGS = tuple(f"{EXPORT}.{name}" for name in ("tools", "out_dir", "langfuse_host", "langsmith_endpoint",
                                                     "otlp_endpoint", "label_name", "score_name", "batch_size",
                                                     "timeout_s"))


@click.command(name="export-scores")
@config_options(IngestSettings, *EXPORT_FLAGS, flags={f"{EXPORT}.tools": "--tool", f"{EXPORT}.out_dir": "--out"},
                defaults_from="the settings file")
@click.pass_context
def command(ctx: click.Context, **_) -> None:
    """Send imported traces' labels and champion scores back to their tools: each run's to the tool its trace came
    from. Langfuse: scores on the trace (POST /api/public/scores); LangSmith: feedback on the root run (POST
    /api/v1/feedback); OpenTelemetry: an OTLP span with the scores on the orchestrator's span (POST /v1/traces). A
    tool is pushed to where its URL and key are set (LANGFUSE_HOST, LANGFUSE_PUBLIC_KEY, LANGFUSE_SECRET_KEY;
    LANGSMITH_ENDPOINT, LANGSMITH_API_KEY; OTEL_EXPORTER_OTLP_ENDPOINT), else its request bodies are written as files
    (--out, default exports/scores under the storage root). Only what is new or changed since the last export is
    sent (the score_exports table)."""
    from orchrm_dagster.rm import current_champions, domain_of
    from orchrm_dagster.settings import load_settings
    from orchrm_dagster.traces import ScoreExportFailed, export_scores

    settings = apply_options(load_settings().ingest, ctx).traces.export_scores
    store = storage()
    root = store.storage_root()
    parts = []
    try:
        report = export_scores(root, settings, champions=current_champions(root), domain_of=domain_of,
                               on_tool=parts.append)
    except ScoreExportFailed as err:
        raise click.ClickException(f"{err} (what was sent before it is recorded in score_exports: export-scores "
                                   "again sends the rest)") from err
    finally:
        store.warehouse().refresh_views(("score_exports",))  # `orchrm query "select * from score_exports"`
        _print_parts(parts)
    console.print(f"{report.imported} imported run(s) with a label or a champion's score"
                  + (f", {report.without_score} without a champion's score (no champion of their domain, or not "
                     "scored since it was crowned)" if report.without_score else ""), soft_wrap=True)


def _print_parts(parts) -> None:
    if not parts:
        return
    print_rows(["tool", "sent", "unchanged", "requests", "to"],
               [[p.tool, p.runs, p.unchanged, p.requests if p.pushed else "-",
                 p.destination if p.pushed else ", ".join(p.files) or p.destination] for p in parts],
               caption="; ".join(f"{p.tool}: files, as {p.why_files}" for p in parts if not p.pushed and p.runs)
                       or None)
