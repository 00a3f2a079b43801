"""Pair building on 1,000,000 runs with unique 1-3 KB plans: DuckDB build vs a pandas baseline vs a plain scan.

    .venv/bin/python bench/pairs.py [--runs 1000000] [--problems 60000] [--subset-runs 100000]

Side by side: (a) build_pairs on DuckDB views over the Parquet files, run in a child process for its peak RSS;
(b) a straightforward pandas implementation of the same rules, which hashes the plan texts itself as a naive
implementation would (ours reads the plan_hash column computed once at ingestion); it runs on a subset of
whole problems first and on the full set only when that would take under ~10 minutes and fit in memory,
otherwise its time is extrapolated linearly from the subset; on the subset both outputs are compared pair
for pair; (c) DuckDB reading every plan once and hashing it. The runs and labels Parquet files are generated
once into bench/out/ and reused: plans are pooled MAS-Orchestra-style bodies behind a per-run "Attempt N."
opener, so they are unique but compress ~20x, which makes the scan in (c) cheaper than on real plans.
Wall seconds depend on what else the host runs; CPU seconds (user + system of the process) are printed too.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import random
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from orchrm_dagster.contract import plan_hash
from orchrm_dagster.contract import PAIRS
from orchrm_dagster.pairs.rules import (CORRECT_OVER_INCORRECT, SPECIALIZED_OVER_BASE, PairRules, plan_salt,
                                        policy_side, rank_from_salts, split_for)
from orchrm_dagster.synthetic import random_plan_text

OUT = Path(__file__).parent / "out"
KINDS = np.array(["base", "specialized", "checkpoint"])
KIND_SHARES = (0.35, 0.40, 0.25)
CORRECT_RATE = {"base": 0.45, "specialized": 0.65, "checkpoint": 0.65}
UNLABELED_RATE = 0.05
CHUNK = 100_000
PANDAS_FULL_LIMIT_S = 600
PANDAS_FULL_LIMIT_RSS = 12 * 2**30  # and at most 60% of the memory available when it starts


# ---------------------------------------------------------------- data

# Only the runs/labels columns that pair building, the export and the scan read (not the full contract schema).
_RUNS = pa.schema([("run_id", pa.string()), ("problem_id", pa.string()), ("question", pa.string()),
                   ("policy_name", pa.string()), ("policy_kind", pa.string()), ("plan", pa.string()),
                   ("plan_hash", pa.string())])
_LABELS = pa.schema([("run_id", pa.string()), ("problem_id", pa.string()), ("is_correct", pa.bool_())])


def data_paths(runs: int) -> tuple[Path, Path]:
    return OUT / f"pairs_runs_{runs}.parquet", OUT / f"pairs_labels_{runs}.parquet"


def plan_pool(size: int = 4000) -> pa.Array:
    """Rendered plan bodies after their '<thinking>\\n' opener, sized so that a full plan is 1-3 KB."""
    rng = random.Random(5)
    bodies = []
    while len(bodies) < size:
        plan = random_plan_text(rng, rng.randint(2, 6))
        if 1000 <= len(plan) <= 2950:
            bodies.append(plan.removeprefix("<thinking>\n"))
    return pa.array(bodies)


def generate(runs: int, problems: int) -> tuple[Path, Path]:
    runs_path, labels_path = data_paths(runs)
    if runs_path.exists() and labels_path.exists():
        return runs_path, labels_path
    OUT.mkdir(exist_ok=True)
    started = time.perf_counter()
    rng = np.random.default_rng(11)
    problem_of_run = np.sort(rng.integers(0, problems, runs))  # problem-major, so a subset is whole problems
    pool = plan_pool()
    with pq.ParquetWriter(runs_path, _RUNS, compression="zstd") as run_writer, \
            pq.ParquetWriter(labels_path, _LABELS, compression="zstd") as label_writer:
        for start in range(0, runs, CHUNK):
            index = np.arange(start, min(start + CHUNK, runs))
            chunk_runs, chunk_labels = _chunk(rng, index, problem_of_run[index], pool)
            run_writer.write_table(chunk_runs)
            label_writer.write_table(chunk_labels)
    print(f"generated {runs:,} runs over {problems:,} problems in {time.perf_counter() - started:.0f} s "
          f"({runs_path.stat().st_size / 2**20:,.0f} MiB Parquet)")
    return runs_path, labels_path


def _chunk(rng: np.random.Generator, index: np.ndarray, problem: np.ndarray, pool: pa.Array):
    run_ids = pc.binary_join_element_wise("run-", pa.array(np.char.zfill(index.astype(str), 7)), "")
    problem_ids = pc.binary_join_element_wise("bench-", pa.array(np.char.zfill(problem.astype(str), 5)), "")
    questions = pc.binary_join_element_wise(
        "Problem ", problem_ids, ": a question long enough to look like a real one, about two hundred "
        "characters, asking for one number or one short entity at the end of a few sentences of setup.", "")
    kinds = KINDS[rng.choice(len(KINDS), len(index), p=KIND_SHARES)]
    # The run index makes every plan unique; the body comes from the pool.
    plans = pc.binary_join_element_wise("<thinking>\nAttempt ", pa.array(index.astype(str)), ". ",
                                        pool.take(rng.integers(0, len(pool), len(index))), "")
    hashes = pa.array([plan_hash(plan) for plan in plans.to_pylist()])
    # one policy per kind; the checkpoint is none this root promoted: its runs make correct-over-incorrect pairs only
    names = pa.array(np.char.add(kinds, "-policy"))
    runs = pa.table([run_ids, problem_ids, questions, names, pa.array(kinds), plans, hashes], schema=_RUNS)
    correct = rng.random(len(index)) < np.vectorize(CORRECT_RATE.get)(kinds)
    labeled = rng.random(len(index)) >= UNLABELED_RATE
    labels = pa.table([run_ids, problem_ids, pa.array(correct)], schema=_LABELS).filter(pa.array(labeled))
    return runs, labels


def subset_filter(problems: int, subset_runs: int, runs: int) -> str:
    """The first problem id outside a subset of whole problems holding about subset_runs runs."""
    return f"bench-{round(problems * subset_runs / runs):05d}"


# ---------------------------------------------------------------- (a) DuckDB


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def duckdb_build(runs_path: str, labels_path: str, out: str, below_problem: str | None) -> dict:
    import duckdb

    from orchrm_dagster.pairs import build_pairs

    with tempfile.TemporaryDirectory(prefix="orchrm-pairs-") as spill:
        con = duckdb.connect(config={"memory_limit": "2GB", "temp_directory": spill})
        con.execute("SET enable_progress_bar = false")
        where = f"WHERE problem_id < '{below_problem}'" if below_problem else ""
        # the warehouse view's default environment, as for a file written before the column
        con.execute(f"CREATE VIEW runs AS SELECT *, 'agents' AS environment FROM read_parquet('{runs_path}') {where}")
        con.execute(f"CREATE VIEW labels AS SELECT * FROM read_parquet('{labels_path}') {where}")
        cpu = cpu_seconds()
        stats = build_pairs(con, PairRules(), out)
    return {"stats": stats, "seconds": stats.seconds, "cpu": cpu_seconds() - cpu}


# ---------------------------------------------------------------- (b) pandas


def pandas_build(runs_path: str, labels_path: str, out: str, below_problem: str | None) -> dict:
    """The same rules in plain pandas, hashing the plan texts as it reads them."""
    import pandas as pd

    started, cpu = time.perf_counter(), cpu_seconds()
    rules = PairRules()
    filters = [("problem_id", "<", below_problem)] if below_problem else None
    runs = pd.read_parquet(runs_path, columns=["run_id", "problem_id", "policy_name", "policy_kind", "plan"],
                           filters=filters)
    runs["plan_hash"] = runs.pop("plan").map(plan_hash)
    labels = pd.read_parquet(labels_path, columns=["run_id", "is_correct"], filters=filters)
    agreed = labels.groupby("run_id")["is_correct"].agg(["all", "any"])
    agreed = agreed[agreed["all"] == agreed["any"]]["all"].rename("is_correct")
    runs = runs.merge(agreed, left_on="run_id", right_index=True, how="left")

    policies = runs[["policy_kind", "policy_name"]].drop_duplicates()
    sides = {(k, n): policy_side(k, n, ()) for k, n in zip(policies["policy_kind"], policies["policy_name"])}
    side = pd.Series(list(zip(runs["policy_kind"], runs["policy_name"])), index=runs.index).map(sides)
    runs["specialized_run"] = runs["run_id"].where(side.str[0])
    runs["base_run"] = runs["run_id"].where(side.str[1])
    runs["correct_run"] = runs["run_id"].where(runs["is_correct"] == True)  # noqa: E712 (NaN: unlabeled)
    runs["incorrect_run"] = runs["run_id"].where(runs["is_correct"] == False)  # noqa: E712
    side_runs = ["specialized_run", "base_run", "correct_run", "incorrect_run"]
    plans = runs.groupby(["problem_id", "plan_hash"], as_index=False)[side_runs].min()
    sides = plans[["problem_id", "plan_hash"]].copy()
    sides["salt"] = plans["plan_hash"].map(lambda h: plan_salt(rules.seed, h))
    for side, column in zip(("specialized", "base", "correct", "incorrect"), side_runs):
        sides[side] = plans[column].notna()

    pairs = sides.merge(sides, on="problem_id", suffixes=("_w", "_l"))
    pairs = pairs[pairs["plan_hash_w"] != pairs["plan_hash_l"]]
    coi = pairs["correct_w"] & pairs["incorrect_l"]
    sob = pairs["specialized_w"] & pairs["base_l"] & ~coi
    conflict = (pairs["specialized_l"] & pairs["base_w"]) | (pairs["correct_l"] & pairs["incorrect_w"])
    keep = ["problem_id", "plan_hash_w", "plan_hash_l", "salt_w", "salt_l"]
    candidates = pd.concat([pairs.loc[sob & ~conflict, keep].assign(source=SPECIALIZED_OVER_BASE),
                            pairs.loc[coi & ~conflict, keep].assign(source=CORRECT_OVER_INCORRECT)])
    del pairs
    candidates["rank"] = rank_from_salts(candidates["salt_w"].to_numpy("uint64"), candidates["salt_l"].to_numpy("uint64"))

    candidates = candidates.sort_values(["problem_id", "source", "rank", "plan_hash_w", "plan_hash_l"])
    candidates["problem_rank"] = candidates.groupby(["problem_id", "source"]).cumcount() + 1
    cap = candidates["source"].map({SPECIALIZED_OVER_BASE: rules.specialized_per_problem,
                                    CORRECT_OVER_INCORRECT: rules.correct_per_problem})
    capped = candidates[candidates["problem_rank"] <= cap]
    counts = capped["source"].value_counts()
    quotas = dict(zip((SPECIALIZED_OVER_BASE, CORRECT_OVER_INCORRECT),
                      rules.mix_quotas(int(counts.get(SPECIALIZED_OVER_BASE, 0)),
                                       int(counts.get(CORRECT_OVER_INCORRECT, 0)))))
    capped = capped.sort_values(["problem_rank", "rank", "plan_hash_w", "plan_hash_l", "problem_id"])
    mixed = capped[capped.groupby("source").cumcount() < capped["source"].map(quotas)]

    runs_w = plans.rename(columns=lambda c: c if c == "problem_id" else c + "_w")
    runs_l = plans.rename(columns=lambda c: c if c == "problem_id" else c + "_l")
    mixed = mixed.merge(runs_w, on=["problem_id", "plan_hash_w"]).merge(runs_l, on=["problem_id", "plan_hash_l"])
    is_sob = mixed["source"] == SPECIALIZED_OVER_BASE
    result = pd.DataFrame({
        "pair_id": [hashlib.md5(f"{w}:{l}:{p}".encode()).hexdigest()
                    for w, l, p in zip(mixed["plan_hash_w"], mixed["plan_hash_l"], mixed["problem_id"])],
        "problem_id": mixed["problem_id"],
        "chosen_run_id": mixed["specialized_run_w"].where(is_sob, mixed["correct_run_w"]),
        "rejected_run_id": mixed["base_run_l"].where(is_sob, mixed["incorrect_run_l"]),
        "chosen_plan_hash": mixed["plan_hash_w"],
        "rejected_plan_hash": mixed["plan_hash_l"],
        "source": mixed["source"],
    })
    split_of = {p: split_for(p, rules) for p in result["problem_id"].unique()}
    result["split"] = result["problem_id"].map(split_of)
    pq.write_table(pa.Table.from_pandas(result, schema=PAIRS, preserve_index=False), out)
    return {"seconds": time.perf_counter() - started, "cpu": cpu_seconds() - cpu, "pairs": len(result)}


# ---------------------------------------------------------------- (c) scan


def read_and_hash(runs_path: str) -> dict:
    import duckdb

    con = duckdb.connect(config={"memory_limit": "2GB"})
    con.execute("SET enable_progress_bar = false")
    started, cpu = time.perf_counter(), cpu_seconds()
    distinct = con.execute(f"SELECT count(DISTINCT md5(plan)) FROM read_parquet('{runs_path}')").fetchall()[0][0]
    return {"seconds": time.perf_counter() - started, "cpu": cpu_seconds() - cpu, "distinct": distinct}


# ---------------------------------------------------------------- (d) texts: Polars


def pair_texts_step(runs_path: str, pairs_path: str) -> dict:
    """What reward-model training reads: every pair with its question and both plan texts."""
    import polars as pl

    from orchrm_dagster.pairs import pair_texts

    started, cpu = time.perf_counter(), cpu_seconds()
    rows = pair_texts(pl.scan_parquet(pairs_path), pl.scan_parquet(runs_path)).collect().height
    return {"seconds": time.perf_counter() - started, "cpu": cpu_seconds() - cpu, "rows": rows}


def export_step(runs_path: str, pairs_path: str, out_jsonl: str) -> dict:
    import polars as pl

    from orchrm_dagster.pairs import export_published

    started, cpu = time.perf_counter(), cpu_seconds()
    rows = export_published(pl.scan_parquet(pairs_path), pl.scan_parquet(runs_path), out_jsonl)
    return {"seconds": time.perf_counter() - started, "cpu": cpu_seconds() - cpu, "rows": rows,
            "bytes": os.path.getsize(out_jsonl)}


def import_step(jsonl: str) -> dict:
    from orchrm_dagster.pairs import import_published

    started, cpu = time.perf_counter(), cpu_seconds()
    result = import_published(jsonl, PairRules())
    return {"seconds": time.perf_counter() - started, "cpu": cpu_seconds() - cpu, "rows": result.table.height,
            "rejected": len(result.rejected)}


# ---------------------------------------------------------------- harness


def _child_main(target, args, queue) -> None:
    result = target(*args)
    result["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    queue.put(result)


def in_child(target, *args, rss_limit: float | None = None) -> dict | None:
    """Run target in a fresh process; its result gains that process's peak RSS in bytes. With rss_limit, the
    child is stopped (and None returned) once its RSS passes the limit, so a baseline cannot exhaust the host."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_main, args=(target, args, queue))
    child.start()
    watched = psutil.Process(child.pid)
    while child.is_alive() and queue.empty():
        child.join(timeout=0.5)
        if rss_limit and child.is_alive() and watched.memory_info().rss > rss_limit:
            child.terminate()
            child.join()
            return None
    if queue.empty():
        raise SystemExit(f"{target.__name__} failed (exit code {child.exitcode}); see its traceback above")
    result = queue.get()
    child.join()
    return result


def same_pairs(left: str, right: str) -> bool:
    key = [("pair_id", "ascending"), ("source", "ascending")]
    return pq.read_table(left).cast(PAIRS).sort_by(key).equals(pq.read_table(right).cast(PAIRS).sort_by(key))


def subset_size(runs_path: str, below: str) -> int:
    return pq.read_table(runs_path, columns=["problem_id"], filters=[("problem_id", "<", below)]).num_rows


def gib(size: float) -> str:
    return f"{size / 2**30:.2f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--problems", type=int, default=60_000)
    parser.add_argument("--subset-runs", type=int, default=100_000, help="runs in the pandas subset (whole problems)")
    args = parser.parse_args()
    runs_path, labels_path = (str(p) for p in generate(args.runs, args.problems))
    below = subset_filter(args.problems, args.subset_runs, args.runs)
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="orchrm-pairs-bench-") as tmp:
        out = {name: str(Path(tmp, f"{name}.parquet")) for name in ("ours", "ours_subset", "pandas_subset", "pandas")}
        results = {
            "scan": in_child(read_and_hash, runs_path),
            "ours": in_child(duckdb_build, runs_path, labels_path, out["ours"], None),
            "ours_subset": in_child(duckdb_build, runs_path, labels_path, out["ours_subset"], below),
            "pandas_subset": in_child(pandas_build, runs_path, labels_path, out["pandas_subset"], below),
        }
        results["agree_subset"] = same_pairs(out["ours_subset"], out["pandas_subset"])
        scale = args.runs / subset_size(runs_path, below)
        rss_limit = min(PANDAS_FULL_LIMIT_RSS, 0.6 * psutil.virtual_memory().available)
        results["pandas"] = None
        if results["pandas_subset"]["seconds"] * scale <= PANDAS_FULL_LIMIT_S:
            results["pandas"] = in_child(pandas_build, runs_path, labels_path, out["pandas"], None, rss_limit=rss_limit)
        if results["pandas"]:
            results["agree_full"] = same_pairs(out["ours"], out["pandas"])
        jsonl = str(Path(tmp, "published.jsonl"))
        results["texts"] = in_child(pair_texts_step, runs_path, out["ours"])
        results["export"] = in_child(export_step, runs_path, out["ours"], jsonl)
        results["import"] = in_child(import_step, jsonl)
    report(args, results, scale, rss_limit)


def report(args, results: dict, scale: float, rss_limit: float) -> None:
    ours, scan, subset, naive = results["ours"], results["scan"], results["pandas_subset"], results["pandas"]
    stats = ours["stats"]
    print(f"data: {args.runs:,} runs, {stats.problems:,} problems, every plan unique, 1-3 KB")
    print(f"pairs: {stats.total:,} {stats.by_source}; by split {stats.pairs}; candidates {stats.candidates}; "
          f"after caps {stats.after_caps}; conflicts dropped {stats.conflicts:,}; identical-plan pairs skipped "
          f"{stats.identical_plans_skipped:,}")
    print("note: build_pairs reads the precomputed plan_hash column (BLAKE2b of the whitespace-normalised plan, "
          "computed once at ingestion); the pandas baseline hashes every plan text itself, as a naive one would")
    print("                                   wall s    CPU s")
    print(f"(a) DuckDB build_pairs          {ours['seconds']:9.2f} {ours['cpu']:8.2f}   "
          f"peak RSS {gib(ours['peak_rss'])} (target < 4 GiB)")
    print(f"(c) DuckDB read + md5 each plan {scan['seconds']:9.2f} {scan['cpu']:8.2f}   "
          f"({scan['distinct']:,} distinct plans)")
    if naive:
        print(f"(b) pandas baseline, full set   {naive['seconds']:9.2f} {naive['cpu']:8.2f}   "
              f"peak RSS {gib(naive['peak_rss'])}")
        naive_wall, naive_cpu = naive["seconds"], naive["cpu"]
    else:
        naive_wall, naive_cpu = subset["seconds"] * scale, subset["cpu"] * scale
        print(f"(b) pandas baseline, EXTRAPOLATED linearly (x{scale:.2f}) from a subset of whole problems: "
              f"{naive_wall:.2f} s wall, {naive_cpu:.2f} s CPU; the full set was not run (over "
              f"{PANDAS_FULL_LIMIT_S // 60} min estimated, or its RSS passed {gib(rss_limit)})")
    ours_subset = results["ours_subset"]
    print(f"    subset of {args.runs / scale:,.0f} runs: pandas {subset['seconds']:.2f} s "
          f"(peak RSS {gib(subset['peak_rss'])}) vs DuckDB {ours_subset['seconds']:.2f} s")
    agreement = [f"subset {results['agree_subset']}"] + ([f"full set {results['agree_full']}"] if naive else [])
    print(f"    identical pairs from both implementations: {', '.join(agreement)}")
    print(f"ratio pandas / build_pairs:      wall {naive_wall / ours['seconds']:6.1f}x   "
          f"CPU {naive_cpu / ours['cpu']:6.1f}x   (target >= 20x)")
    print(f"ratio build_pairs / read+hash:   wall {ours['seconds'] / scan['seconds']:6.2f}x   "
          f"CPU {ours['cpu'] / scan['cpu']:6.2f}x   (target <= 3x)")
    texts, export, imported = results["texts"], results["export"], results["import"]
    print(f"(d) Polars pair texts           {texts['seconds']:9.2f} {texts['cpu']:8.2f}   "
          f"peak RSS {gib(texts['peak_rss'])} ({texts['rows']:,} pairs with question and both plans)")
    print(f"    Polars export (published)   {export['seconds']:9.2f} {export['cpu']:8.2f}   "
          f"peak RSS {gib(export['peak_rss'])} ({export['rows']:,} records, {gib(export['bytes'])} of JSONL)")
    print(f"    import (published)          {imported['seconds']:9.2f} {imported['cpu']:8.2f}   "
          f"peak RSS {gib(imported['peak_rss'])} ({imported['rows']:,} pairs, {imported['rejected']} rejected)")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
