import dagster as dg

from orchrm_dagster.glue.run_configs import PairsConfig, RewardModelConfig, ScoringConfig
from orchrm_dagster.glue.partitions import GPU_POOL, WAREHOUSE_POOL
from orchrm_dagster.glue.deployment import CPU_STEP, GPU_STEP
from orchrm_dagster.glue.resources import StorageResource
from orchrm_dagster.pairs import build_pairs_table
from orchrm_dagster.reporting import markdown_table


@dg.asset(deps=["runs", "labels"], group_name="reward_model", kinds={"duckdb", "parquet", "polars"},
          pool=WAREHOUSE_POOL, op_tags=CPU_STEP)
def pairs(context: dg.AssetExecutionContext, config: PairsConfig, storage: StorageResource):
    """Deduplicated win-lose plan pairs (specialized-over-base, correct-over-incorrect), split by problem."""
    outcome = build_pairs_table(storage.storage_root(), storage.warehouse(), config.to_engine())
    storage.warehouse().refresh_views(("pairs", "imported_pairs"))
    for line in outcome.import_rejections[:20]:
        context.log.warning(f"imported pair skipped: {line}")
    stats = outcome.stats
    rows = [(source, splits.get("train", 0), splits.get("validation", 0)) for source, splits in stats.pairs.items()]
    return dg.MaterializeResult(metadata={
        "dagster/row_count": stats.total,
        "by_source": dg.MetadataValue.md(markdown_table(["source", "train", "validation"], rows)),
        "candidates_before_caps": dg.MetadataValue.json(stats.candidates),
        "conflicts_dropped": stats.conflicts,
        "identical_plans_skipped": stats.identical_plans_skipped,
        "problems_with_pairs": stats.problems_with_pairs,
        "imported_pairs": outcome.imported,
        "seconds": round(stats.seconds, 3),
    })


@dg.asset(deps=["pairs"], group_name="reward_model", kinds={"pytorch", "python"}, pool=GPU_POOL, op_tags=GPU_STEP)
def reward_model(context: dg.AssetExecutionContext, config: RewardModelConfig, storage: StorageResource):
    """A Bradley-Terry reward model trained on the pairs: a new checkpoint version, champion only if it is as good
    as the current champion on the current validation pairs."""
    from orchrm_dagster.rm import checkpoint_table, train_on_current_pairs

    root = storage.storage_root()
    outcome = train_on_current_pairs(root, config.to_engine())
    storage.warehouse().refresh_views(("rm_checkpoints",))
    metrics = outcome.metrics
    versions = checkpoint_table(root).to_pylist()
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
        "train_pairs": outcome.train_pairs,
        "validation_pairs": outcome.validation_pairs,
        "pairs_per_second": round(outcome.pairs_per_second, 2),
        "checkpoint": outcome.path,
        "versions": dg.MetadataValue.md(markdown_table(
            ["version", "val acc", "champion", "pairs"],
            [(r["version"], r["val_accuracy"], r["is_champion"], r["n_train_pairs"]) for r in versions])),
    })


@dg.asset(deps=["reward_model", "runs"], group_name="reward_model", kinds={"pytorch", "parquet"},
          pool=WAREHOUSE_POOL, op_tags=GPU_STEP)
def rm_scores(context: dg.AssetExecutionContext, config: ScoringConfig, storage: StorageResource):
    """The champion's score of every ingested run (run batches it already scored are kept)."""
    from orchrm_dagster.rm import score_runs

    report = score_runs(storage.storage_root(), config.to_engine())
    storage.warehouse().refresh_views(("rm_scores",))
    return dg.MaterializeResult(metadata={
        "rm_version": report.version,
        "runs_scored": report.runs_scored,
        "batches_scored": report.batches_scored,
        "batches_already_current": report.batches_current,
        "plans_per_second": round(report.runs_scored / report.seconds, 1) if report.seconds else 0.0,
    })
