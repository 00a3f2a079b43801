import dagster as dg

from assets.deployment import WAREHOUSE_STEP
from assets.partitions import run_batches
from assets.resources import RunDefaultsResource, StorageResource
from assets.run_configs import IngestConfig, run_settings
from orchrm_dagster.ingest import ingest_files
from orchrm_dagster.reporting import markdown_table
from orchrm_dagster.storage import batch_members

# A run batch is landed files ingested together (one file, or what the loop cut together): the MAS runner's
# executions land there (so `runs` follows `execution_artifacts` in the lineage: every batch may hold any
# partition's runs), and so do batches from outside.
_FROM_EXECUTIONS = dg.AssetDep("execution_artifacts", partition_mapping=dg.AllPartitionMapping())
_SPECS = [
    dg.AssetSpec("runs", group_name="ingestion", kinds={"parquet", "duckdb"}, deps=[_FROM_EXECUTIONS],
                 description="One row per valid orchestration run (artifact contract v1, flattened)."),
    dg.AssetSpec("subagent_calls", group_name="ingestion", kinds={"parquet", "duckdb"}, deps=[_FROM_EXECUTIONS],
                 description="Every sub-agent call of every run, keyed by run_id."),
    dg.AssetSpec("quarantine", group_name="ingestion", kinds={"parquet", "duckdb"}, deps=[_FROM_EXECUTIONS],
                 description="Lines that did not land, with file, line, field, kind and a reason a person can act on."),
]
_SHOWN_FILES = 50  # files listed in a run's metadata (a batch may hold a thousand)


@dg.multi_asset(specs=_SPECS, partitions_def=run_batches, **WAREHOUSE_STEP)
def run_batch_ingestion(context: dg.AssetExecutionContext, config: IngestConfig, storage: StorageResource,
                        run_defaults: RunDefaultsResource):
    """Validate a batch's landed files line by line: good records land in `runs`, bad ones in `quarantine`; a file
    that cannot be read fails alone."""
    root = storage.storage_root()
    files = batch_members(root, context.partition_key)
    report = ingest_files(root, context.partition_key, files,
                          run_settings(context, config, run_defaults.to_engine().ingest))
    storage.warehouse().refresh_views(("runs", "subagent_calls", "quarantine"))
    context.log.info(
        f"{report.source_file}: {report.lines_read} lines, {report.runs_written} runs, {report.quarantined} "
        f"quarantined ({report.runs_per_second:,.0f} lines/s)"
        + "".join(f"; {name} FAILED: {cause}" for name, cause in report.failed_files.items()))
    reasons = markdown_table(["kind", "lines"], report.reasons.most_common()) if report.reasons else "none"
    shown = sorted(report.files, key=lambda f: (f.failed is None, -f.quarantined, f.name))[:_SHOWN_FILES]
    yield dg.MaterializeResult(asset_key="runs", metadata={
        "dagster/row_count": report.runs_written,
        "source_file": root.uri("landing", files[0].name) if len(files) == 1 else f"{len(files)} files",
        "source_fingerprint": (files[0].fingerprint or "") if len(files) == 1 else "",
        "files": len(files),
        "failed_files": len(report.failed_files),
        "lines_read": report.lines_read,
        "lines_per_second": round(report.runs_per_second, 1),
        "by_file": dg.MetadataValue.md(markdown_table(
            ["file", "lines", "runs", "quarantined", "failed"],
            [(f.name, f.lines_read, f.runs, f.quarantined, f.failed or "") for f in shown])),
    })
    yield dg.MaterializeResult(asset_key="subagent_calls", metadata={"dagster/row_count": report.subagent_calls_written})
    yield dg.MaterializeResult(asset_key="quarantine", metadata={
        "dagster/row_count": report.quarantined,
        "quarantine_rate": round(report.quarantine_rate, 4),
        "reasons": dg.MetadataValue.md(reasons),
        "inspect": dg.MetadataValue.md(
            f"`orchrm query \"select source_file, line_number, kind, field, reason from quarantine "
            f"where batch_id = '{context.partition_key}' order by source_file, line_number\"`"),
    })
