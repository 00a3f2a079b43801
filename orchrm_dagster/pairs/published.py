"""Export pairs to, and import pairs from, the published OrchRM pair format.

A published record is {"input": question, "chosen": plan, "rejected": plan, "source": ...}: one JSON line of a
JSONL file, or one row of a Parquet file with those four string columns. Files are local paths or URLs (s3://...);
one in the storage root's object store is reached with the root's endpoint and credentials.

An imported pair is matched to a known problem by its question (`rules.question_key`): a matched pair takes that
problem's id, so the split and the leakage checks see it; a pair on a problem held out elsewhere is left out and
counted; an unmatched pair keeps a stable id, the hash of its question.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import fsspec
from fsspec.implementations.local import LocalFileSystem
import orjson
import polars as pl
import pyarrow.parquet as pq

from orchrm_dagster.contract import IMPORTED_PAIRS, plan_hash
from orchrm_dagster.pairs.rules import PairRules, pair_id, question_key, split_for
from orchrm_dagster.pairs.texts import pair_texts
from orchrm_dagster.storage import StorageRoot, written_whole

PUBLISHED_FIELDS = ("input", "chosen", "rejected", "source")
PUBLISHED_FORMATS = ("jsonl", "parquet")
PARQUET_MAGIC = b"PAR1"  # a Parquet file's first (and last) four bytes
_SUFFIX_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
_IMPORTED_SCHEMA = pl.from_arrow(IMPORTED_PAIRS.empty_table()).schema


@dataclass(frozen=True)
class KnownProblems:
    """The problems an imported pair can be matched to, by `question_key`: key -> their ids (sorted; one question
    may be known under several ids)."""

    ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    held_out: frozenset[str] = frozenset()  # problem ids whose pairs are left out of training

    @classmethod
    def of(cls, problems: Iterable[tuple[str, str]], held_out: Collection[str] = ()) -> KnownProblems:
        """From (problem_id, question) rows."""
        ids: dict[str, set[str]] = {}
        for problem_id, question in problems:
            if problem_id and question:
                ids.setdefault(question_key(question), set()).add(problem_id)
        return cls({key: tuple(sorted(found)) for key, found in ids.items()}, frozenset(held_out))

    def match(self, question: str) -> tuple[str, ...]:
        return self.ids.get(question_key(question), ())


@dataclass(frozen=True)
class ImportedPairs:
    table: pl.DataFrame  # IMPORTED_PAIRS rows, in file order
    rejected: list[str]  # "file:line: reason" for every line that was skipped
    matched: int = 0  # pairs of `table` whose question matched a known problem (they carry its id)
    held_out: int = 0  # pairs left out: their question is a problem held out (the evaluation's, the rounds')
    held_out_examples: tuple[str, ...] = ()  # "file:line: problem_id" of the first few


def export_published(pairs: pl.LazyFrame, runs: pl.LazyFrame, out_jsonl: str) -> int:
    """Write the pairs as published records, texts from `runs` (`write_published`); returns the count."""
    return write_published(pair_texts(pairs, runs).collect(), out_jsonl, "jsonl")


def published_format(path: str, fmt: str | None = None) -> str:
    """`fmt` when given, else the format PATH's suffix names (.jsonl, .ndjson, .json: jsonl; .parquet: parquet)."""
    if fmt is not None:
        if fmt not in PUBLISHED_FORMATS:
            raise ValueError(f"format {fmt!r}: choose from {', '.join(PUBLISHED_FORMATS)}")
        return fmt
    suffix = os.path.splitext(path.rstrip("/"))[1].lower()
    if suffix not in _SUFFIX_FORMATS:
        raise ValueError(f"{path}: cannot tell the format from the suffix {suffix or '(none)'!r}; name a "
                         f".jsonl or .parquet file, or give the format ({' or '.join(PUBLISHED_FORMATS)})")
    return _SUFFIX_FORMATS[suffix]


def write_published(texts: pl.DataFrame, path: str, fmt: str | None = None, root: StorageRoot | None = None) -> int:
    """Write pair texts (PAIR_TEXT_COLUMNS rows) as published records to `path` (JSONL or Parquet, local or a URL);
    returns the count. A record repeated word for word is written once; records are sorted by their texts, so the
    same pairs give the same file. A reader never sees a partial file (an object store publishes an upload whole; a local
    file is renamed into place)."""
    fmt = published_format(path, fmt)
    records = (texts.select(pl.col("question").alias("input"), pl.col("chosen_plan").alias("chosen"),
                            pl.col("rejected_plan").alias("rejected"), "source")
               .unique(maintain_order=False)
               .sort(PUBLISHED_FIELDS))
    fs, target = file_system(path, root)
    fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
    with written_whole(target, local=isinstance(fs, LocalFileSystem)) as partial, fs.open(partial, "wb") as out:
        if fmt == "parquet":
            records.write_parquet(out, compression="zstd")
        else:
            records.write_ndjson(out)
    return records.height


def file_system(path: str, root: StorageRoot | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, path within it) of a local path or URL: the storage root's own filesystem for a file in its
    object store, so its endpoint and credentials apply."""
    if root is not None and not root.is_local and path.startswith(f"{root.protocol}://"):
        return root.fs, path.split("://", 1)[1]
    return fsspec.core.url_to_fs(path)


def import_published(path: str, rules: PairRules, batch_rows: int = 10_000, root: StorageRoot | None = None,
                     problems: KnownProblems = KnownProblems()) -> ImportedPairs:
    """Read published records (JSONL, or Parquet, told by its magic bytes; a row of a Parquet file counts as
    its line). A record whose input matches one of `problems` takes that problem's id (the lowest, when the question
    is known under several), else the hash of its input (whitespace-normalised); it is split by the same rule as
    built pairs. A record on a problem `problems` holds out (under any of its ids) is left out and counted. A
    repeated (input, chosen, rejected, source) is kept once, at its first line."""
    rejected: list[str] = []
    frames: list[pl.DataFrame] = []
    batch: list[tuple] = []
    for number, record in _numbered_records(path, batch_rows, root):
        if isinstance(record, str):
            rejected.append(f"{path}:{number}: {record}")
            continue
        batch.append((number, *(record[name] for name in PUBLISHED_FIELDS)))
        if len(batch) == batch_rows:  # texts are held compactly in Arrow; Python objects only for one batch
            frames.append(_imported_rows(batch, rules, rejected, path, problems))
            batch = []
    frames.append(_imported_rows(batch, rules, rejected, path, problems))
    table = pl.concat(frames).with_columns(first=pl.col("line").min().over("pair_id", "source"))
    duplicates = table.filter(pl.col("line") != pl.col("first")).select("line", "first")
    rejected += [f"{path}:{line}: duplicate of line {first}" for line, first in duplicates.iter_rows()]
    rejected.sort(key=lambda message: int(message[len(path) + 1:].split(":", 1)[0]))
    kept = table.filter(pl.col("line") == pl.col("first")).sort("line")
    held_out = kept.filter(pl.col("held_out"))
    kept = kept.filter(~pl.col("held_out"))
    return ImportedPairs(kept.select(_IMPORTED_SCHEMA.names()), rejected, matched=int(kept["matched"].sum()),
                         held_out=held_out.height,
                         held_out_examples=tuple(f"{path}:{line}: {problem}" for line, problem
                                                 in held_out.select("line", "problem_id").head(10).iter_rows()))


def _imported_rows(batch: list[tuple], rules: PairRules, rejected: list[str], path: str,
                   problems: KnownProblems) -> pl.DataFrame:
    """IMPORTED_PAIRS rows (plus `line`, `matched` and `held_out`) of one batch of valid records; a record whose
    plans are the same up to whitespace is reported in `rejected` and left out."""
    rows = []
    for number, question, chosen, rejected_plan, source in batch:
        chosen_hash, rejected_hash = plan_hash(chosen), plan_hash(rejected_plan)
        if chosen_hash == rejected_hash:
            rejected.append(f"{path}:{number}: chosen and rejected are the same plan (up to whitespace)")
            continue
        known = problems.match(question)
        problem_id = known[0] if known else plan_hash(question)
        rows.append((number, pair_id(problem_id, chosen_hash, rejected_hash), problem_id, question, chosen,
                     rejected_plan, chosen_hash, rejected_hash, normalise_source(source), split_for(problem_id, rules),
                     bool(known), not problems.held_out.isdisjoint(known)))
    return pl.DataFrame(rows, schema={"line": pl.Int64, **_IMPORTED_SCHEMA, "matched": pl.Boolean,
                                      "held_out": pl.Boolean}, orient="row")


def _numbered_records(path: str, batch_rows: int, root: StorageRoot | None) -> Iterator[tuple[int, dict | str]]:
    """(line or row number, the record or why it is refused) of every record of the file; blank lines skipped.
    Parquet is told by its magic bytes, whatever the file's name (`export-pairs --format parquet` to any path)."""
    fs, source = file_system(path, root)
    with fs.open(source, "rb") as stream:
        parquet = stream.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC
        stream.seek(0)
        if parquet:
            number = 0
            for batch in pq.ParquetFile(stream).iter_batches(batch_size=batch_rows):
                for row in batch.to_pylist():
                    number += 1
                    yield number, _checked_record(row)
            return
        for number, line in enumerate(stream, start=1):
            if line.strip():
                yield number, _published_record(line)


def _published_record(line: bytes) -> dict[str, str] | str:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        return f"not JSON ({error})"
    return _checked_record(record)


def _checked_record(record) -> dict[str, str] | str:
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
