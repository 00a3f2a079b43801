"""Benchmark problems: the shipped benchmarks (provenance in data/benchmarks/SOURCES.md) and the `problems` table."""

from orchrm_dagster.problems.shipped import SHIPPED_BENCHMARKS, load_shipped, shipped_benchmark_path
from orchrm_dagster.problems.table import (ProblemRecord, ProblemSet, ProblemsSettings, ReferenceAnswer, load_problems,
                                           problem_sources, problem_table, reference_answers)

__all__ = [
    "ProblemRecord", "ProblemSet", "ProblemsSettings", "ReferenceAnswer", "SHIPPED_BENCHMARKS", "load_problems",
    "load_shipped", "problem_sources", "problem_table", "reference_answers", "shipped_benchmark_path",
]
