"""Export pairs to, and import pairs from, the published OrchRM pair format.

A published record is one JSON line: {"input": question, "chosen": plan, "rejected": plan, "source": ...}.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson
import polars as pl

from orchrm_dagster.contract import IMPORTED_PAIRS, plan_hash
from orchrm_dagster.pairs.rules import PairRules, pair_id, split_for
from orchrm_dagster.pairs.texts import pair_texts

PUBLISHED_FIELDS = ("input", "chosen", "rejected", "source")
_IMPORTED_SCHEMA = pl.from_arrow(IMPORTED_PAIRS.empty_table()).schema


@dataclass(frozen=True)
class ImportedPairs:
    table: pl.DataFrame  # IMPORTED_PAIRS rows, in file order
    rejected: list[str]  # "file:line: reason" for every line that was skipped


def export_published(pairs: pl.LazyFrame, runs: pl.LazyFrame, out_jsonl: str) -> int:
    """Write the pairs as published records, texts from `runs`; returns the count. Line order is unspecified."""
    records = pair_texts(pairs, runs).select(
        pl.col("question").alias("input"), pl.col("chosen_plan").alias("chosen"),
        pl.col("rejected_plan").alias("rejected"), "source")
    records.sink_ndjson(out_jsonl, maintain_order=False)
    ids = runs.select("run_id")
    return (pairs.join(ids, left_on="chosen_run_id", right_on="run_id", how="semi")
            .join(ids, left_on="rejected_run_id", right_on="run_id", how="semi")
            .select(pl.len()).collect().item())


def import_published(path: str, rules: PairRules, batch_rows: int = 10_000) -> ImportedPairs:
    """Read published records; a problem is identified by the hash of its input (whitespace-normalised), and split
    by the same rule as built pairs. A repeated (input, chosen, rejected, source) is kept once, at its first line."""
    rejected: list[str] = []
    frames: list[pl.DataFrame] = []
    batch: list[tuple] = []
    with open(path, "rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            record = _published_record(line)
            if isinstance(record, str):
                rejected.append(f"{path}:{number}: {record}")
                continue
            batch.append((number, *(record[name] for name in PUBLISHED_FIELDS)))
            if len(batch) == batch_rows:  # texts are held compactly in Arrow; Python objects only for one batch
                frames.append(_imported_rows(batch, rules, rejected, path))
                batch = []
    frames.append(_imported_rows(batch, rules, rejected, path))
    table = pl.concat(frames).with_columns(first=pl.col("line").min().over("pair_id", "source"))
    duplicates = table.filter(pl.col("line") != pl.col("first")).select("line", "first")
    rejected += [f"{path}:{line}: duplicate of line {first}" for line, first in duplicates.iter_rows()]
    rejected.sort(key=lambda message: int(message[len(path) + 1:].split(":", 1)[0]))
    kept = table.filter(pl.col("line") == pl.col("first")).sort("line")
    return ImportedPairs(kept.select(_IMPORTED_SCHEMA.names()), rejected)


def _imported_rows(batch: list[tuple], rules: PairRules, rejected: list[str], path: str) -> pl.DataFrame:
    """IMPORTED_PAIRS rows (plus `line`) of one batch of valid records; a record whose plans are the same up to
    whitespace is reported in `rejected` and left out."""
    rows = []
    for number, question, chosen, rejected_plan, source in batch:
        chosen_hash, rejected_hash = plan_hash(chosen), plan_hash(rejected_plan)
        if chosen_hash == rejected_hash:
            rejected.append(f"{path}:{number}: chosen and rejected are the same plan (up to whitespace)")
            continue
        problem_id = plan_hash(question)
        rows.append((number, pair_id(problem_id, chosen_hash, rejected_hash), problem_id, question, chosen,
                     rejected_plan, chosen_hash, rejected_hash, normalise_source(source), split_for(problem_id, rules)))
    return pl.DataFrame(rows, schema={"line": pl.Int64, **_IMPORTED_SCHEMA}, orient="row")


def _published_record(line: bytes) -> dict[str, str] | str:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        return f"not JSON ({error})"
    if not isinstance(record, dict):
        return f"not a JSON object but {type(record).__name__}"
    for name in PUBLISHED_FIELDS:
        if name not in record:
            return f"missing field {name!r}"
        if not isinstance(record[name], str):
            return f"field {name!r} is {type(record[name]).__name__}, not a string"
        if not record[name].strip():
            return f"field {name!r} is empty"
    return record


def normalise_source(source: str) -> str:
    """'Specialized-over-base' and 'specialized_over_base' are the same source."""
    return re.sub(r"[^a-z0-9]+", "_", source.strip().lower()).strip("_")
