import dagster as dg

from orchrm_dagster.glue.run_configs import IngestConfig
from orchrm_dagster.glue.partitions import WAREHOUSE_POOL, run_batches
from orchrm_dagster.glue.deployment import CPU_STEP
from orchrm_dagster.glue.resources import StorageResource
from orchrm_dagster.ingest import ingest_batch
from orchrm_dagster.reporting import markdown_table

# A run batch is a file in the landing zone: the MAS runner's executions land there (so `runs` follows
# `execution_artifacts` in the lineage: every batch may hold any partition's runs), and so do batches from outside.
_FROM_EXECUTIONS = dg.AssetDep("execution_artifacts", partition_mapping=dg.AllPartitionMapping())
_SPECS = [
    dg.AssetSpec("runs", group_name="ingestion", kinds={"parquet", "duckdb"}, deps=[_FROM_EXECUTIONS],
                 description="One row per valid orchestration run (artifact contract v1, flattened)."),
    dg.AssetSpec("subagent_calls", group_name="ingestion", kinds={"parquet", "duckdb"}, deps=[_FROM_EXECUTIONS],
                 description="Every sub-agent call of every run, keyed by run_id."),
    dg.AssetSpec("quarantine", group_name="ingestion", kinds={"parquet", "duckdb"}, deps=[_FROM_EXECUTIONS],
                 description="Lines that did not land, with file, line, field, kind and a reason a person can act on."),
]


@dg.multi_asset(specs=_SPECS, partitions_def=run_batches, pool=WAREHOUSE_POOL, op_tags=CPU_STEP)
def run_batch_ingestion(context: dg.AssetExecutionContext, config: IngestConfig, storage: StorageResource):
    """Validate a landed batch line by line: good records land in `runs`, bad ones in `quarantine`."""
    root = storage.storage_root()
    landed = root.find_landed(context.partition_key)
    report = ingest_batch(root, landed.batch_id, landed.path, config.to_engine(), source_fingerprint=landed.fingerprint)
    storage.warehouse().refresh_views(("runs", "subagent_calls", "quarantine"))
    context.log.info(
        f"{landed.name}: {report.lines_read} lines, {report.runs_written} runs, {report.quarantined} quarantined "
        f"({report.runs_per_second:,.0f} lines/s)"
    )
    reasons = markdown_table(["kind", "lines"], report.reasons.most_common()) if report.reasons else "none"
    yield dg.MaterializeResult(asset_key="runs", metadata={
        "dagster/row_count": report.runs_written,
        "source_file": root.uri("landing", landed.name),
        "source_fingerprint": landed.fingerprint,
        "lines_read": report.lines_read,
        "lines_per_second": round(report.runs_per_second, 1),
    })
    yield dg.MaterializeResult(asset_key="subagent_calls", metadata={"dagster/row_count": report.subagent_calls_written})
    yield dg.MaterializeResult(asset_key="quarantine", metadata={
        "dagster/row_count": report.quarantined,
        "quarantine_rate": round(report.quarantine_rate, 4),
        "reasons": dg.MetadataValue.md(reasons),
        "inspect": dg.MetadataValue.md(
            f"`orchrm query \"select line_number, kind, field, reason from quarantine "
            f"where batch_id = '{landed.batch_id}' order by line_number\"`"),
    })
