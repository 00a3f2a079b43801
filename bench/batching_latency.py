"""What the loop's batching costs a stream of landed files: each file's wait from landing to its batch's cut (the
start of its ingest), and the batches (run_batches partitions, ingest runs) a day, for `loop.batching.interval_s` at
its default (1800 s) and at a 2-minute cut, under several arrival patterns. The cut is the engine's own rule
(`orchrm_dagster.loop.cut_batches`), asked at every tick of the loop's sensor (30 s) over a simulated day: exact for
the rule, no file system involved. What follows the cut (ingest, the champion's scores) is measured by the soak
(`bench/soak.py`): landing -> scores is this wait plus that.

    .venv/bin/python bench/batching_latency.py
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchrm_dagster.loop import BatchingSettings, cut_batches  # noqa: E402
from orchrm_dagster.storage import LandedFile  # noqa: E402

TICK_S = 30.0  # assets/sensors.py LOOP_SENSOR_INTERVAL_S
DAY_S = 86_400.0
PATTERNS = {  # name -> seconds between two files landing (each a small file of runs)
    "a file every 6 s (a fleet's writers)": 6.0,
    "a file every 2 min (the issue's stream)": 120.0,
    "a file every 20 min (a trickle)": 1200.0,
}


def simulate(every_s: float, settings: BatchingSettings, span_s: float = DAY_S) -> tuple[list[float], int]:
    """(each file's wait from landing to its cut, batches cut) over `span_s` of files landing every `every_s`."""
    pending: list[LandedFile] = []
    paced: list[float] = []
    waits, batches = [], 0
    next_file, number, now = 0.0, 0, 0.0
    while now <= span_s:
        while next_file <= now and next_file <= span_s:
            pending.append(LandedFile(f"f{number:06d}.jsonl", "", 20_000, str(number), next_file))
            number, next_file = number + 1, next_file + every_s
        cut = cut_batches(pending, paced, now, settings)
        taken = {name for batch in cut.batches for name in batch.files}
        for batch in cut.batches:
            batches += 1
            if batch.paced:
                paced.append(now)
        waits += [now - f.landed_at for f in pending if f.name in taken]
        pending = [f for f in pending if f.name not in taken]
        now += TICK_S
    return waits, batches


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--intervals", default="1800,120", help="interval_s values to compare")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; the engine's cut rule over a simulated day, the sensor ticking every {TICK_S:g} s")
    print("| arrivals | interval_s | batches a day | wait landing -> cut p50 | p95 | max |")
    print("|---|---|---|---|---|---|")
    for name, every in PATTERNS.items():
        for interval in (float(x) for x in args.intervals.split(",")):
            waits, batches = simulate(every, BatchingSettings(interval_s=interval))
            print(f"| {name} | {interval:g} | {batches} | {percentile(waits, 0.5) / 60:.1f} min | "
                  f"{percentile(waits, 0.95) / 60:.1f} min | {max(waits) / 60:.1f} min |")


if __name__ == "__main__":
    main()
