"""A fleet's landing pattern through the real daemon: FILES files of RUNS runs each dropped into the landing zone at
once, then the same runs in one file, each on a fresh storage root and DAGSTER_HOME with `dagster-daemon run` and
nothing else (the daemon test's code location: tiny models, sensors every 5 s). Prints, for each drop, the wall time
from the drop to the end of the last ingest run (every run ingested and labeled), the ingest runs the loop
launched, the `run_batches` partitions, the runs and labels in the tables, and the load average.

    .venv/bin/python bench/landing_fleet.py --files 60 --runs 10
    .venv/bin/python bench/landing_fleet.py --files 2000 --runs 5 --timeout 900
    PYTHONPATH=/tmp/before .venv/bin/python bench/landing_fleet.py --tree /tmp/before   # another tree (before)

It uses only what every tree has (the landing folder, the Dagster instance, the tables' Parquet files), so the same
script measures the tree before batches of files and the tree after. A drop that is not done by --timeout prints
how far it got.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--runs", type=int, default=10, help="runs per file")
    parser.add_argument("--tree", type=Path, default=REPO, help="the source tree the daemon serves")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds a drop may take")
    parser.add_argument("--skip-one-file", action="store_true", help="only the drop of many files")
    args = parser.parse_args()
    tree = args.tree.resolve()
    sys.path.insert(0, str(tree))
    from orchrm_dagster.synthetic import generate_runs, write_jsonl

    from tests.tiny_models import make_tiny_backbone, make_tiny_policy

    # a daemon child may still be writing in the folder as it is removed
    with tempfile.TemporaryDirectory(prefix="orchrm-fleet-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        tiny = (make_tiny_policy(work / "policy"), make_tiny_backbone(work / "rm"))
        files = []
        for index in range(args.files):  # distinct run ids: a seed a file
            path = work / "drop" / f"worker-{index % 16:02d}-{index:05d}.jsonl"
            path.parent.mkdir(exist_ok=True)
            write_jsonl(generate_runs(args.runs, seed=10_000 + index, benchmarks=("gsm8k_test",)), path)
            files.append(path)
        one = work / "one" / "all_runs.jsonl"
        one.parent.mkdir()
        with open(one, "wb") as out:
            for path in files:
                out.write(path.read_bytes())
        print(f"tree {tree}; {os.cpu_count()} CPUs; load average before: {os.getloadavg()[0]:.1f}", flush=True)
        print(f"{'drop':>24} {'files':>6} {'runs':>7} {'wall s':>8} {'ingest runs':>12} {'partitions':>11} "
              f"{'runs in':>8} {'labeled':>8} {'load':>5}", flush=True)
        drops = [(f"{args.files} files x {args.runs} runs", files)]
        if not args.skip_one_file:
            drops.append((f"one file x {args.files * args.runs} runs", [one]))
        for label, drop in drops:
            result = measure(work / label.replace(" ", "_"), tree, tiny, drop, args.files * args.runs, args.timeout)
            print(f"{label:>24} {len(drop):>6} {args.files * args.runs:>7} {result['wall']:>8.1f} "
                  f"{result['ingest_runs']:>12} {result['partitions']:>11} {result['runs']:>8} {result['labeled']:>8} "
                  f"{os.getloadavg()[0]:>5.1f}" + ("" if result["done"] else "   (timed out: not all labeled)"),
                  flush=True)


def measure(work: Path, tree: Path, tiny, drop: list[Path], expected: int, timeout: float) -> dict:
    storage, home = work / "storage", work / "dagster_home"
    workspace = work / "workspace.yaml"
    work.mkdir(parents=True)
    workspace.write_text(f"load_from:\n  - python_file:\n      relative_path: {tree / 'tests/daemon_location.py'}\n"
                         f"      working_directory: {tree}\n      location_name: orchrm\n")
    env = {**os.environ, "ORCHRM_STORAGE": str(storage), "DAGSTER_HOME": str(home), "PYTHONPATH": str(tree),
           "ORCHRM_TEST_TINY_POLICY": tiny[0], "ORCHRM_TEST_TINY_BACKBONE": tiny[1], "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    os.environ["ORCHRM_STORAGE"], os.environ["DAGSTER_HOME"] = str(storage), str(home)
    from orchrm_dagster.app.instance import cli_instance

    instance = cli_instance()  # as any orchrm command creates it, before the daemon races on a bare home
    with open(work / "daemon.log", "w") as log:
        daemon = subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", str(workspace)],
                                  env=env, cwd=tree, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_for_first_tick(instance, daemon)
            landing = storage / "landing"
            landing.mkdir(parents=True, exist_ok=True)
            started = time.time()
            for path in drop:  # as `cp` of a finished file under a hidden name, then a rename, lands it
                hidden = landing / f".{path.name}.part"
                shutil.copyfile(path, hidden)
                os.rename(hidden, landing / path.name)
            done = False
            while time.time() - started < timeout and daemon.poll() is None:
                if _labeled(storage) >= expected and not _ingest_runs(instance, unfinished=True):
                    done = True
                    break
                time.sleep(2)
            runs = _ingest_runs(instance)
            ends = [r.end_time for r in runs if r.end_time]
            return {"wall": (max(ends) - started) if done and ends else time.time() - started, "done": done,
                    "ingest_runs": len(runs), "partitions": len(instance.get_dynamic_partitions("run_batches")),
                    "runs": _rows(storage, "runs"), "labeled": _labeled(storage)}
        finally:
            os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)


def _wait_for_first_tick(instance, daemon, timeout: float = 300.0) -> None:
    """Until the loop sensor has ticked once (the code location is loaded and the daemon is evaluating it)."""
    from dagster._core.scheduler.instigation import InstigatorType

    deadline = time.time() + timeout
    while time.time() < deadline:
        if daemon.poll() is not None:
            raise RuntimeError("the daemon exited before its first tick")
        for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
            if state.name == "loop_sensor" and instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1):
                return
        time.sleep(1)
    raise RuntimeError("the loop sensor did not tick")


def _ingest_runs(instance, unfinished: bool = False):
    import dagster as dg

    statuses = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
                dg.DagsterRunStatus.STARTED] if unfinished else None
    return instance.get_run_records(dg.RunsFilter(job_name="ingest_run_batch", statuses=statuses))


def _labeled(storage: Path) -> int:
    return _rows(storage, "labels")


def _rows(storage: Path, table: str) -> int:
    """Rows of a table's current parts (read from the Parquet footers, as every tree writes them)."""
    import pyarrow.parquet as pq

    folder = storage / "tables" / table
    if not folder.exists():
        return 0
    total = 0
    for batch in folder.iterdir():
        if not batch.name.startswith("batch_id="):
            continue
        current = batch / "_CURRENT"
        parts_dir = batch / current.read_text().strip() if current.exists() else batch
        for part in parts_dir.glob("*.parquet") if parts_dir.exists() else ():
            try:
                total += pq.ParquetFile(part).metadata.num_rows
            except (OSError, ValueError):  # replaced meanwhile
                pass
    return total


if __name__ == "__main__":
    main()
