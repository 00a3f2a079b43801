"""Export pairs to, and import pairs from, the published OrchRM pair format.

A published record is one JSON line: {"input": question, "chosen": plan, "rejected": plan, "source": ...}.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb
import orjson
import pyarrow as pa

import sql
from orchrm_dagster.ingest.flatten import plan_hash
from orchrm_dagster.pairs.build import build_settings, duckdb_settings
from orchrm_dagster.pairs.rules import PairRules, pair_id, split_for

PUBLISHED_FIELDS = ("input", "chosen", "rejected", "source")

IMPORTED_PAIRS = pa.schema(
    [
        ("pair_id", pa.string()),
        ("problem_id", pa.string()),
        ("question", pa.string()),
        ("chosen_plan", pa.string()),
        ("rejected_plan", pa.string()),
        ("chosen_plan_hash", pa.string()),
        ("rejected_plan_hash", pa.string()),
        ("source", pa.string()),
        ("split", pa.string()),
    ]
)


@dataclass(frozen=True)
class ImportedPairs:
    table: pa.Table  # IMPORTED_PAIRS rows, in file order
    rejected: list[str]  # "file:line: reason" for every line that was skipped


def export_published(con: duckdb.DuckDBPyConnection, pairs_path: str, out_jsonl: str, *,
                     memory_limit: str | None = None) -> int:
    """Write the pairs file at pairs_path as published records, texts from the `runs` relation; returns the
    count. Line order is unspecified (keeping it would hold every plan text in memory); settings as build_pairs."""
    query = sql.load("pairs_export_published", pairs=sql.literal(pairs_path), out=sql.literal(out_jsonl))
    with duckdb_settings(con, build_settings(memory_limit)):
        return con.execute(query).fetchall()[0][0]


def import_published(path: str, rules: PairRules, batch_rows: int = 10_000) -> ImportedPairs:
    """Read published records; a problem is identified by the hash of its input (whitespace-normalised),
    and split by the same rule as built pairs. A repeated (input, chosen, rejected, source) is kept once."""
    batches: list[pa.RecordBatch] = []
    rows: list[dict[str, str]] = []
    rejected: list[str] = []
    first_line: dict[tuple[str, str], int] = {}  # (pair_id, source) -> line kept
    with open(path, "rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            row = _imported_row(line, rules)
            if isinstance(row, dict) and (row["pair_id"], row["source"]) in first_line:
                row = f"duplicate of line {first_line[row['pair_id'], row['source']]}"
            if isinstance(row, str):
                rejected.append(f"{path}:{number}: {row}")
                continue
            first_line[row["pair_id"], row["source"]] = number
            rows.append(row)
            if len(rows) == batch_rows:  # Arrow holds the texts compactly; Python objects only for one batch
                batches.append(pa.RecordBatch.from_pylist(rows, schema=IMPORTED_PAIRS))
                rows = []
    batches.append(pa.RecordBatch.from_pylist(rows, schema=IMPORTED_PAIRS))
    return ImportedPairs(pa.Table.from_batches(batches, schema=IMPORTED_PAIRS), rejected)


def _imported_row(line: bytes, rules: PairRules) -> dict[str, str] | str:
    """The row of one published line, or why the line is skipped."""
    record = _published_record(line)
    if isinstance(record, str):
        return record
    chosen_hash, rejected_hash = plan_hash(record["chosen"]), plan_hash(record["rejected"])
    if chosen_hash == rejected_hash:
        return "chosen and rejected are the same plan (up to whitespace)"
    problem_id = plan_hash(record["input"])
    return {
        "pair_id": pair_id(problem_id, chosen_hash, rejected_hash),
        "problem_id": problem_id,
        "question": record["input"],
        "chosen_plan": record["chosen"],
        "rejected_plan": record["rejected"],
        "chosen_plan_hash": chosen_hash,
        "rejected_plan_hash": rejected_hash,
        "source": normalise_source(record["source"]),
        "split": split_for(problem_id, rules),
    }


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

