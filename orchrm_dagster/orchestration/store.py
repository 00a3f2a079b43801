"""Plan samples as Parquet (one folder per (benchmark, policy) partition), and the problems sampling draws from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract import ORCHESTRATION_SAMPLES
from orchrm_dagster.orchestration.sampling import PlanSample, Problem
from orchrm_dagster.problems import problem_table
from orchrm_dagster.storage import StorageRoot, safe_name

SAMPLES_TABLE = "orchestration_samples"


@dataclass(frozen=True)
class Cell:
    """One (benchmark, policy) cell of the runner's work: the engine names its files (an orchestrator's partition
    key stays in the orchestrator's layer)."""

    benchmark: str
    policy: str

    @property
    def folder(self) -> str:
        return safe_name(f"{self.benchmark}|{self.policy}")


def execution_batch_name(cell: Cell, settings=None) -> str:
    """The landing-zone file the executed runs of one (benchmark, policy) cell land as (Best-of-N executions land
    apart, as `...-best-of-N.jsonl`)."""
    suffix = f"-best-of-{settings.best_of_n}" if settings is not None and settings.selection == "orchrm_bon" else ""
    return f"mas-{cell.folder}{suffix}.jsonl"


def read_samples(root: StorageRoot, cell: Cell) -> list[PlanSample]:
    names = {f.name for f in dataclasses.fields(PlanSample)}
    samples = []
    for part in root.batch_files(SAMPLES_TABLE, cell.folder):
        with root.fs.open(part, "rb") as src:
            samples += [PlanSample(**{k: v for k, v in row.items() if k in names})
                        for row in pq.read_table(src).to_pylist()]
    return samples


def write_samples(root: StorageRoot, cell: Cell, samples: list[PlanSample]) -> None:
    table = pa.Table.from_pylist([dataclasses.asdict(s) for s in samples], schema=ORCHESTRATION_SAMPLES)
    with tempfile.TemporaryDirectory() as staging:
        path = str(Path(staging, "samples.parquet"))
        pq.write_table(table, path, compression="zstd")
        root.replace_batch(SAMPLES_TABLE, cell.folder, [path])


def select_problems(root: StorageRoot, benchmark: str, limit: int, problem_ids: tuple[str, ...] = ()) -> list[Problem]:
    """The first `limit` problems of a benchmark in file order, or exactly `problem_ids` when given."""
    rows = [r for r in problem_table(root).to_pylist() if r["benchmark"] == benchmark]
    if not rows:
        raise ValueError(f"no problems of benchmark {benchmark!r}; materialize `problems` (with extra_files) first")
    if problem_ids:
        wanted = set(problem_ids)
        rows = [r for r in rows if r["problem_id"] in wanted]
        missing = wanted - {r["problem_id"] for r in rows}
        if missing:
            raise ValueError(f"benchmark {benchmark!r} has no problems {sorted(missing)}")
    else:
        rows = rows[:limit]
    return [Problem(r["problem_id"], r["benchmark"], r["question"], r["answer"], r["answer_type"],
                    tuple(r["choices"]) if r.get("choices") else None) for r in rows]


def benchmarks_available(root: StorageRoot) -> list[str]:
    """Every benchmark of the problems table (or of the shipped benchmarks before it is materialized)."""
    return sorted(set(problem_table(root, ["benchmark"]).column("benchmark").to_pylist()))
