"""Ingest and label a generated batch of N runs with 1-3 KB plans; print runs/s and peak RSS.

    .venv/bin/python bench/ingest_label.py [--runs 1000000] [--bad-every 1000]
    .venv/bin/python bench/ingest_label.py --compare [--runs 100000] [--repeat 3]

--compare times, side by side on the same file, DuckDB's own `COPY (SELECT * FROM read_json(...)) TO '...parquet'`
(the floor: parse and write, no contract) and `ingest_batch` (parse, validate, quarantine, write), alternating
the two `--repeat` times so a loaded machine weighs on both alike, and prints each best time and their ratio.

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


def _cpu_seconds() -> float:
    # this process and its finished children (ingest's worker processes): CPU time, which a loaded machine
    # disturbs far less than wall time
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(work) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), _cpu_seconds()
    work()
    wall = time.perf_counter() - wall
    while multiprocessing.active_children():  # ingest returns while its finished workers exit: count their CPU too
        time.sleep(0.01)
    return wall, _cpu_seconds() - cpu


def time_duckdb(batch: Path, out_dir: str, threads: int | None) -> tuple[float, float]:
    import duckdb

    config = {"threads": threads} if threads else {}
    with duckdb.connect(config=config) as con:
        # ignore_errors: the floor skips the malformed lines, as ingest quarantines them
        return timed(lambda: con.execute(
            f"COPY (SELECT * FROM read_json('{batch}', format='newline_delimited', ignore_errors=true)) "
            f"TO '{out_dir}/duckdb.parquet' (FORMAT parquet, COMPRESSION zstd)"))


def time_ingest(batch: Path, root_dir: str, index: int) -> tuple[float, float]:
    from orchrm_dagster.ingest.batch import ingest_batch
    from orchrm_dagster.storage.root import StorageRoot

    # a fresh root each round: a first ingest every time (in one root, round 2 would find every run_id already
    # ingested by round 1 and quarantine the whole batch as duplicates, another workload)
    with tempfile.TemporaryDirectory(prefix=f"round{index}-", dir=root_dir) as fresh:
        return timed(lambda: ingest_batch(StorageRoot(fresh), "bench", str(batch)))


def compare(batch: Path, repeat: int, threads: int | None) -> None:
    import pyarrow as pa

    pa.array([0])  # pyarrow imports pandas on its first conversion: not a cost of either side
    lines = sum(1 for _ in open(batch, "rb"))
    duck, ours = [], []
    with tempfile.TemporaryDirectory(prefix="orchrm-bench-") as root_dir:
        for i in range(repeat):
            duck.append(time_duckdb(batch, root_dir, threads))
            ours.append(time_ingest(batch, root_dir, i))
            print(f"  round {i + 1}: duckdb {duck[-1][0]:.2f} s ({duck[-1][1]:.2f} s CPU), "
                  f"ingest {ours[-1][0]:.2f} s ({ours[-1][1]:.2f} s CPU)")
    (duck_wall, duck_cpu), (ours_wall, ours_cpu) = _best(duck), _best(ours)
    print(f"batch: {lines:,} lines, {batch.stat().st_size / 2**20:.0f} MiB; best of {repeat}")
    print(f"duckdb read_json -> parquet: {duck_wall:.2f} s = {lines / duck_wall:,.0f} runs/s ({duck_cpu:.2f} s CPU)")
    print(f"orchrm ingest_batch:         {ours_wall:.2f} s = {lines / ours_wall:,.0f} runs/s ({ours_cpu:.2f} s CPU)")
    print(f"ratio ingest / duckdb: {ours_wall / duck_wall:.2f}x wall, {ours_cpu / duck_cpu:.2f}x CPU")


def _best(timings: list[tuple[float, float]]) -> tuple[float, float]:
    return min(wall for wall, _ in timings), min(cpu for _, cpu in timings)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--bad-every", type=int, default=1000, help="every Nth line is malformed (0: none)")
    parser.add_argument("--compare", action="store_true", help="time ingest against DuckDB read_json -> Parquet")
    parser.add_argument("--repeat", type=int, default=3, help="--compare: rounds, each timing both")
    parser.add_argument("--threads", type=int, default=None, help="--compare: DuckDB threads (default: all cores)")
    args = parser.parse_args()
    batch = make_batch(args.runs, args.bad_every)
    if args.compare:
        compare(batch, args.repeat, args.threads)
        return
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
