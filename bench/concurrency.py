"""The cost of the single-writer rule: N concurrent `orchrm ingest` processes, each of a 100,000-run file (N = 1, 2,
4), on one storage root and one Dagster instance. Prints wall time, total throughput and any error.

    .venv/bin/python bench/concurrency.py [--runs 100000]

Each ingest stages and validates its file in parallel with the others; the de-duplication against every other
batch and the publication take the storage root's lock one ingest at a time, and steps in the 'warehouse' pool run
one at a time (the instance's limit), so what N buys is bounded by those sections.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchrm_dagster.synthetic import generate_runs, write_jsonl  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    args = parser.parse_args()
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    files = []
    for i in range(4):
        path = out / f"concurrency_{args.runs}_{i}.jsonl"
        if not path.exists():
            write_jsonl(generate_runs(args.runs, seed=100 + i), path)
        files.append(path)
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'N':>3} {'wall s':>8} {'runs/s total':>13} {'errors':>7}")
    for n in (1, 2, 4):
        with tempfile.TemporaryDirectory(prefix="orchrm-concurrency-") as tmp:
            env = {**os.environ, "ORCHRM_STORAGE": f"{tmp}/storage", "DAGSTER_HOME": f"{tmp}/dagster_home"}
            started = time.perf_counter()
            processes = [subprocess.Popen([sys.executable, "-m", "orchrm_dagster.app.cli", "ingest", str(path)],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                         for path in files[:n]]
            outputs = [p.communicate()[0] for p in processes]
            seconds = time.perf_counter() - started
            errors = [o.strip().splitlines()[-1] for p, o in zip(processes, outputs) if p.returncode]
            count = subprocess.run([sys.executable, "-m", "orchrm_dagster.app.cli", "query", "--format", "csv",
                                    "select count(*) from runs"], env=env, capture_output=True, text=True)
            runs = int(count.stdout.splitlines()[-1]) if count.returncode == 0 else -1
            print(f"{n:>3} {seconds:8.1f} {runs / seconds:13,.0f} {len(errors):>7}   runs landed {runs:,} of "
                  f"{n * args.runs:,}" + (f"; {errors}" if errors else ""))


if __name__ == "__main__":
    main()
