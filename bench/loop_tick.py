"""What a tick of the loop costs against the number of files ever landed: `read_state` (what the loop sensor reads
from the storage root), `decide` and the `batch_ingested` check states the sensor reports (`unclean_batch_states`;
`batch_states` of every batch in a tree without it), on a root holding N landed files, all ingested. Prints, per layout and N, the first tick in a fresh process, the median of the next ticks with
nothing new, and a tick right after one more file landed.

    .venv/bin/python bench/loop_tick.py --files 1000 10000 100000
    PYTHONPATH=/tmp/before .venv/bin/python bench/loop_tick.py --layouts files   # the tree before batches of files

Layouts: `files`, each landed file a batch of its own (the layout before batches held several files: a `_SOURCE`
pointer a batch); `batches`, the files in batches of --per-batch (as the loop cuts a fleet's files: `_SOURCES` a
batch). The tables' pointer files are written as ingest writes them, without Parquet parts: a tick reads none. A
tree with the batch index rebuilds it from them on its first read (the first tick).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build(root: Path, files: int, layout: str, per_batch: int) -> None:
    landing = root / "landing"
    landing.mkdir(parents=True)
    names = [f"worker-{i % 64:02d}-{i:07d}.jsonl" for i in range(files)]
    fingerprints = {}
    for name in names:
        path = landing / name
        path.write_bytes(b"{}\n")
        stat = path.stat()
        fingerprints[name] = f"{stat.st_size}:{stat.st_mtime}"  # as the landing listing fingerprints a file
    groups = ([(name, [name]) for name in names] if layout == "files" else
              [(f"landed-bench-{i // per_batch:05d}", names[i:i + per_batch]) for i in range(0, files, per_batch)])
    generation = f"g{time.time_ns():020d}-bench000"
    for batch, members in groups:
        for table in ("runs", "labels"):
            folder = root / "tables" / table / f"batch_id={batch}"
            (folder / generation).mkdir(parents=True)
            (folder / "_CURRENT").write_text(generation)
        runs = root / "tables" / "runs" / f"batch_id={batch}"
        if layout == "files":
            (runs / "_SOURCE").write_text(fingerprints[members[0]])
        else:
            (runs / "_SOURCES").write_text(json.dumps({"files": {n: fingerprints[n] for n in members}, "failed": {}}))
    landed = time.time() - 60  # the files landed a while ago: nothing is landing as the ticks run
    os.utime(landing, (landed, landed))


def measure(root: str, repeat: int) -> dict:
    """In a fresh process: the first tick, the next ticks with nothing new, and one after a file landed."""
    from orchrm_dagster import loop
    from orchrm_dagster.storage import StorageRoot

    storage = StorageRoot(root)
    settings = loop.LoopSettings()
    # the check states the sensor reports: those of the batches not cleanly ingested where the tree has that
    check_states = getattr(loop, "unclean_batch_states", loop.batch_states)

    def tick() -> tuple[float, object]:
        started = time.perf_counter()
        state = loop.read_state(storage)
        decision = loop.decide(state, settings)
        check_states(state)
        return time.perf_counter() - started, (state, decision)

    first, (state, _) = tick()
    assert all(b.ingested for b in state.batches) and not getattr(state, "pending", ()), "not all ingested"
    batches = len(state.batches)
    warm = [tick()[0] for _ in range(repeat)]
    new = Path(root, "landing", "late-arrival.jsonl")
    new.write_bytes(b"{}\n")
    after_landing, (state, decision) = tick()
    new.unlink()
    assert any(s.kind == "ingest" for s in decision.steps) or decision.waiting, "the new file was not seen"
    return {"first": first, "warm": statistics.median(warm), "after_landing": after_landing,
            "batches": batches}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--layouts", nargs="+", default=["files", "batches"], choices=["files", "batches"])
    parser.add_argument("--per-batch", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.repeat)))
        return
    import orchrm_dagster

    print(f"tree {Path(orchrm_dagster.__file__).parents[1]}; load average before: {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    print(f"{'layout':>8} {'files':>8} {'batches':>8} {'first tick s':>13} {'tick, nothing new s':>20} "
          f"{'tick after a landing s':>23}")
    for layout in args.layouts:
        for files in args.files:
            with tempfile.TemporaryDirectory(prefix="orchrm-tick-") as tmp:
                root = Path(tmp) / "storage"
                build(root, files, layout, args.per_batch)
                env = {**os.environ, "ORCHRM_STORAGE": str(root), "DAGSTER_HOME": f"{tmp}/dagster_home"}
                done = subprocess.run([sys.executable, __file__, "--measure", str(root), "--repeat", str(args.repeat)],
                                      env=env, capture_output=True, text=True)
                if done.returncode:
                    print(f"{layout:>8} {files:>8} failed: {done.stderr.strip().splitlines()[-1]}")
                    continue
                result = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"{layout:>8} {files:>8} {result['batches']:>8} {result['first']:>13.3f} "
                      f"{result['warm']:>20.4f} {result['after_landing']:>23.3f}", flush=True)


if __name__ == "__main__":
    main()
