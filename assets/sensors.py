import dagster as dg

from assets.jobs import evaluation_job, grpo_round_job, ingest_run_batch_job, orchestrate_job, retrain_reward_model_job
from assets.partitions import benchmarks, grpo_rounds, policies, run_batches
from orchrm_dagster.glue.instance import ensure_pool_limits
from orchrm_dagster.glue.resources import LoopResource, PolicyRegistry, StorageResource
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
    ensure_pool_limits(context.instance)  # before the runs it requests race to create them
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
                               (policies, policy_registry.names(storage.storage_root()))):
        existing = set(instance.get_dynamic_partitions(partitions.name))
        missing = [key for key in wanted if key not in existing]
        if missing:
            requests.append(partitions.build_add_request(missing))
    return requests


# ---------------------------------------------------------------- the loop that keeps learning


def _warehouse_value(storage: StorageResource, name: str, params: dict | None = None):
    import sql

    try:
        return next(iter(storage.warehouse().query(sql.load(name), params).to_pylist()[0].values()))
    except FileNotFoundError:
        return None


@dg.sensor(job=orchestrate_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def checkpoint_rollout_sensor(context: dg.SensorEvaluationContext, storage: StorageResource, loop: LoopResource,
                              policy_registry: PolicyRegistry):
    """Each new policy checkpoint samples and executes plans on its round's training problems, and so does the base
    policy its plans are preferred over; the runs land, and the landing-zone sensor ingests them."""
    from orchrm_dagster.grpo import policy_manifest, read_table
    from orchrm_dagster.orchestration import execution_batch_name

    root = storage.storage_root()
    requests = []
    for row in read_table(root, "policy_checkpoints"):
        manifest = policy_manifest(root, row["round"])
        if root.exists(root.landing_path(execution_batch_name(f"{manifest['benchmark']}|{row['name']}"))):
            continue
        sampling = {"n_samples": loop.rollout_samples, "problem_ids": manifest["train_problems"]}
        for policy in (row["name"], manifest["scratch_policy"]):
            key = dg.MultiPartitionKey({"benchmark": manifest["benchmark"], "policy": policy})
            requests.append(dg.RunRequest(partition_key=key, run_key=f"rollout-{row['name']}-{policy}",
                                          run_config={"ops": {"orchestration_samples": {"config": sampling}}}))
    if not requests:
        return dg.SkipReason("every policy checkpoint has executed its rollout")
    return dg.SensorResult(run_requests=requests,
                           dynamic_partitions_requests=orchestration_partition_requests(context.instance, storage,
                                                                                        policy_registry))


@dg.sensor(job=retrain_reward_model_job, minimum_interval_seconds=120, default_status=dg.DefaultSensorStatus.RUNNING)
def reward_model_retrain_sensor(context: dg.SensorEvaluationContext, storage: StorageResource, loop: LoopResource):
    """The reward model retrains once `retrain_min_new_pairs` pairs arrived since the champion trained (the champion
    gate then decides), and every run is scored again."""
    from orchrm_dagster.rm import pairs_since_champion

    pairs = _warehouse_value(storage, "pairs_total")
    if not pairs:
        return dg.SkipReason("no pairs yet")
    new = pairs_since_champion(storage.storage_root(), pairs)
    if new is not None and new < loop.retrain_min_new_pairs:
        return dg.SkipReason(f"{new} new pairs since the champion trained (retrains at {loop.retrain_min_new_pairs})")
    return dg.RunRequest(run_key=f"retrain-at-{pairs}-pairs")


@dg.sensor(job=grpo_round_job, minimum_interval_seconds=120, default_status=dg.DefaultSensorStatus.STOPPED)
def grpo_loop_sensor(context: dg.SensorEvaluationContext, storage: StorageResource, loop: LoopResource):
    """Starts the next GRPO round once the last round's checkpoint has executed and been ingested and no retraining
    of the reward model is pending; stops at `rounds` rounds or `token_budget` tokens. Off until switched on."""
    from orchrm_dagster.glue.loop import next_round, tokens_spent
    from orchrm_dagster.grpo import policy_name, read_table
    from orchrm_dagster.rm import pairs_since_champion

    root = storage.storage_root()
    rows = read_table(root, "grpo_rounds")
    if len(rows) >= loop.rounds:
        return dg.SkipReason(f"the loop has run its {loop.rounds} rounds")
    if loop.token_budget is not None and tokens_spent(rows) >= loop.token_budget:
        return dg.SkipReason("the loop has spent its token budget")
    if rows and not _warehouse_value(storage, "runs_of_policy", {"policy": policy_name(rows[-1]["round"])}):
        return dg.SkipReason(f"waiting for round {rows[-1]['round']}'s checkpoint runs to be ingested")
    new = pairs_since_champion(root, _warehouse_value(storage, "pairs_total") or 0)
    if new is None:
        return dg.SkipReason("no champion reward model yet")
    if rows and new >= loop.retrain_min_new_pairs:
        return dg.SkipReason("waiting for the reward model to retrain on the new pairs")
    number = next_round(rows)
    return dg.SensorResult(run_requests=[dg.RunRequest(partition_key=str(number), run_key=f"grpo-round-{number}")],
                           dynamic_partitions_requests=[grpo_rounds.build_add_request([str(number)])])


nightly_evaluation = dg.ScheduleDefinition(
    name="nightly_evaluation", job=evaluation_job, cron_schedule="0 3 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Re-run the Best-of-N evaluation every night, so accuracy is comparable over time.")
