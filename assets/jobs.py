import dagster as dg

from assets.partitions import run_batches

# Everything one landed batch needs, in one run per batch: ingestion, labels and their checks.
ingest_run_batch_job = dg.define_asset_job(
    "ingest_run_batch",
    selection=dg.AssetSelection.assets("runs", "subagent_calls", "quarantine", "labels"),
    partitions_def=run_batches,
    description="Ingest and label one landed run batch (a run_batches partition).",
)
