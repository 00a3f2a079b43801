import dagster as dg

from assets.jobs import ingest_run_batch_job
from assets.partitions import benchmarks, policies, run_batches
from orchrm_dagster.glue.resources import PolicyRegistry, StorageResource
from orchrm_dagster.ingest import advance_cursor, new_or_changed, not_yet_ingested, parse_cursor
from orchrm_dagster.orchestration import benchmarks_available


def _ingested_fingerprint(instance: dg.DagsterInstance, batch_id: str) -> str | None:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("runs"), asset_partitions=[batch_id]), limit=1).records
    if not records:
        return None
    value = records[0].asset_materialization.metadata.get("source_fingerprint")
    return value.value if value is not None else None


@dg.sensor(job=ingest_run_batch_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def landing_zone_sensor(context: dg.SensorEvaluationContext, storage: StorageResource):
    """Registers each new (or replaced) file in <storage>/landing/ as a run_batches partition and ingests it."""
    seen = parse_cursor(context.cursor)
    fresh = new_or_changed(storage.storage_root().landed_files(), seen)
    if not fresh:
        return dg.SkipReason("no new files in the landing zone")
    to_ingest = not_yet_ingested(fresh, {f.batch_id: _ingested_fingerprint(context.instance, f.batch_id) for f in fresh})
    keys = sorted({f.batch_id for f in to_ingest})
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(partition_key=f.batch_id, run_key=f"{f.name}:{f.fingerprint}",
                          tags={"orchrm/source_file": f.name})
            for f in to_ingest
        ],
        dynamic_partitions_requests=[run_batches.build_add_request(keys)] if keys else [],
        cursor=advance_cursor(seen, fresh),
    )


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def orchestration_partitions_sensor(context: dg.SensorEvaluationContext, storage: StorageResource,
                                    policy_registry: PolicyRegistry):
    """Keeps the `benchmarks` and `policies` partitions in step with the problems table and the policy registry."""
    requests = orchestration_partition_requests(context.instance, storage, policy_registry)
    if not requests:
        return dg.SkipReason("every benchmark and policy already has its partition")
    return dg.SensorResult(dynamic_partitions_requests=requests)


def orchestration_partition_requests(instance, storage: StorageResource, policy_registry: PolicyRegistry):
    requests = []
    for partitions, wanted in ((benchmarks, benchmarks_available(storage.storage_root())),
                               (policies, policy_registry.names())):
        existing = set(instance.get_dynamic_partitions(partitions.name))
        missing = [key for key in wanted if key not in existing]
        if missing:
            requests.append(partitions.build_add_request(missing))
    return requests
