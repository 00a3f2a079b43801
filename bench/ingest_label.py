"""Ingest and label a generated batch of N runs with 1-3 KB plans; print runs/s and peak RSS.

    .venv/bin/python bench/ingest_label.py [--runs 1000000] [--bad-every 1000]

The batch is generated once into bench/out/ (reused on later runs). Ingestion and labeling run in a child
process so that its peak RSS is theirs alone.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import tempfile
import time
from pathlib import Path

import orjson

from orchrm_dagster.synthetic import generate_runs

OUT = Path(__file__).parent / "out"


def make_batch(n: int, bad_every: int) -> Path:
    path = OUT / f"runs_{n}.jsonl"
    if path.exists():
        return path
    OUT.mkdir(exist_ok=True)
    started = time.perf_counter()
    tmp = path.with_suffix(".part")
    with open(tmp, "wb") as out:
        for i, record in enumerate(generate_runs(n, seed=11)):
            out.write(b'{"run_id": "broken' if bad_every and i % bad_every == bad_every - 1 else orjson.dumps(record))
            out.write(b"\n")
    tmp.rename(path)
    print(f"generated {n:,} runs ({path.stat().st_size / 2**30:.2f} GiB) in {time.perf_counter() - started:.0f} s")
    return path


def ingest_and_label(batch: str, root_dir: str, queue) -> None:
    from orchrm_dagster.ingest.batch import ingest_batch
    from orchrm_dagster.labels.batch import label_batch
    from orchrm_dagster.problems import load_problems, problem_sources, reference_answers
    from orchrm_dagster.storage.root import StorageRoot

    root = StorageRoot(root_dir)
    batch_id = Path(batch).name  # read in place: no copy of a multi-GB file into the landing zone
    ingest = ingest_batch(root, batch_id, batch)
    references = reference_answers(load_problems(problem_sources([])).table)
    labels = label_batch(root, batch_id, references)
    queue.put((ingest, labels))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--bad-every", type=int, default=1000, help="every Nth line is malformed (0: none)")
    args = parser.parse_args()
    batch = make_batch(args.runs, args.bad_every)
    with tempfile.TemporaryDirectory(prefix="orchrm-bench-") as root_dir:
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        child = ctx.Process(target=ingest_and_label, args=(str(batch), root_dir, queue))
        child.start()
        while child.is_alive() and queue.empty():
            child.join(timeout=1)
        if queue.empty():
            raise SystemExit(f"the ingest/label process failed (exit code {child.exitcode}); see its traceback above")
        ingest, labels = queue.get()
        child.join()
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    size_gib = batch.stat().st_size / 2**30
    print(f"batch: {ingest.lines_read:,} lines, {size_gib:.2f} GiB")
    print(f"ingest: {ingest.runs_written:,} runs + {ingest.quarantined:,} quarantined in {ingest.seconds:.1f} s "
          f"= {ingest.lines_read / ingest.seconds:,.0f} runs/s ({size_gib * 1024 / ingest.seconds:.0f} MiB/s)")
    print(f"label:  {labels.labeled:,} labels ({labels.correct / max(labels.labeled, 1):.1%} correct, "
          f"{labels.disagreements:,} disagreements with the producer) in {labels.seconds:.1f} s "
          f"= {labels.runs / labels.seconds:,.0f} runs/s")
    total = ingest.seconds + labels.seconds
    print(f"total:  {ingest.lines_read / total:,.0f} runs/s end to end; peak RSS {peak_mib:,.0f} MiB")


if __name__ == "__main__":
    main()
