"""The code location: only assembles what assets/ and the engine define."""

import dagster as dg

from assets.checks import every_referenced_run_labeled, quarantine_rate, run_ids_unique
from assets.ingestion import run_batch_ingestion
from assets.jobs import ingest_run_batch_job
from assets.labels import labels
from assets.problems import problems
from assets.sensors import landing_zone_sensor
from orchrm_dagster.resources import StorageResource, default_storage_resource


def build_definitions(storage: StorageResource | None = None) -> dg.Definitions:
    return dg.Definitions(
        assets=[problems, run_batch_ingestion, labels],
        asset_checks=[run_ids_unique, every_referenced_run_labeled, quarantine_rate],
        jobs=[ingest_run_batch_job],
        sensors=[landing_zone_sensor],
        resources={"storage": storage or default_storage_resource()},
    )


defs = build_definitions()
