"""A step's training in a process of its own (Dagster Pipes): the run worker never loads the model, the training's log
lines and result come back as the step's, a failed or killed training fails the step with its own last line, and a
kill -9 of the run worker takes every training process with it."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from assets.training_process import training_command_in_pod, training_failure, training_pod_spec
from orchrm_dagster.app.commands import ingest_files, materialize_selection
from orchrm_dagster.definitions import build_definitions
from orchrm_dagster.processes import OWNERS_ENV, failure_cause, how_it_ended, owned_env, owner_alive, started_at
from orchrm_dagster.synthetic import generate_runs, write_jsonl
from tests.conftest import gone
from tests.rm.toy import NO_FLOOR

TRAINING = "orchrm_dagster.app.training_process"
DATA_PARALLEL = "orchrm_dagster.rm.fit_process"


def with_pairs(tmp_path):
    defs = build_definitions()
    history = tmp_path / "history.jsonl"
    write_jsonl(generate_runs(96, seed=2, benchmarks=("gsm8k_test",), samples_per_problem=8), history)
    assert ingest_files(defs, [history])[0].status == "SUCCESS"
    assert materialize_selection(defs, 'key:"pairs"', None,
                                 {"ops": {"pairs": {"config": {"validation_fraction": 0.4}}}}).success
    return defs


def reward_model_run_config(backbone: str, **changes) -> dict:
    settings = {"backbone": backbone, "max_length": 64, "batch_size": 8, "device": "cpu", **NO_FLOOR, **changes}
    return {"ops": {"reward_model": {"config": settings}}}


def step_failure(result) -> str:
    return " ".join(str(e.event_specific_data.error) for e in result.all_events if e.event_type_value == "STEP_FAILURE")


def descendants(pid: int, marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.Process(pid).children(recursive=True):
        try:
            command = " ".join(process.cmdline())
            if marker in command and "accelerate.commands.launch" not in command:  # not the launcher naming them
                found.append(process)
        except psutil.NoSuchProcess:
            pass
    return found


def test_the_training_runs_in_its_own_process_and_reports_back_through_pipes(tmp_path, tiny_backbone):
    from orchrm_dagster.app.instance import cli_instance

    defs = with_pairs(tmp_path)
    result = materialize_selection(defs, 'key:"reward_model"', None, reward_model_run_config(tiny_backbone))
    assert result.success
    metadata = {k: v.value for e in result.get_asset_materialization_events()
                for k, v in e.event_specific_data.materialization.metadata.items()}
    assert metadata["trained_versions"] == [1] and metadata["champion_of"] == {"1": ["choice", "math", "qa"]}
    process = metadata["training_process"]
    assert process.startswith("subprocess (Dagster Pipes), pid ") and f"pid {os.getpid()}," not in process
    logged = [entry.user_message for entry in cli_instance().all_logs(result.run_id)]
    assert any("reward model: training on the pairs of" in line for line in logged)  # its log lines, as they came


def test_a_training_that_fails_fails_the_step_with_its_own_error(tmp_path, tiny_backbone):
    defs = build_definitions()  # no runs, so no pairs to train on
    result = materialize_selection(defs, 'key:"reward_model"', None, reward_model_run_config(tiny_backbone))
    assert not result.success
    assert "the reward_model training process exited with code 1; its last line: training failed: ValueError: " \
           "no training pairs" in step_failure(result)


def test_a_killed_training_fails_the_step_with_how_it_died_and_its_last_line(tmp_path, tiny_backbone):
    defs = with_pairs(tmp_path)
    outcome = {}
    run = threading.Thread(target=lambda: outcome.setdefault("result", materialize_selection(
        defs, 'key:"reward_model"', None, reward_model_run_config(tiny_backbone, epochs=500.0))))
    run.start()
    training = _wait_for(lambda: descendants(os.getpid(), TRAINING), "the training process")
    _wait_for(lambda: list(Path(os.environ["ORCHRM_STORAGE"]).rglob("run_key.json")), "the training's start")
    training[0].send_signal(signal.SIGKILL)
    run.join(timeout=120)
    failure = step_failure(outcome["result"])
    assert "the reward_model training process was killed by signal 9 (SIGKILL) (a kill -9, or the kernel's OOM " \
           "killer); its last line: reward model on cpu: training needs about" in failure  # the memory it estimated


@pytest.mark.slow
def test_a_kill_9_of_the_run_worker_takes_every_training_process_with_it(tmp_path, tiny_backbone):
    with_pairs(tmp_path)
    config = reward_model_run_config(tiny_backbone, epochs=500.0, processes=2, checkpoint_minutes=0)
    worker = subprocess.Popen([str(Path(sys.executable).with_name("dagster")), "asset", "materialize", "-m",
                               "orchrm_dagster.definitions", "--select", "reward_model", "--config-json",
                               json.dumps(config)], stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.err", "w"))
    try:
        parallel = _wait_for(lambda: [p for p in [descendants(worker.pid, DATA_PARALLEL)] if len(p) == 2],
                             "two data-parallel processes", timeout_s=300)[0]
        _wait_for(lambda: list(Path(os.environ["ORCHRM_STORAGE"]).rglob("checkpoint-*")), "a trainer checkpoint",
                  timeout_s=300)
        family = psutil.Process(worker.pid).children(recursive=True)
        assert descendants(worker.pid, TRAINING) and len(family) >= 4  # training, launcher, two processes
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        _wait_for(lambda: all(gone(p) for p in family), "every training process to die", timeout_s=20)
        assert all(gone(p) for p in parallel)
    finally:
        for process in psutil.Process().children(recursive=True):
            process.kill()


def _wait_for(found, what: str, timeout_s: float = 180):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout_s} s for {what}")


def test_a_process_watching_its_owner_dies_with_it(tmp_path):
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        environ = owned_env({**os.environ, OWNERS_ENV: ""})
        environ[OWNERS_ENV] += f",{owner.pid}:{started_at(owner.pid)!r}"
        watcher = subprocess.Popen([sys.executable, "-c", "from orchrm_dagster.processes import watch_owners; "
                                    "import time; watch_owners(0.1); time.sleep(60)"], env=environ)
        time.sleep(1.5)
        assert watcher.poll() is None  # its owners live
        owner.kill()
        owner.wait()
        assert watcher.wait(timeout=10) == -signal.SIGKILL
    finally:
        owner.kill()


def test_a_reused_pid_is_not_its_owner():
    started = started_at(os.getpid())
    assert owner_alive(os.getpid(), started) and not owner_alive(os.getpid(), started - 5.0)


LAUNCHER_TAIL = """Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 11)
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 12)
""".splitlines()


def test_a_data_parallel_failure_leads_with_the_process_that_failed_first(tmp_path):
    (tmp_path / "error-rank0.txt").write_text("RuntimeError: Connection closed by peer")
    assert failure_cause(str(tmp_path), LAUNCHER_TAIL, 2, 1) == (
        "process 1 of 2 was killed by signal 9 (SIGKILL) (a kill -9, or the kernel's OOM killer); then process 0 of "
        "2: RuntimeError: Connection closed by peer")
    (tmp_path / "error-rank0.txt").unlink()
    (tmp_path / "error-rank1.txt").write_text("ValueError: bad pair")
    assert failure_cause(str(tmp_path), ["Root Cause", "  rank : 1", "  exitcode : 1 (pid: 12)"], 2, 1) == (
        "process 1 of 2: ValueError: bad pair")


def test_a_killed_process_leads_even_when_the_launcher_saw_the_one_it_took_down_first(tmp_path):
    """Both ended within one of the launcher's polls: it names the survivor that failed on losing its peer the root
    cause, and lists the killed one among the others."""
    tail = """Failures:
[1]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 12)
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 11)
""".splitlines()
    (tmp_path / "error-rank0.txt").write_text("RuntimeError: Connection closed by peer")
    assert failure_cause(str(tmp_path), tail, 2, 1) == (
        "process 1 of 2 was killed by signal 9 (SIGKILL) (a kill -9, or the kernel's OOM killer); then process 0 of "
        "2: RuntimeError: Connection closed by peer")


def test_how_a_process_ended_in_words():
    assert how_it_ended(1) == "exited with code 1"
    assert how_it_ended(-9) == "was killed by signal 9 (SIGKILL) (a kill -9, or the kernel's OOM killer)"
    assert how_it_ended(-15) == "was killed by signal 15 (SIGTERM)"


def test_the_failure_names_how_it_ended_and_the_last_line(tmp_path):
    log = tmp_path / "training.log"
    log.write_text("reward model: training\nsaving\n\n")
    assert training_failure("reward_model", "External execution process failed with code -9", str(log)) == (
        "the reward_model training process was killed by signal 9 (SIGKILL) (a kill -9, or the kernel's OOM "
        "killer); its last line: saving")
    assert training_failure("grpo_round", "External execution process failed with code 2", str(tmp_path / "none")) \
        == "the grpo_round training process exited with code 2; it logged nothing"


def test_the_k8s_training_pod_runs_the_same_command_with_the_gpus_of_its_config():
    from dagster_k8s.pipes import build_pod_body

    body = build_pod_body(pod_name="training", image="orchrm:1", command=training_command_in_pod(), env_vars={},
                          base_pod_meta=None, base_pod_spec=training_pod_spec(4))
    container = body.spec.containers[0]
    assert container.command == ["python", "-m", TRAINING]
    assert container.resources.limits == {"nvidia.com/gpu": "4"}
    assert body.spec.node_selector == {"orchrm.ai/pool": "gpu"}
    assert training_pod_spec(0) == {}  # a CPU training asks for no GPU node
