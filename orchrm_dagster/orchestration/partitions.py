"""Which benchmark and policy partition keys should exist (pure: the sensor and the CLI apply it)."""

from __future__ import annotations

from orchrm_dagster.storage.root import StorageRoot


def wanted_benchmarks(root: StorageRoot) -> list[str]:
    from orchrm_dagster.problems import load_problems, problem_sources

    path = root.table_file("problems")
    table = root.read_table(path, ["benchmark"]) if root.exists(path) else load_problems(problem_sources([])).table
    return sorted(set(table.column("benchmark").to_pylist()))


def missing_keys(wanted: list[str], existing: list[str]) -> list[str]:
    have = set(existing)
    return [key for key in wanted if key not in have]
