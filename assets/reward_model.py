import dagster as dg

from orchrm_dagster.glue.run_configs import PairsConfig, RewardModelConfig, ScoringConfig
from orchrm_dagster.glue.partitions import GPU_POOL, WAREHOUSE_POOL
from orchrm_dagster.glue.deployment import CPU_STEP, GPU_STEP
from orchrm_dagster.glue.resources import StorageResource
from orchrm_dagster.glue.training_logs import training_logs_metadata
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
    """Bradley-Terry reward models trained on the pairs: new checkpoint versions (one shared model, or one per
    domain), each champion of the domains (math, qa, choice) where it does as well as that domain's champion on the
    domain's validation pairs."""
    from orchrm_dagster.rm import checkpoint_table, train_on_current_pairs

    root = storage.storage_root()
    outcomes = train_on_current_pairs(root, config.to_engine())
    storage.warehouse().refresh_views(("rm_checkpoints",))
    versions = checkpoint_table(root).to_pylist()
    champion_now = {d: r["version"] for r in versions for d in r["champion_of"]}
    return dg.MaterializeResult(metadata={
        "trained_versions": [o.version for o in outcomes],
        # the pairs each version trained and validated on, saved beside it (the `rm_training_pairs` view)
        "training_pairs": {str(o.version): {"path": o.training_pairs, "train_rows": o.train_pairs,
                                            "validation_rows": o.validation_pairs,
                                            "pair_set_fingerprint": o.pair_set_fingerprint} for o in outcomes},
        "retrained_from": config.retrain_from_version,
        "champion_of": {str(o.version): list(o.champion_of) for o in outcomes},
        **training_logs_metadata([config.to_engine().training_logs(o.path) for o in outcomes]),
        "champions": dg.MetadataValue.md(markdown_table(
            ["domain", "champion", "trained", "its accuracy", "previous champion", "its accuracy", "pairs judged on"],
            [(d, champion_now.get(d), o.version, v.accuracy, v.champion, v.champion_accuracy, v.pairs)
             for o in outcomes for d, v in o.verdicts.items()])),
        "trained": dg.MetadataValue.md(markdown_table(
            ["version", "stands for", "train pairs", "validation pairs", "val acc", "ece", "length spearman",
             "pairs/s", "checkpoint"],
            [(o.version, ", ".join(o.domains), o.train_pairs, o.validation_pairs, o.metrics.get("val_accuracy"),
              o.metrics.get("ece"), o.metrics.get("length_spearman"), round(o.pairs_per_second, 2), o.path)
             for o in outcomes])),
        "accuracy_by_source": dg.MetadataValue.md(markdown_table(
            ["version", "source", "accuracy"],
            [(o.version, source, accuracy) for o in outcomes
             for source, accuracy in sorted((o.metrics.get("accuracy_by_source") or {}).items())])),
        "versions": dg.MetadataValue.md(markdown_table(
            ["version", "domains", "champion of", "val acc", "val acc by domain", "pairs"],
            [(r["version"], ", ".join(r["domains"]), ", ".join(r["champion_of"]), r["val_accuracy"],
              r["val_accuracy_by_domain"], r["n_train_pairs"]) for r in versions])),
    })


@dg.asset(deps=["reward_model", "runs"], group_name="reward_model", kinds={"pytorch", "parquet"},
          pool=WAREHOUSE_POOL, op_tags=GPU_STEP)
def rm_scores(context: dg.AssetExecutionContext, config: ScoringConfig, storage: StorageResource):
    """Every ingested run's score by the champion of its domain (run batches already scored so are kept)."""
    from orchrm_dagster.rm import score_runs

    report = score_runs(storage.storage_root(), config.to_engine())
    storage.warehouse().refresh_views(("rm_scores",))
    return dg.MaterializeResult(metadata={
        "champions": report.champions,
        "runs_by_domain": report.runs_by_domain,
        "runs_without_champion": report.runs_without_champion,
        "runs_scored": report.runs_scored,
        "batches_scored": report.batches_scored,
        "batches_already_current": report.batches_current,
        "plans_per_second": round(report.runs_scored / report.seconds, 1) if report.seconds else 0.0,
    })
