"""The `pairs` step: build the pairs table from the warehouse, import published pairs, and keep the rules used."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa

from orchrm_dagster.contract import IMPORTED_PAIRS
from orchrm_dagster.pairs.build import PairStats, build_pairs
from orchrm_dagster.pairs.published import KnownProblems, import_published, normalise_source, write_published
from orchrm_dagster.pairs.rules import SPLITS, PairRules
from orchrm_dagster.pairs.texts import pair_texts
from orchrm_dagster.storage import StorageRoot, Warehouse, read_index, scan_table

RULES_FILE = "rules.json"
INPUTS_FILE = "inputs.txt"  # the ingested batches (the batch index's `inputs`) the pairs were built from
BATCHES_FILE = "batches.json"  # the same batches, each with its runs' generation (the batch index's `generations`)
BUILD_MEMORY_LIMIT = "2GB"


@dataclass(frozen=True)
class PairContext:
    """What the pairs step is told by the units above it, which know policies and problems (the `pairs` asset
    computes it)."""

    # checkpoint policies this root promoted on measured held-out accuracy: their runs win specialized-over-base
    # pairs (`rules.policy_side`)
    verified_checkpoints: tuple[str, ...] = ()
    # (problem_id, question) of problems known beyond the runs and problems tables (the shipped benchmarks), which
    # imported pairs are matched to
    known_problems: tuple[tuple[str, str], ...] = ()
    # problems the evaluation or the rounds hold out: an imported pair on one is left out of training
    held_out_problems: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PairsOutcome:
    stats: PairStats
    imported: int
    import_rejections: list[str]
    imported_matched: int = 0  # imported pairs matched to a known problem (they carry its id)
    imported_held_out: int = 0  # imported pairs left out: their problem is held out
    held_out_examples: list[str] = field(default_factory=list)  # "file:line: problem_id" of the first few


def build_pairs_table(root: StorageRoot, warehouse: Warehouse, rules: PairRules,
                      context: PairContext = PairContext()) -> PairsOutcome:
    """Rebuilds `pairs` from the current runs and labels, and `imported_pairs` from `rules.import_files`; saves the
    rules beside the pairs (`load_rules` reads them back) and which ingested batches they were built from."""
    index = read_index(root)  # taken before the build: a batch replaced meanwhile makes them stale
    with tempfile.TemporaryDirectory(prefix="orchrm-pairs-") as staging:
        out = str(Path(staging, "pairs.parquet"))
        with warehouse.scratch_connection(("runs", "labels"), memory_limit=BUILD_MEMORY_LIMIT) as con:
            stats = build_pairs(con, rules, out, verified_checkpoints=context.verified_checkpoints)
        with root.atomic_writer(root.table_file("pairs")) as target:
            root.fs.put_file(out, target)
    save_rules(root, rules)
    imported = _import_files(root, rules, context)
    with root.atomic_writer(root.path("tables", "pairs", BATCHES_FILE)) as target, root.fs.open(target, "w") as out:
        json.dump(index.generations, out, sort_keys=True)  # before the inputs: read by them (`pairs_batches`)
    with root.atomic_writer(root.path("tables", "pairs", INPUTS_FILE)) as target, root.fs.open(target, "w") as out:
        out.write(index.inputs)
    return PairsOutcome(stats, imported.table.num_rows, imported.rejected, imported.matched, imported.held_out,
                        list(imported.held_out_examples))


def pairs_inputs(root: StorageRoot) -> str | None:
    """The ingested inputs the current pairs were built from (None: no pairs built yet)."""
    path = root.path("tables", "pairs", INPUTS_FILE)
    if not root.exists(path):
        return None
    with root.fs.open(path, "r") as src:
        return src.read()


_BATCHES: dict[tuple[str, str], dict[str, str]] = {}


def pairs_batches(root: StorageRoot, built_from: str | None = None) -> dict[str, str] | None:
    """batch id -> runs generation of each batch the current pairs were built from (None: no pairs, or pairs built
    before this was recorded). Read once per pairs build (`built_from`, their `pairs_inputs`, when known): the
    loop asks every tick."""
    built_from = pairs_inputs(root) if built_from is None else built_from
    path = root.path("tables", "pairs", BATCHES_FILE)
    if built_from is None:
        return None
    key = (root.url, built_from)
    if key not in _BATCHES:
        if not root.exists(path):
            return None
        if len(_BATCHES) > 16:
            _BATCHES.clear()
        with root.fs.open(path, "r") as src:
            _BATCHES[key] = json.load(src)
    return _BATCHES[key]


def current_pair_ids(root: StorageRoot) -> pl.DataFrame:
    """The pair_id of every pair reward-model training would read now (built and imported)."""
    return pl.concat([scan_table(root, table).select("pair_id") for table in ("pairs", "imported_pairs")]).collect()


def save_rules(root: StorageRoot, rules: PairRules) -> None:
    with root.atomic_writer(_rules_path(root)) as target, root.fs.open(target, "w") as out:
        json.dump(dataclasses.asdict(rules), out)


def load_rules(root: StorageRoot) -> PairRules:
    """The rules the current pairs were built with."""
    path = _rules_path(root)
    if not root.exists(path):
        raise FileNotFoundError(f"{root.uri('tables', 'pairs', RULES_FILE)}: no pairs built yet (materialize `pairs`)")
    with root.fs.open(path, "r") as src:
        return PairRules(**json.load(src))


def _rules_path(root: StorageRoot) -> str:
    return root.path("tables", "pairs", RULES_FILE)


@dataclass(frozen=True)
class _Imported:
    table: pa.Table
    rejected: list[str]
    matched: int
    held_out: int
    held_out_examples: list[str]


def _import_files(root: StorageRoot, rules: PairRules, context: PairContext) -> _Imported:
    problems = known_problems(root, context) if rules.import_files else KnownProblems()
    results = [import_published(path, rules, root=root, problems=problems) for path in rules.import_files]
    table = pl.concat([r.table for r in results]).to_arrow() if results else IMPORTED_PAIRS.empty_table()
    imported = _Imported(table, [line for r in results for line in r.rejected], sum(r.matched for r in results),
                         sum(r.held_out for r in results), [e for r in results for e in r.held_out_examples][:10])
    target = root.table_file("imported_pairs")
    if results or root.exists(target):
        root.write_table(table.cast(IMPORTED_PAIRS), target)
    return imported


def known_problems(root: StorageRoot, context: PairContext = PairContext()) -> KnownProblems:
    """Every problem an imported pair can be matched to: those of `context` (the shipped benchmarks), of the
    problems table and of the ingested runs, with the problems `context` holds out."""
    tables = [scan_table(root, table).select("problem_id", "question").unique("problem_id")
              for table in ("problems", "runs")]
    rows = pl.concat(tables).unique().collect().iter_rows()
    return KnownProblems.of([*context.known_problems, *rows], context.held_out_problems)


def training_pair_texts(root: StorageRoot) -> pl.DataFrame:
    """Every pair (built and imported) with its texts, as reward-model training reads them."""
    imported = scan_table(root, "imported_pairs")
    return pair_texts(scan_table(root, "pairs"), scan_table(root, "runs"), imported).collect()


def export_pairs(root: StorageRoot, path: str, fmt: str | None = None, sources: Collection[str] = (),
                 splits: Collection[str] = ()) -> int:
    """Write every pair reward-model training reads now (built and imported; only those of `sources` and `splits`
    when given) to `path` in the published OrchRM format, JSONL or Parquet (`fmt`, else PATH's suffix), a local
    path or a URL; returns the count. `import_files` reads the file back as the same pairs."""
    unknown = sorted(set(splits) - set(SPLITS))
    if unknown:
        raise ValueError(f"split {', '.join(unknown)}: choose from {', '.join(SPLITS)}")
    texts = training_pair_texts(root)
    if sources:
        wanted = {normalise_source(s) for s in sources}
        present = set(texts["source"].unique().to_list())
        if wanted - present:  # a misspelt source would otherwise write an empty file and succeed
            raise ValueError(f"source {', '.join(sorted(wanted - present))}: no pair has it; the pairs' sources are "
                             f"{', '.join(sorted(present)) or '(none)'}")
        texts = texts.filter(pl.col("source").is_in(sorted(wanted)))
    if splits:
        texts = texts.filter(pl.col("split").is_in(list(splits)))
    return write_published(texts, path, fmt, root)
