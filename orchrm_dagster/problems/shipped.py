"""The benchmark problems shipped with the package (provenance in data/benchmarks/SOURCES.md)."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import orjson

SHIPPED_BENCHMARKS = ("aime24", "aime25", "gsm8k_test", "math500", "hotpotqa_dev")


def shipped_benchmark_path(name: str) -> Path:
    if name not in SHIPPED_BENCHMARKS:
        raise ValueError(f"unknown shipped benchmark {name!r}; shipped: {', '.join(SHIPPED_BENCHMARKS)}")
    return Path(str(files("orchrm_dagster") / "data" / "benchmarks" / f"{name}.jsonl"))


def iter_problem_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as src:
        for number, line in enumerate(src, start=1):
            if line.strip():
                yield number, line


def load_shipped(name: str) -> list[dict]:
    return [orjson.loads(line) for _, line in iter_problem_lines(shipped_benchmark_path(name))]
