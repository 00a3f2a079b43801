import dataclasses
import json
import tempfile
from pathlib import Path

import dagster as dg

from assets.configs import PairsConfig, RewardModelConfig, ScoringConfig
from assets.partitions import WAREHOUSE_POOL
from orchrm_dagster.pairs import build_pairs, import_published, pair_texts
from orchrm_dagster.reporting import markdown_table
from orchrm_dagster.resources import StorageResource

RULES_FILE = "rules.json"


@dg.asset(deps=["runs", "labels"], group_name="reward_model", kinds={"duckdb", "parquet"}, pool=WAREHOUSE_POOL)
def pairs(context: dg.AssetExecutionContext, config: PairsConfig, storage: StorageResource):
    """Deduplicated win-lose plan pairs (specialized-over-base, correct-over-incorrect), split by problem."""
    root = storage.storage_root()
    warehouse = storage.warehouse()
    rules = config.rules()
    with tempfile.TemporaryDirectory(prefix="orchrm-pairs-") as staging:
        out = str(Path(staging, "pairs.parquet"))
        with warehouse.scratch_connection(("runs", "labels"), memory_limit="2GB") as con:
            stats = build_pairs(con, rules, out)
        with root.atomic_writer(root.table_file("pairs")) as target:
            root.fs.put_file(out, target)
    with root.fs.open(root.path("tables", "pairs", RULES_FILE), "w") as rules_out:
        json.dump(dataclasses.asdict(rules), rules_out)
    imported = _import_pairs(context, root, config, rules)
    warehouse.refresh_views(("pairs", "imported_pairs"))
    rows = [(source, splits.get("train", 0), splits.get("validation", 0)) for source, splits in stats.pairs.items()]
    return dg.MaterializeResult(metadata={
        "dagster/row_count": stats.total,
        "by_source": dg.MetadataValue.md(markdown_table(["source", "train", "validation"], rows)),
        "candidates_before_caps": dg.MetadataValue.json(stats.candidates),
        "conflicts_dropped": stats.conflicts,
        "identical_plans_skipped": stats.identical_plans_skipped,
        "problems_with_pairs": stats.problems_with_pairs,
        "imported_pairs": imported,
        "seconds": round(stats.seconds, 3),
    })


def _import_pairs(context, root, config: PairsConfig, rules) -> int:
    import pyarrow as pa

    from orchrm_dagster.pairs import IMPORTED_PAIRS

    tables = []
    for path in config.import_files:
        result = import_published(path, rules)
        for line in result.rejected[:20]:
            context.log.warning(f"imported pair skipped: {line}")
        tables.append(result.table)
    table = pa.concat_tables(tables) if tables else IMPORTED_PAIRS.empty_table()
    target = root.table_file("imported_pairs")
    if tables or root.exists(target):
        root.write_table(table, target)
    return table.num_rows


@dg.asset(deps=["pairs"], group_name="reward_model", kinds={"pytorch", "python"})
def reward_model(context: dg.AssetExecutionContext, config: RewardModelConfig, storage: StorageResource):
    """A Bradley-Terry reward model trained on the pairs: a new checkpoint version, champion only if it is as good
    as the current champion on the current validation pairs."""
    from orchrm_dagster.rm.data import PairTexts
    from orchrm_dagster.rm.lifecycle import checkpoint_table, train_new_version

    root = storage.storage_root()
    warehouse = storage.warehouse()
    with warehouse.scratch_connection(("runs", "pairs", "imported_pairs")) as con:
        texts = pair_texts(con).to_arrow_table()
    train, validation = PairTexts.from_arrow(texts, "train"), PairTexts.from_arrow(texts, "validation")
    if config.max_train_pairs is not None and len(train) > config.max_train_pairs:
        train = train.select(sorted(range(len(train)), key=lambda i: train.pair_id[i])[: config.max_train_pairs])
    if len(train) == 0:
        raise ValueError("no training pairs: ingest runs from more than one policy kind, or with labels, first")
    context.log.info(f"training on {len(train)} pairs, validating on {len(validation)}")
    outcome = train_new_version(root, train, validation, config.train_config(), config.champion_margin)
    table = checkpoint_table(root)
    root.write_table(table, root.table_file("rm_checkpoints"))
    warehouse.refresh_views(("rm_checkpoints",))
    metrics = outcome.metrics
    return dg.MaterializeResult(metadata={
        "version": outcome.version,
        "is_champion": outcome.is_champion,
        "previous_champion": outcome.previous_champion,
        "val_accuracy": metrics.get("val_accuracy"),
        "champion_val_accuracy_same_pairs": outcome.champion_accuracy,
        "ece": metrics.get("ece"),
        "length_spearman": metrics.get("length_spearman"),
        "accuracy_by_source": dg.MetadataValue.md(markdown_table(
            ["source", "accuracy"], sorted((metrics.get("accuracy_by_source") or {}).items()))),
        "train_pairs": len(train),
        "validation_pairs": len(validation),
        "pairs_per_second": round(outcome.pairs_per_second, 2),
        "checkpoint": outcome.path,
        "versions": dg.MetadataValue.md(markdown_table(
            ["version", "val acc", "champion", "pairs"],
            [(r["version"], r["val_accuracy"], r["is_champion"], r["n_train_pairs"]) for r in table.to_pylist()])),
    })


@dg.asset(deps=["reward_model", "runs"], group_name="reward_model", kinds={"pytorch", "parquet"},
          pool=WAREHOUSE_POOL)
def rm_scores(context: dg.AssetExecutionContext, config: ScoringConfig, storage: StorageResource):
    """The champion's score of every ingested run (run batches it already scored are kept)."""
    from orchrm_dagster.rm.lifecycle import score_runs

    report = score_runs(storage.storage_root(), config.device, config.max_length, config.batch_size)
    storage.warehouse().refresh_views(("rm_scores",))
    return dg.MaterializeResult(metadata={
        "rm_version": report.version,
        "runs_scored": report.runs_scored,
        "batches_scored": report.batches_scored,
        "batches_already_current": report.batches_current,
        "plans_per_second": round(report.runs_scored / report.seconds, 1) if report.seconds else 0.0,
    })
