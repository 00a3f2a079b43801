"""The loop's sensors. Neither restates a rule: both ask the engine's `decide` (with the state assets/loop.py reads)
what happens next and request the steps of their part, as run requests built from the generated config classes."""

import json

import dagster as dg

from assets.checks import batch_check_metadata
from assets.instance_settings import settings_problem
from assets.jobs import INGEST_JOB, LOOP_JOBS, ROUND_JOBS, evaluation_job
from assets.loop import loop_state, partition_requests, prepare_steps, step_run
from assets.partitions import orchestration_partition_requests
from assets.resources import LoopResource, PolicyRegistry, StorageResource
from assets.runs import ensure_pool_limits, fail_runs_whose_worker_died, free_slots_of_dead_runs
from orchrm_dagster.loop import LEARNING, ROUNDS, BatchState, Decision, decide, describe, unclean_batch_states

BATCH_INGESTED_CHECK = "batch_ingested"
PARTITION_TAG = "dagster/partition"  # the tag of a partitioned run naming its partition


def _requests(context, decision: Decision, kinds, root, cursor: str | None = None) -> dg.SensorResult:
    """The runs of this sensor's steps; the decision, whole, is the tick's reason: its skip reason when it asks for
    nothing (the UI shows it on the tick), its log line when it does (the tick's logs)."""
    steps = prepare_steps(root, [step for step in decision.steps if step.kind in kinds])  # new batches recorded
    runs = [step_run(step) for step in steps]
    if steps:
        context.log.info(describe(decision))
    return dg.SensorResult(
        run_requests=[run.run_request(step.run_key) for step, run in zip(steps, runs)],
        dynamic_partitions_requests=partition_requests(runs),
        skip_reason=None if steps else describe(decision), cursor=cursor)


LOOP_SENSOR_INTERVAL_S = 30


def loop_sensors(interval_s: int = LOOP_SENSOR_INTERVAL_S) -> list[dg.SensorDefinition]:
    """The loop's two sensors, evaluated every `interval_s` seconds (the daemon's floor is 5)."""

    @dg.sensor(jobs=LOOP_JOBS, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING)
    def loop_sensor(context: dg.SensorEvaluationContext, storage: StorageResource, loop: LoopResource):
        """The learning part of the loop, on from the start: the files that land in <storage>/landing/ are cut into
        run batches (the `loop` resource's `batching`: what lands together, up to a count and a size, at a bounded
        rate) and each batch is ingested and labeled in one run; the pairs are rebuilt when the ingested batches
        changed; the reward model retrains once `retrain_min_new_pairs` new pairs arrived (the champion gate
        decides); the champion scores every run. A batch whose ingest failed, or a file of it that could not be
        read, holds nothing and shows as a failed `batch_ingested` check until it is re-ingested."""
        problem = settings_problem(context.instance)  # on a bare DAGSTER_HOME, its dagster.yaml written now
        if problem:  # an instance the loop leaves alone: nothing of it is reaped either
            return dg.SkipReason(problem)
        fail_runs_whose_worker_died(context.instance)  # so their steps are asked again, not waited on for ever
        free_slots_of_dead_runs(context.instance)
        ensure_pool_limits(context.instance)  # before the runs it requests race to create them
        root = storage.storage_root()
        state = loop_state(context.instance, root)
        reported = json.loads(context.cursor) if context.cursor else {}
        events, now = _batch_check_events(unclean_batch_states(state, reported), reported)
        report_batch_checks(context.instance, events)
        return _requests(context, decide(state, loop.to_engine()), LEARNING, root, json.dumps(now, sort_keys=True))

    @dg.sensor(jobs=ROUND_JOBS, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.STOPPED)
    def grpo_loop_sensor(context: dg.SensorEvaluationContext, storage: StorageResource, loop: LoopResource):
        """The GRPO part of the loop, off until switched on: the last promoted checkpoint (and the base policy) rolls
        out on its round's training problems, and once those rollouts' batches are ingested, scored by the champion,
        in the pairs and, where they made a retraining due, trained on, the next round starts, whatever else keeps
        arriving; it stops at `rounds` rounds or `token_budget` tokens (resource `loop`)."""
        problem = settings_problem(context.instance)
        if problem:
            return dg.SkipReason(problem)
        root = storage.storage_root()
        state = loop_state(context.instance, root, rounds_on=True)
        return _requests(context, decide(state, loop.to_engine()), ROUNDS, root)

    return [loop_sensor, grpo_loop_sensor]


loop_sensor, grpo_loop_sensor = loop_sensors()


def _batch_check_events(states: list[BatchState], reported: dict[str, str]):
    """A failed `batch_ingested` evaluation for each batch that newly failed, a passed one once such a batch is
    ingested; `reported` (the sensor's cursor) remembers what was reported, so each change is reported once."""
    events, now = [], dict(reported)
    for batch in states:
        verdict = ("failed" if batch.failed else
                   "ingested" if batch.state == "ingested" and batch.batch_id in reported else None)
        if verdict is None or reported.get(batch.batch_id) == f"{verdict}:{batch.cause}":
            continue
        now[batch.batch_id] = f"{verdict}:{batch.cause}"
        events.append(dg.AssetCheckEvaluation(
            asset_key=dg.AssetKey("runs"), check_name=BATCH_INGESTED_CHECK, passed=verdict == "ingested",
            partition=batch.batch_id, metadata=batch_check_metadata(batch)))
    return events, now


def report_batch_checks(instance: dg.DagsterInstance, evaluations: list[dg.AssetCheckEvaluation]) -> None:
    """Records each evaluation as an event of the batch's latest ingest run, the run it judges. Not as a runless
    event: Dagster keeps one runless evaluation per check and partition (a unique index), so a batch reported
    failed and then, re-ingested, passed failed every later tick of the sensor with an IntegrityError and the loop
    stopped (found killing an ingest run under the daemon); a run's own evaluation is updated in place."""
    for evaluation in evaluations:
        runs = instance.get_runs(dg.RunsFilter(job_name=INGEST_JOB, tags={PARTITION_TAG: evaluation.partition}),
                                 limit=1)
        if not runs:  # a batch is judged by its runs: none yet, nothing to attach the verdict to
            continue
        instance.report_dagster_event(dg.DagsterEvent(
            event_type_value=dg.DagsterEventType.ASSET_CHECK_EVALUATION.value, job_name=runs[0].job_name,
            event_specific_data=evaluation,
            message=f"batch_ingested {'passed' if evaluation.passed else 'failed'} for {evaluation.partition}: "
                    f"{evaluation.metadata['state'].value}"), run_id=runs[0].run_id)


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def orchestration_partitions_sensor(context: dg.SensorEvaluationContext, storage: StorageResource,
                                    policy_registry: PolicyRegistry):
    """Keeps the `benchmarks` and `policies` partitions in step with the problems table and the policy registry."""
    requests = orchestration_partition_requests(context.instance, storage, policy_registry)
    if not requests:
        return dg.SkipReason("every benchmark and policy already has its partition")
    return dg.SensorResult(dynamic_partitions_requests=requests)


nightly_evaluation = dg.ScheduleDefinition(
    name="nightly_evaluation", job=evaluation_job, cron_schedule="0 3 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Re-run the Best-of-N evaluation every night, so accuracy is comparable over time.")
