"""Benchmark problems: the shipped files plus any user file in the same JSONL schema."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, ValidationError

from orchrm_dagster.contract import PROBLEMS
from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.labels import answer_type_for
from orchrm_dagster.problems.shipped import SHIPPED_BENCHMARKS, iter_problem_lines, shipped_benchmark_path
from orchrm_dagster.storage import StorageRoot


@engine_config
class ProblemsSettings:
    extra_files: tuple[str, ...] = Field(
        default=(), description="More problem files (JSONL, the shipped benchmarks' schema)")


class ProblemRecord(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    problem_id: str = Field(min_length=1)
    benchmark: str = Field(min_length=1)
    split: str | None = None
    question: str
    answer: str
    choices: list[str] | None = None
    meta: dict[str, Any] | None = None


@dataclass(frozen=True)
class ReferenceAnswer:
    answer: str
    answer_type: str
    choices: tuple[str, ...] | None


@dataclass
class ProblemSet:
    table: pa.Table
    rejected: list[str]  # "file:line: reason" for every line that was not loaded


def problem_sources(extra_files: list[str], shipped: tuple[str, ...] = SHIPPED_BENCHMARKS) -> list[Path]:
    return [shipped_benchmark_path(name) for name in shipped] + [Path(p).expanduser() for p in extra_files]


def load_problems(sources: list[Path]) -> ProblemSet:
    rows: dict[str, dict] = {}
    rejected: list[str] = []
    for path in sources:
        if not path.is_file():
            rejected.append(f"{path}: file not found")
            continue
        for number, line in iter_problem_lines(path):
            try:
                problem = ProblemRecord.model_validate_json(line)
            except ValidationError as err:
                first = err.errors(include_url=False)[0]
                where = ".".join(str(p) for p in first["loc"]) or "record"
                rejected.append(f"{path.name}:{number}: {where}: {first['msg']}")
                continue
            if problem.problem_id in rows:
                first_source = rows[problem.problem_id]["source"]
                rejected.append(f"{path.name}:{number}: problem_id {problem.problem_id} already loaded from {first_source}")
                continue
            rows[problem.problem_id] = _problem_row(problem, f"{path.name}:{number}")
    columns = {name: [row[name] for row in rows.values()] for name in PROBLEMS.names}
    return ProblemSet(pa.Table.from_pydict(columns, schema=PROBLEMS), rejected)


def _problem_row(problem: ProblemRecord, source: str) -> dict:
    meta = {**(problem.meta or {}), **(problem.model_extra or {})}
    return {
        "problem_id": problem.problem_id,
        "benchmark": problem.benchmark,
        "split": problem.split,
        "question": problem.question,
        "answer": problem.answer,
        "answer_type": answer_type_for(problem.benchmark, problem.answer, problem.choices),
        "choices": problem.choices,
        "meta": orjson.dumps(meta).decode() if meta else None,
        "source": source,
    }


def problem_table(root: StorageRoot, columns: list[str] | None = None) -> pa.Table:
    """The materialized `problems` table, or the shipped benchmarks when it is not materialized yet."""
    path = root.table_file("problems")
    if root.exists(path):
        return root.read_table(path, columns)
    table = load_problems(problem_sources([])).table
    return table.select(columns) if columns else table


def reference_answers(problems: pa.Table) -> dict[str, ReferenceAnswer]:
    columns = problems.select(["problem_id", "answer", "answer_type", "choices"]).to_pydict()
    return {
        pid: ReferenceAnswer(answer, kind, tuple(choices) if choices else None)
        for pid, answer, kind, choices in zip(columns["problem_id"], columns["answer"], columns["answer_type"],
                                              columns["choices"])
    }
