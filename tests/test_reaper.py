"""What a crash can leave in flight, reaped on a real SQLite instance: every state (STARTING with its worker gone or
never started, STARTED, CANCELING), each failed with its cause; a run that may still end, and another host's, left
alone. And the instance settings the loop needs: written on a bare DAGSTER_HOME, asked of a user's dagster.yaml."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import EngineEventData

from assets.instance_settings import DAGSTER_YAML, settings_problem, write_instance_settings
from assets.loop import LOOP_TAG, STEP_TAG, step_runs
from assets.runs import HOST_TAG, PID_TAG, ensure_pool_limits, fail_runs_whose_worker_died, free_slots_of_dead_runs


@dg.op
def step():
    pass


JOB = dg.GraphDefinition("g", node_defs=[step]).to_job()


@pytest.fixture
def instance(tmp_path):
    home = tmp_path / "home"
    write_instance_settings(home)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        yield instance


def dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def in_flight(instance, status: dg.DagsterRunStatus, worker: int | None = None, tags=None):
    run = instance.create_run_for_job(JOB, status=status, tags=tags or {})
    if worker is not None:  # as the code server writes it when it starts the run's worker
        instance.report_engine_event(f"Started process for run (pid: {worker}).", run,
                                     EngineEventData.in_process(worker))
    return run


def status_and_cause(instance, run):
    after = instance.get_run_by_id(run.run_id)
    failures = [r.event_log_entry for r in instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records]
    return after.status, (failures[0].message if failures else None)


@pytest.mark.parametrize("status", [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
                                    dg.DagsterRunStatus.CANCELING])
def test_a_run_whose_worker_is_gone_is_failed_with_its_cause_in_every_in_flight_state(instance, status):
    pid = dead_pid()
    run = in_flight(instance, status, worker=pid)

    assert fail_runs_whose_worker_died(instance) == [run.run_id]
    after, cause = status_and_cause(instance, run)
    assert after == dg.DagsterRunStatus.FAILURE
    assert f"its run worker (pid {pid}) is gone" in cause
    assert ("cancelation never finished" in cause) == (status == dg.DagsterRunStatus.CANCELING)


def test_a_run_launched_but_never_started_is_failed_after_the_start_timeout(instance):
    run = in_flight(instance, dg.DagsterRunStatus.STARTING)

    assert fail_runs_whose_worker_died(instance, start_timeout_s=60) == []  # its launch may still be under way
    time.sleep(1.1)
    assert fail_runs_whose_worker_died(instance, start_timeout_s=1) == [run.run_id]
    after, cause = status_and_cause(instance, run)
    assert after == dg.DagsterRunStatus.FAILURE and "its run worker never started" in cause


def test_a_run_whose_worker_lives_and_another_hosts_run_are_left_alone(instance):
    alive = in_flight(instance, dg.DagsterRunStatus.STARTED, worker=os.getppid())
    elsewhere = in_flight(instance, dg.DagsterRunStatus.STARTING, worker=dead_pid(), tags={HOST_TAG: "elsewhere"})

    assert fail_runs_whose_worker_died(instance, start_timeout_s=0) == []
    assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
    assert instance.get_run_by_id(elsewhere.run_id).status == dg.DagsterRunStatus.STARTING


def test_a_worker_pid_taken_by_a_later_process_counts_as_gone():
    from assets.runs import _alive_since

    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = time.time()
        assert _alive_since(later.pid, since=started)  # the worker the event named, still running
        assert not _alive_since(later.pid, since=started - 60)  # the event is older: its worker's pid, reused
        assert not _alive_since(dead_pid(), since=started)
    finally:
        later.kill()
        later.wait()


def test_a_reaped_runs_pool_slot_is_given_back(instance):
    storage = instance.event_log_storage
    ensure_pool_limits(instance)
    run = in_flight(instance, dg.DagsterRunStatus.STARTED, worker=dead_pid())
    waiting = instance.create_run_for_job(JOB)
    assert storage.claim_concurrency_slot("warehouse", run.run_id, "step").is_claimed
    assert not storage.claim_concurrency_slot("warehouse", waiting.run_id, "step").is_claimed

    fail_runs_whose_worker_died(instance)
    assert free_slots_of_dead_runs(instance) == [run.run_id]
    assert storage.claim_concurrency_slot("warehouse", waiting.run_id, "step").is_claimed


# ---------------------------------------------------------------- the instance's settings


def test_a_bare_dagster_home_gets_orchrms_settings_and_its_pools_their_limit_at_once(tmp_path):
    home = tmp_path / "bare"
    home.mkdir()
    with dg.DagsterInstance.from_config(str(home)) as bare:  # as a daemon started before any dagster.yaml existed
        assert bare.global_op_concurrency_default_limit is None and not bare.run_monitoring_enabled
        assert settings_problem(bare) is None  # the loop goes on: orchrm's file is written for the next start
        assert (home / "dagster.yaml").read_text() == DAGSTER_YAML
        ensure_pool_limits(bare)
        assert {(p.name, p.limit) for p in bare.event_log_storage.get_pool_limits()} == {("warehouse", 1), ("gpu", 1),
                                                                                          ("policy", 1)}
    with dg.DagsterInstance.from_config(str(home)) as restarted:
        assert restarted.run_monitoring_enabled and restarted.global_op_concurrency_default_limit == 1
        assert restarted.run_monitoring_start_timeout_seconds == 180


def test_a_users_dagster_yaml_without_them_stops_the_loop_with_the_lines_that_fix_it(tmp_path):
    home = tmp_path / "users"
    home.mkdir()
    mine = "telemetry:\n  enabled: false\n"
    (home / "dagster.yaml").write_text(mine)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        problem = settings_problem(instance)
    assert problem is not None and "run monitoring and a pool limit" in problem
    assert "`run_monitoring: {enabled: true}`" in problem and "`concurrency: {pools: {default_limit: 1}}`" in problem
    assert str(home / "dagster.yaml") in problem and "restart the daemon" in problem
    assert (home / "dagster.yaml").read_text() == mine  # a user's file is left alone


OLDER = """\
# Written by orchrm. One writer at a time for steps in the 'warehouse' pool, one model at a time in the 'gpu' pool.
concurrency:
  pools:
    default_limit: 1
run_monitoring:
  enabled: true  # a run whose worker died is marked failed (and the reaper frees its pool slots)
nux:
  enabled: false  # no newsletter dialog on a fresh instance
telemetry:
  enabled: false
"""


def test_an_older_file_of_orchrms_own_is_rewritten(tmp_path):
    home = tmp_path / "old"
    home.mkdir()
    (home / "dagster.yaml").write_text(OLDER)  # as orchrm wrote it before its start timeout (2026-11-27)
    assert write_instance_settings(home)
    assert (home / "dagster.yaml").read_text() == DAGSTER_YAML
    assert not list(Path(home).glob(".dagster.yaml.*"))


@pytest.mark.parametrize("written", [DAGSTER_YAML, OLDER], ids=["this version's", "an older one"])
def test_a_users_edit_of_orchrms_file_is_kept_never_reverted(tmp_path, written):
    """A team adds its own storage to the file orchrm wrote: orchrm tells the edit apart (the first line's digest of
    the rest), leaves the file as the team wrote it, and the loop runs on it as long as it keeps the settings."""
    home = tmp_path / "edited"
    home.mkdir()
    edited = written + "storage:\n  sqlite:\n    base_dir: " + str(home / "db") + "\n"
    (home / "dagster.yaml").write_text(edited)
    assert not write_instance_settings(home)
    assert (home / "dagster.yaml").read_text() == edited
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert settings_problem(instance) is None  # it keeps run monitoring and the pool limit
        assert (home / "dagster.yaml").read_text() == edited
    without = edited.replace("  enabled: true  # a run whose worker died", "  enabled: false  # a run whose worker died")
    (home / "dagster.yaml").write_text(without)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        problem = settings_problem(instance)
    assert problem is not None and "run monitoring" in problem and "restart the daemon" in problem
    assert (home / "dagster.yaml").read_text() == without


@pytest.mark.parametrize("status", [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTED])
def test_a_command_run_killed_between_two_steps_is_failed_and_its_step_asked_again(instance, status):
    """An orchrm command's in-process run killed between two assets holds no pool slot: it is judged by its
    command's process, failed with the cause, and the loop asks its step again (attempt 2)."""
    from orchrm_dagster.loop import Batch, LoopSettings, LoopState, decide

    key = "ingest:a.jsonl:1:2"
    tags = {PID_TAG: str(dead_pid()), HOST_TAG: socket.gethostname(), LOOP_TAG: "1", STEP_TAG: key}
    run = in_flight(instance, status, tags=tags)
    assert key in step_runs(instance).in_flight

    assert fail_runs_whose_worker_died(instance) == [run.run_id]
    after, cause = status_and_cause(instance, run)
    assert after == dg.DagsterRunStatus.FAILURE and f"its process {tags[PID_TAG]} (an orchrm command) is gone" in cause
    runs = step_runs(instance)
    assert key not in runs.in_flight and runs.failures.get(key) == (1, cause)
    state = LoopState(batches=(Batch("a.jsonl", "a.jsonl", "1:2", False),), runs=runs)
    asked = decide(state, LoopSettings(rounds=0)).steps
    assert [(s.key, s.attempt) for s in asked] == [(key, 1)]


def test_a_live_commands_run_is_left_alone(instance):
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(1.2)  # the run is created after its command's process started
        tags = {PID_TAG: str(alive.pid), HOST_TAG: socket.gethostname()}
        mine = in_flight(instance, dg.DagsterRunStatus.STARTED, tags=tags)
        assert fail_runs_whose_worker_died(instance) == []
        assert instance.get_run_by_id(mine.run_id).status == dg.DagsterRunStatus.STARTED
    finally:
        alive.kill()
        alive.wait()


def test_nothing_is_reaped_on_an_instance_whose_settings_the_loop_refuses(tmp_path, monkeypatch):
    """A user's dagster.yaml without run monitoring: the loop leaves the instance alone (it says the fix), and so
    do its sensor's reaper and every orchrm command's."""
    from assets.resources import LoopResource, StorageResource
    from assets.sensors import loop_sensor
    from orchrm_dagster.app.instance import cli_instance

    home = tmp_path / "users"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        dead = in_flight(instance, dg.DagsterRunStatus.STARTED, worker=dead_pid())
        command = in_flight(instance, dg.DagsterRunStatus.STARTED,
                            tags={PID_TAG: str(dead_pid()), HOST_TAG: socket.gethostname()})
        result = loop_sensor(dg.build_sensor_context(instance=instance, resources={
            "storage": StorageResource(root=str(tmp_path / "storage")), "loop": LoopResource()}))
        assert "run monitoring" in result.skip_message
        for run in (dead, command):
            assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
    with cli_instance() as instance:
        for run in (dead, command):
            assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
