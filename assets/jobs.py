import dagster as dg

from assets.partitions import orchestration_partitions, run_batches

# Everything one landed batch needs, in one run per batch: ingestion, labels and their checks.
ingest_run_batch_job = dg.define_asset_job(
    "ingest_run_batch",
    selection=dg.AssetSelection.assets("runs", "subagent_calls", "quarantine", "labels"),
    partitions_def=run_batches,
    description="Ingest and label one landed run batch (a run_batches partition).",
)

# Sample plans from one policy on one benchmark and execute them; the landed batch is then ingested.
orchestrate_job = dg.define_asset_job(
    "orchestrate",
    selection=dg.AssetSelection.assets("orchestration_samples", "execution_artifacts"),
    partitions_def=orchestration_partitions,
    description="Sample orchestration plans for a (benchmark, policy) partition and execute them.",
)
