"""The instance's runs as the loop, its sensors and the in-process commands see them: the tags of a run executed in
this process, the root cause of a failed run's error, quiet loggers for in-process runs; and the housekeeping the
loop's sensor and the CLI's instance do before asking for runs: each pool's limit row created, runs whose worker died
failed, and pool slots a killed run still holds given back."""

from __future__ import annotations

import os
import re
import socket
import time

import dagster as dg
import psutil
import sqlalchemy.exc

from assets.deployment import profile
from assets.instance_settings import POOL_LIMIT, orchrm_settings_apply
from assets.partitions import POOLS

PID_TAG, HOST_TAG = "orchrm/pid", "orchrm/host"
QUIET = {"console": {"config": {"log_level": "CRITICAL"}}}  # loggers of in-process runs: the CLI prints what failed


def process_tags() -> dict[str, str]:
    """Tags of a run executed in this process, so a later process can tell whether its owner is still alive."""
    return {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}


def root_cause(error) -> str:
    """The innermost cause of a serialized Dagster error, as `Type: message`."""
    while error.cause is not None:
        error = error.cause
    message = re.sub(r"\s*\n\s*", " ", error.message.strip())  # one line: a step's line in a log is one line
    if error.cls_name:  # Dagster's message of an exception from a module starts `package.module.Class: `
        message = re.sub(rf"^(?:[\w.]+\.)?{re.escape(error.cls_name)}:\s*", "", message)
        return f"{error.cls_name}: {message}"
    return message


def failure_cause(events) -> str:
    """Why a run failed, in one wording wherever it is shown, from its events (an in-process result's `all_events`,
    or the instance's log of a launched run): each failed step's error as `step: Type: message`, followed by the
    description of each blocking check that failed (the refusal itself, which Dagster's error only names); else the
    run failure's error; else what the engine said on finding the run's process gone (kill -9, the OOM killer);
    else the run failure's message."""
    steps, checks, runs, engine, said = [], [], [], [], []
    for event in events:
        error = getattr(event.event_specific_data, "error", None)
        if event.is_step_failure:
            steps.append(f"{event.step_key}: {root_cause(error) if error is not None else event.message}")
        elif event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            checks += _failed_blocking_check(event.asset_check_evaluation_data)
        elif event.is_run_failure:
            (runs if error is not None else said).append(root_cause(error) if error is not None else event.message)
        elif event.event_type == dg.DagsterEventType.ENGINE_EVENT and "terminated" in (event.message or ""):
            engine.append(event.message)
    if steps:
        return "; ".join(steps + checks)
    return "; ".join(runs or engine or [m for m in said if m]) or "the run failed"


def _failed_blocking_check(evaluation) -> list[str]:
    if evaluation.passed or not evaluation.blocking or not evaluation.description:
        return []
    return [f"{evaluation.check_name} failed: {evaluation.description}"]


def quiet(run_config: dg.RunConfig | dict | None) -> dg.RunConfig | dict:
    """The run config with quiet loggers; a dict is a user's run config file (`orchrm materialize --config`)."""
    if isinstance(run_config, dict):
        return {**run_config, "loggers": QUIET}
    run_config = run_config or dg.RunConfig()
    return dg.RunConfig(ops=run_config.ops, resources=run_config.resources, loggers=QUIET,
                        execution=run_config.execution)


def ensure_pool_limits(instance: dg.DagsterInstance, pools: tuple[str, ...] = POOLS, attempts: int = 5) -> None:
    """Creates each pool's limit row (the instance's default limit) before any run claims a slot. Dagster creates it
    on a step's first claim, and on PostgreSQL two runs doing that at once fail one of them with
    InFailedSqlTransaction (dagster-io/dagster#33552, open). Here a lost race is caught and the rows looked up again.
    An instance without a default limit whose dagster.yaml is orchrm's (a daemon started before the file was written)
    gets orchrm's limit as explicit rows, so its pools hold from the first run."""
    storage = instance.event_log_storage
    default = instance.global_op_concurrency_default_limit
    if not storage.supports_global_concurrency_limits:
        return
    if default is None:
        if orchrm_settings_apply(instance):
            limits = {pool.name for pool in storage.get_pool_limits()}
            for pool in pools:
                if pool not in limits:
                    storage.set_concurrency_slots(pool, POOL_LIMIT)
        return
    for _ in range(attempts):
        limits = {pool.name: pool for pool in storage.get_pool_limits()}
        stale = [p for p in pools if p not in limits or (limits[p].from_default and limits[p].limit != default)]
        if not stale:
            return
        for pool in stale:
            try:
                storage.initialize_concurrency_limit_to_default(pool)
            except sqlalchemy.exc.DBAPIError:  # another process created the row meanwhile
                time.sleep(0.05)


def free_slots_of_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Frees the pool slots of every run that can no longer release them: finished runs (a run marked failed after
    its worker was killed keeps its slots otherwise), and runs of this host whose process is gone (a kill -9 or an
    OOM kill of an in-process CLI run), which are marked failed first. Returns the runs freed."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    freed = []
    for run_id in storage.get_concurrency_run_ids():
        record = next(iter(instance.get_run_records(dg.RunsFilter(run_ids=[run_id]), limit=1)), None)
        if record is not None and not record.dagster_run.is_finished:
            cause = _command_gone(record)
            if cause is None:
                continue
            instance.report_run_failed(record.dagster_run, f"{cause}: its pool slots are freed")
        storage.free_concurrency_slots_for_run(run_id)
        freed.append(run_id)
    return freed


IN_FLIGHT = (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING)


def fail_runs_whose_worker_died(instance: dg.DagsterInstance, start_timeout_s: float | None = None) -> list[str]:
    """Marks failed, with the cause, every run of this host a crash left in flight: STARTING (launched, its worker
    gone, or never started within `start_timeout_s`: its launcher, the daemon or its code server, was killed),
    STARTED (its worker gone) and CANCELING (its worker gone before it ended); and every in-process run of an orchrm
    command whose process is gone, in whatever state it was left (killed between two steps, it holds no pool slot
    for `free_slots_of_dead_runs` to find). The code server that launched a run marks it failed when its worker
    dies, and Dagster's run monitoring fails a run that never started, but a daemon killed with its code server, or
    started without run monitoring, does neither: the run would stay in flight for ever, and the loop wait on it.
    The worker's pid is in the run's "Started process for run" event (a pid reused by a later process counts as
    gone). A run is this host's by its host tag; one without (launched from the UI, say) only on an instance whose
    run storage is a SQLite file, which one machine writes: on a shared instance another host's run is not ours to
    judge. The loop asks the step again under its `max_attempts`, and `free_slots_of_dead_runs` gives back the pool
    slots."""
    if profile() != "local":
        return []
    timeout = start_timeout_s if start_timeout_s is not None else instance.run_monitoring_start_timeout_seconds
    single_host = "sqlite" in type(instance.run_storage).__name__.lower()
    failed = []
    for record in instance.get_run_records(dg.RunsFilter(statuses=[*IN_FLIGHT, dg.DagsterRunStatus.NOT_STARTED]),
                                           limit=500):
        run = record.dagster_run
        if not _this_hosts(run.tags, single_host):
            continue
        if PID_TAG in run.tags:  # an in-process run of a command: judged by its process
            cause = _command_gone(record)
        elif run.status == dg.DagsterRunStatus.NOT_STARTED:
            continue  # created, not launched yet: the launcher or the queue decides
        else:
            cause = _why_gone(instance, run, record.update_timestamp.timestamp(), timeout)
        if cause is None:
            continue
        if run.status == dg.DagsterRunStatus.CANCELING:
            cause = f"its cancelation never finished: {cause}"
        instance.report_run_failed(run, cause)
        failed.append(run.run_id)
    return failed


def _this_hosts(tags: dict, single_host: bool) -> bool:
    host = tags.get(HOST_TAG)
    return host == socket.gethostname() or (host is None and single_host)


def _command_gone(record) -> str | None:
    """Why an in-process run of an orchrm command can no longer end (its process is gone, or its pid now belongs to
    a process started after the run was), or None while it may; None for a run that is no command's, or another
    host's."""
    tags = record.dagster_run.tags
    if PID_TAG not in tags or tags.get(HOST_TAG) != socket.gethostname():
        return None  # not ours to judge: run monitoring marks a launched run's dead worker failed
    pid = int(tags[PID_TAG])
    if pid == os.getpid() or _alive_since(pid, record.create_timestamp.timestamp()):
        return None
    return f"its process {pid} (an orchrm command) is gone: it was killed"


def _why_gone(instance: dg.DagsterInstance, run, updated: float, timeout_s: float) -> str | None:
    """Why `run` can no longer end by itself, or None while it still may."""
    worker = _worker(instance, run.run_id)
    if worker is not None:
        pid, since = worker
        if pid == os.getpid() or _alive_since(pid, since):
            return None
        return (f"its run worker (pid {pid}) is gone: it was killed, or died with the daemon and its code server")
    if run.status != dg.DagsterRunStatus.STARTING:
        return None  # STARTED or CANCELING without a worker event: not a launched run's, nothing to judge it by
    waited = time.time() - updated
    if waited < timeout_s:
        return None
    return (f"launched {waited:.0f} s ago, its run worker never started: the daemon or code server that launched it "
            f"was killed (start timeout {timeout_s:.0f} s)")


def _alive_since(pid: int, since: float) -> bool:
    """Whether process `pid` runs and is the one that existed at `since` (not a later process given its number)."""
    try:
        return psutil.Process(pid).create_time() <= since + 1.0
    except psutil.NoSuchProcess:
        return False


def _worker_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
    worker = _worker(instance, run_id)
    return worker[0] if worker else None


def _worker(instance: dg.DagsterInstance, run_id: str) -> tuple[int, float] | None:
    """The run worker's pid and when its "Started process for run" event was written."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=50).records
    for record in records:
        event = record.event_log_entry.dagster_event
        metadata = getattr(event.event_specific_data, "metadata", None) or {}
        if "pid" in metadata and (record.event_log_entry.message or "").startswith("Started process for run"):
            return int(metadata["pid"].value), record.event_log_entry.timestamp
    return None
