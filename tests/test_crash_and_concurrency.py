"""Faults on one machine, driven through the CLI in real processes: kill -9 at random points of an ingest, a pairs
build and a reward-model training, then the same command again (every count exact, nothing lost or doubled); a
killed run's pool slot; two ingests at once, an ingest while queries read, pairs while an ingest writes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from orchrm_dagster.synthetic import generate_runs, write_jsonl
from tests.conftest import gone

pytestmark = pytest.mark.slow
ORCHRM = [sys.executable, "-m", "orchrm_dagster.app.cli"]


def cli(*args, timeout=600, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run([*ORCHRM, *args], capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def start(*args) -> subprocess.Popen:
    return subprocess.Popen([*ORCHRM, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=os.environ.copy())


def scalar(statement: str) -> int:
    return next(iter(json.loads(cli("query", "--format", "json", statement).stdout)[0].values()))


def batch(tmp_path: Path, name: str, n: int, seed: int) -> Path:
    path = tmp_path / name
    write_jsonl(generate_runs(n, seed=seed), path)
    return path


def kill_after(process: subprocess.Popen, seconds: float) -> list[psutil.Process] | None:
    """SIGKILL after `seconds`, returning the processes it had started; None when it finished first."""
    try:
        process.wait(timeout=seconds)
        return None
    except subprocess.TimeoutExpired:
        family = psutil.Process(process.pid).children(recursive=True)
        process.send_signal(signal.SIGKILL)
        process.wait()
        return family


def assert_they_die(processes: list[psutil.Process] | None, within_s: float = 20) -> None:
    """Every one of `processes` (a killed command's) is gone, or a zombie, within `within_s`."""
    deadline = time.monotonic() + within_s
    alive = list(processes or [])
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in alive if not gone(p)]
    assert not alive, f"outlived the command that started them: {[' '.join(p.cmdline()[-2:]) for p in alive]}"


def test_kill_9_anywhere_in_an_ingest_then_again_counts_exactly(tmp_path):
    big = batch(tmp_path, "big.jsonl", 40_000, 1)
    rng = random.Random(7)
    for attempt in range(2):
        assert_they_die(kill_after(start("ingest", str(big)), rng.uniform(4.0, 14.0)))  # its ingest workers too
        # the killed run held the 'warehouse' pool's only slot: the next command must not wait forever for it
        cli("ingest", str(big), timeout=300)
        assert scalar("select count(*) n from runs") == 40_000
        assert scalar("select count(distinct run_id) n from runs") == 40_000
        assert scalar("select count(*) n from labels") == 40_000


def test_kill_9_anywhere_in_an_ingest_of_a_batch_of_many_files_then_again_counts_exactly(tmp_path):
    """40 files of 1,000 runs dropped by a fleet and cut into one batch: its ingest (the files shared out among
    worker processes) killed at random points, then run again: every run once, every label, nothing quarantined."""
    from orchrm_dagster.storage import NewBatch, StorageRoot, register_batches

    from .conftest import drop

    root = StorageRoot(os.environ["ORCHRM_STORAGE"])
    names = [drop(root, batch(tmp_path, f"worker-{i:02d}.jsonl", 1000, 100 + i)) for i in range(40)]
    register_batches(root, [NewBatch("fleet", tuple(names), True)])
    rng = random.Random(11)
    for attempt in range(2):
        assert_they_die(kill_after(start("reingest", "fleet"), rng.uniform(4.0, 14.0)))
        cli("reingest", "fleet", timeout=300)
        assert scalar("select count(*) n from runs") == 40_000
        assert scalar("select count(distinct run_id) n from runs") == 40_000
        assert scalar("select count(distinct source_file) n from runs") == 40
        assert scalar("select count(*) n from quarantine") == 0
        assert scalar("select count(*) n from labels") == 40_000


def test_kill_9_in_a_pairs_build_then_again_gives_the_same_pairs(tmp_path):
    cli("ingest", str(batch(tmp_path, "history.jsonl", 20_000, 2)))
    cli("materialize", "pairs")
    reference = json.loads(cli("query", "--format", "json",
                               "select count(*) n, min(pair_id) lo, max(pair_id) hi from pairs").stdout)
    for delay in (2.5, 4.5):
        kill_after(start("materialize", "pairs"), delay)
        assert json.loads(cli("query", "--format", "json",
                              "select count(*) n, min(pair_id) lo, max(pair_id) hi from pairs").stdout) == reference
        cli("materialize", "pairs")
        assert json.loads(cli("query", "--format", "json",
                              "select count(*) n, min(pair_id) lo, max(pair_id) hi from pairs").stdout) == reference


def test_kill_9_in_a_reward_model_training_resumes_from_its_last_step(tmp_path):
    cli("ingest", str(batch(tmp_path, "history.jsonl", 2400, 3)))
    cli("materialize", "pairs")
    config = tmp_path / "rm.yaml"
    config.write_text(json.dumps({"ops": {"reward_model": {"config": {"max_train_pairs": 256, "checkpoint_minutes": 0,
                                                                      "batch_size": 8, "max_length": 128}}}}))
    storage = Path(os.environ["ORCHRM_STORAGE"])
    training = start("materialize", "reward_model", "--config", str(config))
    deadline = time.monotonic() + 300
    while not list(storage.glob("checkpoints/rm/v0001/checkpoint-*")) and time.monotonic() < deadline:
        time.sleep(0.5)
    saved = sorted(int(p.name.split("-")[1]) for p in storage.glob("checkpoints/rm/v0001/checkpoint-*"))
    assert saved, "no trainer checkpoint was saved before the deadline"
    kill_after(training, 1.0)
    assert not (storage / "checkpoints/rm/v0001/manifest.json").exists()  # the version is unfinished
    cli("materialize", "reward_model", "--config", str(config))
    manifest = json.loads((storage / "checkpoints/rm/v0001/manifest.json").read_text())
    assert manifest["version"] == 1 and not (storage / "checkpoints/rm/v0002").exists()  # resumed, not redone
    assert scalar("select count(*) n from rm_checkpoints") == 1


def test_two_ingests_at_once_and_queries_throughout(tmp_path):
    first, second = batch(tmp_path, "one.jsonl", 15_000, 4), batch(tmp_path, "two.jsonl", 15_000, 5)
    cli("ingest", str(batch(tmp_path, "seed.jsonl", 100, 6)))
    processes = [start("ingest", str(first)), start("ingest", str(second))]
    reads = 0
    while any(p.poll() is None for p in processes):
        assert scalar("select count(*) n from runs") >= 100  # the warehouse stays readable
        reads += 1
    assert [p.returncode for p in processes] == [0, 0] and reads > 0
    assert scalar("select count(*) n from runs") == 30_100 and scalar("select count(*) n from labels") == 30_100


def test_pairs_while_an_ingest_writes(tmp_path):
    cli("ingest", str(batch(tmp_path, "history.jsonl", 10_000, 7)))
    ingest = start("ingest", str(batch(tmp_path, "more.jsonl", 20_000, 8)))
    cli("materialize", "pairs")
    assert ingest.wait(timeout=600) == 0
    cli("materialize", "pairs")
    assert scalar("select count(*) n from runs") == 30_000
    assert scalar("select count(*) n from pairs p join runs c on c.run_id = p.chosen_run_id") == \
        scalar("select count(*) n from pairs")
