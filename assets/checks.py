import warnings

import dagster as dg

import sql
from assets.configs import QuarantineCheckConfig
from assets.partitions import run_batches
from orchrm_dagster.reporting import markdown_table
from orchrm_dagster.resources import StorageResource


@dg.asset_check(asset="runs", description="No run_id appears twice across all batches.")
def run_ids_unique(storage: StorageResource) -> dg.AssetCheckResult:
    duplicates = storage.warehouse().query(sql.load("check_duplicate_run_ids")).to_pylist()
    return dg.AssetCheckResult(
        passed=not duplicates,
        metadata={"duplicated_run_ids": len(duplicates),
                  "examples": dg.MetadataValue.md(markdown_table(
                      ["run_id", "copies", "batches"], [tuple(d.values()) for d in duplicates]) if duplicates else "none")},
    )


# Checks per run batch need partitioned asset checks, a Dagster preview feature: its warning is known.
warnings.filterwarnings("ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning)


@dg.asset_check(asset="labels", partitions_def=run_batches,
                description="Every run of the batch that has a reference answer has a label.")
def every_referenced_run_labeled(context: dg.AssetCheckExecutionContext, storage: StorageResource):
    batch_id = context.partition_key
    (unlabeled,) = storage.warehouse().query(sql.load("check_unlabeled_runs"), {"batch_id": batch_id}).to_pylist()[0].values()
    return dg.AssetCheckResult(passed=unlabeled == 0, metadata={"unlabeled_runs": unlabeled})


@dg.asset_check(asset="quarantine", partitions_def=run_batches,
                description="Share of a batch's lines that went to quarantine, warned above a threshold.")
def quarantine_rate(context: dg.AssetCheckExecutionContext, config: QuarantineCheckConfig, storage: StorageResource):
    batch_id = context.partition_key
    row = storage.warehouse().query(sql.load("check_quarantine_rate"), {"batch_id": batch_id}).to_pylist()[0]
    lines = row["quarantined"] + row["landed"]
    rate = row["quarantined"] / lines if lines else 0.0
    return dg.AssetCheckResult(
        passed=rate <= config.warn_rate,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"quarantine_rate": round(rate, 4), "quarantined": row["quarantined"], "lines": lines,
                  "warn_rate": config.warn_rate},
    )
